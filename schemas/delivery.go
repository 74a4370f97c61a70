package schemas

import (
	"errors"
	"strconv"
	"strings"
)

// This file holds the wire rules of one delivery request in one place: its body
// ([Encoding.AppendBatch], with the CloudEvents batch framing), one event alone
// ([Encoding.AppendEvent], what a broker message carries) and its protocol headers
// ([AppendDeliveryHeaders]). Every sink builds its requests with them.

// Encoding says how a subscription's events are encoded for delivery (SPEC §2.3, §4).
type Encoding struct {
	// In is the topic's input schema, the schema of the events; Out the delivery schema.
	In, Out Schema
	// TopicID is the topic's resource ID: the topic of converted Event Grid envelopes and the
	// source of converted CloudEvents ("" falls back to each event's Source).
	TopicID string
	// Batched gives CloudEvents deliveries the batch framing (a JSON array,
	// [ContentTypeCloudEventsBatch]) also for a request that carries one event, so a
	// subscription with batching on hands its receiver one format (SPEC §2.3; Event Grid does
	// not document the framing of batched CloudEvents). Without it a single CloudEvent is sent
	// as one object ([ContentTypeCloudEvent]). Event Grid and custom deliveries are always
	// arrays.
	Batched bool
	// Options are egrid's extensions to the encoding; the zero value encodes as Azure does.
	Options EncodeOptions
}

// EncodeError reports an event that cannot be encoded in a delivery schema: the event's own
// fault (its stored bytes are not what its schema says), not the destination's.
type EncodeError struct {
	// Index is the event's position in the events being encoded.
	Index int
	// Err says what is wrong.
	Err error
}

// Error reads "event <index>: <cause>".
func (e *EncodeError) Error() string { return "event " + strconv.Itoa(e.Index) + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *EncodeError) Unwrap() error { return e.Err }

// AppendBatch appends to dst the body of one delivery request carrying events and returns it
// with its Content-Type (see [EncodeBatch] for the shapes, [EncodeBatchWith] for Options). An event that cannot be encoded
// gives an *[EncodeError] with its index.
func (e Encoding) AppendBatch(dst []byte, events []*Event) (body []byte, contentType string, err error) {
	if !e.Batched || e.Out != CloudEvents || len(events) != 1 {
		return EncodeBatchWith(dst, e.In, e.Out, e.TopicID, events, e.Options)
	}
	if !CanDeliver(e.In, e.Out) {
		return EncodeBatchWith(dst, e.In, e.Out, e.TopicID, events, e.Options) // for its error
	}
	start := len(dst)
	dst = append(dst, '[')
	dst, err = appendCloudEvent(dst, e.In, e.TopicID, events[0], e.Options.OmitConvertedDataSchema)
	if err != nil {
		return dst[:start], "", &EncodeError{Index: 0, Err: err}
	}
	return append(dst, ']'), ContentTypeCloudEventsBatch, nil
}

// AppendEvent appends ev alone, as one JSON object in the delivery schema — the element it
// would be in a batch body — and returns it with the Content-Type of a single event:
// [ContentTypeCloudEvent] for CloudEvents, [ContentTypeJSON] otherwise. Brokers publish one
// message per event with it.
func (e Encoding) AppendEvent(dst []byte, ev *Event) (body []byte, contentType string, err error) {
	if !CanDeliver(e.In, e.Out) {
		_, _, err := EncodeBatchWith(nil, e.In, e.Out, e.TopicID, []*Event{ev}, e.Options)
		return dst, "", err
	}
	start := len(dst)
	switch {
	case e.In == e.Out:
		dst = append(dst, ev.Raw...)
	case e.Out == EventGrid: // from Custom
		dst = appendEventGridEnvelope(dst, topicOf(e.TopicID, ev), ev)
	default: // CloudEvents from Event Grid or Custom
		if dst, err = appendCloudEvent(dst, e.In, e.TopicID, ev, e.Options.OmitConvertedDataSchema); err != nil {
			return dst[:start], "", &EncodeError{Index: 0, Err: err}
		}
	}
	if e.Out == CloudEvents {
		return dst, ContentTypeCloudEvent, nil
	}
	return dst, ContentTypeJSON, nil
}

// ContentType returns the Content-Type of a delivery request carrying n events (SPEC §2.3).
func (e Encoding) ContentType(n int) string {
	switch {
	case e.Out != CloudEvents:
		return ContentTypeJSON
	case n > 1 || e.Batched:
		return ContentTypeCloudEventsBatch
	}
	return ContentTypeCloudEvent
}

// HeaderContentType is the Content-Type header's name in the lower case [AppendDeliveryHeaders]
// gives every name in (brokers' message metadata uses it as it is).
const HeaderContentType = "content-type"

