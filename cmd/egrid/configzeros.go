package main

import (
	"fmt"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/egridio/egrid/schemas/clip"
)

// zeroProbe reads, of a config's declared event subscriptions, the numeric settings whose 0
// means "not set" in a [router.SubscriptionSpec] (the default applies) as YAML nodes: a member
// left out is a zero Node. It is decoded leniently beside the strict
// decode (decodeConfig), which has judged everything else.
type zeroProbe struct {
	Topics []struct {
		EventSubscriptions []struct {
			Properties struct {
				RetryPolicy struct {
					MaxDeliveryAttempts      yaml.Node `yaml:"maxDeliveryAttempts"`
					EventTimeToLiveInMinutes yaml.Node `yaml:"eventTimeToLiveInMinutes"`
				} `yaml:"retryPolicy"`
				Destination struct {
					Properties struct {
						MaxEventsPerBatch             yaml.Node `yaml:"maxEventsPerBatch"`
						PreferredBatchSizeInKilobytes yaml.Node `yaml:"preferredBatchSizeInKilobytes"`
					} `yaml:"properties"`
				} `yaml:"destination"`
				DeliveryConfiguration struct {
					Queue struct {
						ReceiveLockDurationInSeconds yaml.Node `yaml:"receiveLockDurationInSeconds"`
						MaxDeliveryCount             yaml.Node `yaml:"maxDeliveryCount"`
					} `yaml:"queue"`
				} `yaml:"deliveryConfiguration"`
			} `yaml:"properties"`
		} `yaml:"eventSubscriptions"`
	} `yaml:"topics"`
}

// explicitZeros reports each event subscription setting that the config file raw (decoded as
// cfg) writes as 0 — maxDeliveryAttempts, eventTimeToLiveInMinutes, maxEventsPerBatch,
// preferredBatchSizeInKilobytes, and a queue's receiveLockDurationInSeconds and
// maxDeliveryCount — naming its place in the file and the range it takes. Decoded, a 0 is
// the same as a setting left out, and would silently take the default; Azure's ranges start
// above 0, and the admin API refuses a 0 in a body the same way.
func explicitZeros(raw []byte, cfg *fileConfig) []error {
	var probe zeroProbe
	_ = yaml.Unmarshal(raw, &probe) // the strict decode has reported what does not decode
	var errs []error
	for i, t := range probe.Topics {
		if i >= len(cfg.Topics) {
			break
		}
		for j, s := range t.EventSubscriptions {
			if j >= len(cfg.Topics[i].EventSubscriptions) {
				break
			}
			decl := cfg.Topics[i].EventSubscriptions[j]
			at := fmt.Sprintf("topics[%d].eventSubscriptions[%d] (%s): properties.", i, j, clip.Quote(decl.Name))
			refuse := func(n yaml.Node, key, use string) {
				if isZeroNode(&n) {
					errs = append(errs, fmt.Errorf("%s%s: line %d: 0 is out of range: use %s", at, key, n.Line, use))
				}
			}
			p := s.Properties
			lim := decl.Properties.RetryLimits(cfg.Topics[i].Properties)
			refuse(p.RetryPolicy.MaxDeliveryAttempts, "retryPolicy.maxDeliveryAttempts",
				fmt.Sprintf("1-%d for the %s retry profile, or leave it out for the default, %d", lim.MaxAttempts, lim.Profile, lim.DefaultAttempts))
			refuse(p.RetryPolicy.EventTimeToLiveInMinutes, "retryPolicy.eventTimeToLiveInMinutes",
				fmt.Sprintf("%d-%d for the %s retry profile, or leave it out for the default, %d", lim.MinTTL, lim.MaxTTL, lim.Profile, lim.DefaultTTL))
			refuse(p.Destination.Properties.MaxEventsPerBatch, "destination.properties.maxEventsPerBatch",
				"1-5000, or leave it out to deliver one event per request")
			refuse(p.Destination.Properties.PreferredBatchSizeInKilobytes, "destination.properties.preferredBatchSizeInKilobytes",
				"1-1024, or leave it out to deliver one event per request")
			refuse(p.DeliveryConfiguration.Queue.ReceiveLockDurationInSeconds, "deliveryConfiguration.queue.receiveLockDurationInSeconds",
				"60-300 seconds, or leave it out for the default, 60")
			refuse(p.DeliveryConfiguration.Queue.MaxDeliveryCount, "deliveryConfiguration.queue.maxDeliveryCount",
				"1-10, or leave it out for the default, 10")
		}
	}
	return errs
}

// isZeroNode reports whether n is a number written as 0 (0, 0.0, -0, 0e3, 0x0), directly or
// through an alias (*zero, of an anchor &zero 0), which decodes to the same 0.
func isZeroNode(n *yaml.Node) bool {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias // the parser refuses an alias to an anchor not yet complete, so this ends
	}
	if n == nil || n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") {
		return false
	}
	if i, err := strconv.ParseInt(n.Value, 0, 64); err == nil {
		return i == 0
	}
	f, err := strconv.ParseFloat(n.Value, 64)
	return err == nil && f == 0
}
