package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

// DeletionEventType is the eventType of the event that tells an endpoint its event
// subscription was deleted (eventgrid-behaviour.md §5.4; the data is
// SubscriptionDeletedEventData in the Azure SDKs' system events).
const DeletionEventType = "Microsoft.EventGrid.SubscriptionDeletedEvent"

// DeletionRequest describes the notification Event Grid sends a WebHook endpoint when its event
// subscription is deleted: a POST with aeg-event-type: SubscriptionDeletion whose event has
// eventType [DeletionEventType], an empty subject, dataVersion "1" and data
// {"eventSubscriptionId": "<the subscription's ARM id>"}.
type DeletionRequest struct {
	// URL is the endpoint, query string included.
	URL string
	// Subscription is the event subscription's name (sent upper case in
	// aeg-subscription-name, as deliveries are).
	Subscription string
	// SubscriptionID is the deleted subscription's ARM resource id, the event's data.
	SubscriptionID string
	// TopicID is the event's topic (the CloudEvent's source).
	TopicID string
	// EventID is the event's id.
	EventID string
	// Time is the event's time.
	Time time.Time
	// CloudEvents sends the event as a structured-mode CloudEvent
	// (application/cloudevents+json) instead of an Event Grid schema array, for subscriptions
	// that deliver CloudEvents.
	CloudEvents bool
	// Origin, when set, is sent as the Origin header (see [Config.Origin]).
	Origin string
	// Headers are the destination's custom headers; the static ones are sent.
	Headers sinks.HeaderMappings
	// Timeout bounds the call; zero means [sinks.DefaultTimeout].
	Timeout time.Duration
}

// NotifyDeletion sends the SubscriptionDeletion notification: one attempt. It returns nil when
// the endpoint answered 2xx and a *[HandshakeError] otherwise; the caller decides what a failure
// means (Event Grid gives no guarantee for this notification). client nil means [SharedClient].
func NotifyDeletion(ctx context.Context, client *http.Client, dr DeletionRequest) error {
	u, err := parseURL(dr.URL)
	if err != nil {
		return err
	}
	display := displayURL(u)
	data := map[string]string{"eventSubscriptionId": dr.SubscriptionID}
	t := dr.Time.UTC().Format(time.RFC3339Nano)
	var body []byte
	contentType := schemas.ContentTypeJSON
	if dr.CloudEvents {
		contentType = schemas.ContentTypeCloudEvent
		body, err = json.Marshal(struct {
			SpecVersion string            `json:"specversion"`
			Type        string            `json:"type"`
			Source      string            `json:"source"`
			ID          string            `json:"id"`
			Time        string            `json:"time"`
			DataSchema  string            `json:"dataschema"`
			ContentType string            `json:"datacontenttype"`
			Data        map[string]string `json:"data"`
		}{"1.0", DeletionEventType, dr.TopicID, dr.EventID, t, "#1", "application/json", data})
	} else {
		body, err = json.Marshal([]struct {
			ID              string            `json:"id"`
			Topic           string            `json:"topic"`
			Subject         string            `json:"subject"`
			Data            map[string]string `json:"data"`
			EventType       string            `json:"eventType"`
			EventTime       string            `json:"eventTime"`
			MetadataVersion string            `json:"metadataVersion"`
			DataVersion     string            `json:"dataVersion"`
		}{{dr.EventID, dr.TopicID, "", data, DeletionEventType, t, "1", "1"}})
	}
	if err != nil {
		return err
	}
	h := make(http.Header)
	for name, value := range dr.Headers.Static() {
		if validHeaderName(name) && validHeaderValue(value) {
			h.Set(name, value)
		}
	}
	schema := schemas.EventGrid
	if dr.CloudEvents {
		schema = schemas.CloudEvents
	}
	protocol, err := schemas.DeliveryHeaders{
		EventType: schemas.EventTypeSubscriptionDeletion, Schema: schema, Subscription: dr.Subscription,
		ContentType: contentType, Event: &schemas.Event{ID: dr.EventID, DataVersion: "1"},
	}.Append(nil)
	if err != nil {
		return err
	}
	for _, p := range protocol {
		h.Set(p.Name, p.Value)
	}
	if dr.Origin != "" {
		h.Set(hdrOrigin, dr.Origin)
	}
	resp, _, herr := roundTrip(ctx, client, http.MethodPost, dr.URL, display, h, body, dr.Timeout, "the SubscriptionDeletion event", false)
	if herr != nil {
		return herr
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &HandshakeError{
			Outcome: schemas.OutcomeForStatus(resp.StatusCode), StatusCode: resp.StatusCode,
			Reason: fmt.Sprintf("%s answered %s to the SubscriptionDeletion event", display, statusOf(resp)),
		}
	}
	return nil
}
