package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/egridio/egrid/router"
)

// explicitZeros refuses the subscription settings a PUT body sends as 0 — maxDeliveryAttempts,
// eventTimeToLiveInMinutes, maxEventsPerBatch and preferredBatchSizeInKilobytes, and a queue
// subscription's receiveLockDurationInSeconds and maxDeliveryCount — each with the range it
// takes. Azure's ranges start at 1 and it refuses 0; in a [router.SubscriptionSpec],
// whose fields are plain ints, 0 means "not set" (the default applies), so only the body can
// tell a 0 that was sent from a member that was left out. A member left out, or null, is not
// set and takes its default. topic is the subscription's topic: the retry profile a
// subscription leaves out is the topic's default, whose range maxDeliveryAttempts takes.
func explicitZeros(properties json.RawMessage, spec *router.SubscriptionSpec, topic router.TopicSpec) error {
	var errs []error
	retryPolicy := jsonMember(properties, "retryPolicy")
	if isZero(jsonMember(retryPolicy, "maxDeliveryAttempts")) || isZero(jsonMember(retryPolicy, "eventTimeToLiveInMinutes")) {
		lim := spec.RetryLimits(topic)
		if isZero(jsonMember(retryPolicy, "maxDeliveryAttempts")) {
			errs = append(errs, fmt.Errorf("retryPolicy.maxDeliveryAttempts 0 is out of range: use 1-%d for the %s profile, or leave it out for the default, %d",
				lim.MaxAttempts, lim.Profile, lim.DefaultAttempts))
		}
		if isZero(jsonMember(retryPolicy, "eventTimeToLiveInMinutes")) {
			errs = append(errs, fmt.Errorf("retryPolicy.eventTimeToLiveInMinutes 0 is out of range: use %d-%d for the %s profile, or leave it out for the default, %d",
				lim.MinTTL, lim.MaxTTL, lim.Profile, lim.DefaultTTL))
		}
	}
	destination := jsonMember(jsonMember(properties, "destination"), "properties")
	if isZero(jsonMember(destination, "maxEventsPerBatch")) {
		errs = append(errs, errors.New("destination.properties.maxEventsPerBatch 0 is out of range: use 1-5000, or leave it out to deliver one event per request"))
	}
	if isZero(jsonMember(destination, "preferredBatchSizeInKilobytes")) {
		errs = append(errs, errors.New("destination.properties.preferredBatchSizeInKilobytes 0 is out of range: use 1-1024, or leave it out to deliver one event per request"))
	}
	queue := jsonMember(jsonMember(properties, "deliveryConfiguration"), "queue")
	if isZero(jsonMember(queue, "receiveLockDurationInSeconds")) {
		errs = append(errs, errors.New("deliveryConfiguration.queue.receiveLockDurationInSeconds 0 is out of range: use 60-300, or leave it out for the default, 60"))
	}
	if isZero(jsonMember(queue, "maxDeliveryCount")) {
		errs = append(errs, errors.New("deliveryConfiguration.queue.maxDeliveryCount 0 is out of range: use 1-10, or leave it out for the default, 10"))
	}
	return errors.Join(errs...)
}

// jsonMember returns the member name of the JSON object raw, matched ignoring case as
// encoding/json matches it, or nil when raw is no object or has no such member.
func jsonMember(raw json.RawMessage, name string) json.RawMessage {
	if jsonShape(raw) != "an object" {
		return nil
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(raw, &members) != nil {
		return nil
	}
	if v, ok := members[name]; ok {
		return v
	}
	for k, v := range members {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return nil
}

// isZero reports whether raw is a JSON number equal to 0 (0, -0, 0.0, 0e5).
func isZero(raw json.RawMessage) bool {
	if jsonShape(raw) != "a number" {
		return false
	}
	var f float64
	return json.Unmarshal(raw, &f) == nil && f == 0
}