// Header is one delivery header: its lower-case name and its value.
type Header struct {
	Name, Value string
}

// HeaderError reports a delivery header that cannot be built from an event's value: the
// event's own fault, since no request can carry it.
type HeaderError struct {
	// Header is the header's name; Field the event field its value comes from.
	Header, Field string
	// Reason says what is wrong with the value (from [HeaderValueProblem]).
	Reason string
}

// Error reads `field "id" (header aeg-output-event-id): holds the control character ...`.
func (e *HeaderError) Error() string {
	return "field " + strconv.Quote(e.Field) + " (header " + e.Header + "): " + e.Reason
}

// DeliveryHeaders are the facts the protocol headers of one delivery request come from.
type DeliveryHeaders struct {
	// EventType is the aeg-event-type value; empty means [EventTypeNotification].
	EventType string
	// Schema is the delivery schema (0 means [EventGrid]).
	Schema Schema
	// Subscription is the subscription's name; aeg-subscription-name carries it in upper case.
	Subscription string
	// DeliveryCount is the number of earlier attempts (aeg-delivery-count).
	DeliveryCount int
	// ContentType is the request's media type.
	ContentType string
	// Event is the request's first event (nil for none): its id, dataVersion and traceparent
	// are sent.
	Event *Event
}

// Append appends to dst the protocol headers of the request (SPEC §2.4,
// eventgrid-behaviour.md §5.1), names in lower case, in this order: aeg-event-type
// (Notification unless set), aeg-subscription-name, aeg-delivery-count, aeg-metadata-version,
// content-type, then from the event aeg-output-event-id, aeg-data-version (not for CloudEvents
// deliveries), and traceparent with tracestate when the event carries the distributed-tracing
// extension: traceparent only when it is a W3C Trace Context one ([ValidTraceparent]), and
// with it the tracestate extension as [Tracestate] bounds it, when it is a valid one. Custom
// delivery headers are the sink's business ([HeaderValueProblem] tells which values can be sent); a sink sets these
// last so they win.
//
// A value from the event that cannot be sent — a control character, or longer than the
// publish limits [MaxIDBytes] and [MaxHeaderAttributeBytes] — gives a *[HeaderError] (joined,
// one per field) and dst unchanged: the event can never be delivered.
func (d DeliveryHeaders) Append(dst []Header) ([]Header, error) {
	schema := d.Schema
	if schema == 0 {
		schema = EventGrid
	}
	eventType := d.EventType
	if eventType == "" {
		eventType = EventTypeNotification
	}
	start := len(dst)
	dst = append(dst,
		Header{HeaderEventType, eventType},
		Header{HeaderSubscriptionName, strings.ToUpper(d.Subscription)},
		Header{HeaderDeliveryCount, strconv.Itoa(d.DeliveryCount)},
		Header{HeaderMetadataVersion, MetadataVersion(schema)},
		Header{HeaderContentType, d.ContentType},
	)
	ev := d.Event
	if ev == nil {
		return dst, nil
	}
	if err := CheckHeaderBound(schema, ev); err != nil {
		return dst[:start], err
	}
	dst = append(dst, Header{HeaderOutputEventID, ev.ID})
	if schema != CloudEvents {
		dst = append(dst, Header{HeaderDataVersion, ev.DataVersion})
	}
	if ValidTraceparent(ev.Traceparent) {
		dst = append(dst, Header{HeaderTraceparent, ev.Traceparent})
		if ts := Tracestate(tracestateOf(ev.Raw)); ts != "" {
			dst = append(dst, Header{HeaderTracestate, ts})
		}
	}
	return dst, nil
}

// CheckHeaderBound reports the values of ev that a delivery in schema out would carry in a
// header (as the first event of a request: id, dataVersion except for CloudEvents, a valid
// traceparent; the tracestate sent is one [Tracestate] made sendable)
// and that cannot be sent: one *[HeaderError] per value, joined, or nil. Such an event can
// never be delivered, whatever its position in a batch: a retry may put it first. Sinks check
// every event of a batch with it.
func CheckHeaderBound(out Schema, ev *Event) error {
	var errs []error
	check := func(name, field, v string, max int) {
		if reason := HeaderValueProblem(v, max); reason != "" {
			errs = append(errs, &HeaderError{Header: name, Field: field, Reason: reason})
		}
	}
	check(HeaderOutputEventID, "id", ev.ID, MaxIDBytes)
	if out != CloudEvents {
		check(HeaderDataVersion, "dataVersion", ev.DataVersion, MaxHeaderAttributeBytes)
	}
	if ValidTraceparent(ev.Traceparent) { // one that is not is not sent
		check(HeaderTraceparent, "traceparent", ev.Traceparent, MaxHeaderAttributeBytes)
	}
	return errors.Join(errs...)
}
