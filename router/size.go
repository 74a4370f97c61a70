package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/egridio/egrid/router/filter"
)

// Size bounds of a subscription definition, checked on every create and update (admin API PUT,
// the YAML config of `egrid serve` and `egrid validate`, [Router.CreateSubscription]) with the
// filter's ([filter.CheckSize]). Without them a definition was bounded only by the
// 1 MB request body: a listing of a topic's subscriptions could reach hundreds of MB, and
// every delivery evaluated whatever filter was given.
//
// Event Grid documents 10 delivery attribute mappings of at most 4 096 bytes each
// (learn.microsoft.com/azure/event-grid/delivery-properties; [sinks.MaxHeaderMappings],
// [sinks.MaxHeaderValueBytes]) and none of the bounds below, so each is set well above what
// a definition needs. A definition stored before a bound existed still loads and delivers:
// restoring a subscription never checks them, and a create or update that leaves the stored
// definition as it is (the YAML config applied again at every start of egrid serve, a
// template deployed again) is not refused for them ([sameDefinition]); any change of it is,
// except for the endpointUrl: one that is the stored one is kept whatever else changes. Reads
// hide an endpointUrl's query string ([SubscriptionSpec.Redacted]), so a client that changes
// another property of a definition it read sends the URL back hidden and the update keeps the
// stored one; refusing it for its size would leave the subscription changeable only by a
// client that knows the secret in the URL.
const (
	// MaxLabels is the largest number of labels of one subscription.
	MaxLabels = 100
	// MaxLabelLength is the longest label, in characters (Unicode code points).
	MaxLabelLength = 256
	// MaxEndpointURLBytes is the longest WebHook endpointUrl, query string included: room
	// for a long secret or SAS token in the query string.
	MaxEndpointURLBytes = 4096
	// MaxHeaderNameBytes is the longest name of a delivery attribute mapping (an HTTP
	// header name).
	MaxHeaderNameBytes = 256
	// MaxSourceFieldLength is the longest sourceField of a Dynamic delivery attribute
	// mapping, in characters: the same bound as an advanced filter's key
	// ([filter.MaxKeyLength]), both being paths into the event.
	MaxSourceFieldLength = filter.MaxKeyLength
	// MaxResourceIDBytes is the longest deadLetterDestination.properties.resourceId (stored
	// and returned; egrid gives it no meaning): an ARM resource ID is far shorter.
	MaxResourceIDBytes = 1024
)

// checkSize reports every part of a new definition larger than its size bound, at once,
// each naming the property, its size and the bound; messages never repeat the oversize text
// (an endpoint URL or header may hold a secret). prev is the stored definition an update
// replaces (nil for a create): an endpointUrl that is prev's is not checked.
func (s *SubscriptionSpec) checkSize(prev *SubscriptionSpec) error {
	var errs []error
	if err := filter.CheckSize(s.Filter); err != nil {
		errs = append(errs, fmt.Errorf("filter: %w", err))
	}
	if n := len(s.Labels); n > MaxLabels {
		errs = append(errs, fmt.Errorf("labels: %d given, at most %d are allowed; remove %d", n, MaxLabels, n-MaxLabels))
	}
	for i, l := range s.Labels {
		if n := utf8.RuneCountInString(l); n > MaxLabelLength {
			errs = append(errs, fmt.Errorf("labels[%d]: %d characters, at most %d are allowed; use a shorter label", i, n, MaxLabelLength))
		}
	}
	p := &s.Destination.Properties
	kept := prev != nil && p.EndpointURL == prev.Destination.Properties.EndpointURL
	if n := len(p.EndpointURL); n > MaxEndpointURLBytes && !kept {
		errs = append(errs, fmt.Errorf("destination.properties.endpointUrl: %d bytes, at most %d are allowed; use a shorter URL", n, MaxEndpointURLBytes))
	}
	const path = "destination.properties.deliveryAttributeMappings"
	for i, m := range p.DeliveryAttributeMappings {
		if n := len(m.Name); n > MaxHeaderNameBytes {
			errs = append(errs, fmt.Errorf("%s[%d]: the header name has %d bytes, at most %d are allowed; use a shorter name", path, i, n, MaxHeaderNameBytes))
		}
		if n := utf8.RuneCountInString(m.Properties.SourceField); n > MaxSourceFieldLength {
			errs = append(errs, fmt.Errorf("%s[%d]: sourceField has %d characters, at most %d are allowed; use a shorter path", path, i, n, MaxSourceFieldLength))
		}
	}
	if d := s.DeadLetterDestination; d != nil {
		if n := len(d.Properties.ResourceID); n > MaxResourceIDBytes {
			errs = append(errs, fmt.Errorf("deadLetterDestination.properties.resourceId: %d bytes, at most %d are allowed; use the storage account's ARM resource ID", n, MaxResourceIDBytes))
		}
	}
	return errors.Join(errs...)
}

// sameDefinition reports whether spec, as a create or update would store it (hidden values
// filled in, read-only ones cleared), is the stored definition prev, compared as the store
// keeps them: their JSON.
func sameDefinition(spec, prev *SubscriptionSpec) bool {
	a, err := json.Marshal(spec)
	if err != nil {
		return false
	}
	b, err := json.Marshal(prev)
	return err == nil && bytes.Equal(a, b)
}
