package testkit

import (
	"encoding/json"
	"time"
)

// EventOption sets a field of an event built by [EventGridEvent] or [CloudEvent].
type EventOption func(map[string]any)

// ID sets the event id.
func ID(id string) EventOption { return func(m map[string]any) { m["id"] = id } }

// Subject sets the subject.
func Subject(s string) EventOption { return func(m map[string]any) { m["subject"] = s } }

// Type sets the event type (eventType or type).
func Type(t string) EventOption {
	return func(m map[string]any) {
		if _, ok := m["specversion"]; ok {
			m["type"] = t
			return
		}
		m["eventType"] = t
	}
}

// Data sets the data.
func Data(v any) EventOption { return func(m map[string]any) { m["data"] = v } }

// Field sets any top-level field.
func Field(name string, v any) EventOption { return func(m map[string]any) { m[name] = v } }

// EventGridEvent builds an Event Grid schema event with every required field set: a fresh id
// (evt-N), subject /test, eventType Test.Event, the current (virtual) time and data {}.
func (h *Harness) EventGridEvent(opts ...EventOption) json.RawMessage {
	m := map[string]any{
		"id": h.nextID(), "subject": "/test", "eventType": "Test.Event",
		"eventTime": time.Now().UTC().Format(time.RFC3339Nano), "data": map[string]any{}, "dataVersion": "1.0",
	}
	return build(m, opts)
}

// CloudEvent builds a CloudEvents 1.0 event with a fresh id, source /test and type Test.Event.
func (h *Harness) CloudEvent(opts ...EventOption) json.RawMessage {
	m := map[string]any{
		"specversion": "1.0", "id": h.nextID(), "source": "/test", "type": "Test.Event",
		"time": time.Now().UTC().Format(time.RFC3339Nano), "datacontenttype": "application/json", "data": map[string]any{},
	}
	return build(m, opts)
}

func build(m map[string]any, opts []EventOption) json.RawMessage {
	for _, o := range opts {
		o(m)
	}
	raw, err := json.Marshal(m)
	if err != nil {
		panic(err) // only values the options put in
	}
	return raw
}
