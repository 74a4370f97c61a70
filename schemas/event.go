package schemas

import (
	"fmt"
	"strings"

	"github.com/egridio/egrid/schemas/clip"
)

// Schema names an event schema: the input schema of a topic or the delivery schema of a
// subscription. The zero value means "not set" and is replaced by the default (EventGrid).
type Schema uint8

const (
	// EventGrid is Event Grid's own schema ("EventGridSchema").
	EventGrid Schema = iota + 1
	// CloudEvents is CloudEvents 1.0 in JSON ("CloudEventSchemaV1_0").
	CloudEvents
	// Custom is a custom JSON schema: "CustomEventSchema" as a topic's input schema,
	// "CustomInputSchema" as a subscription's delivery schema.
	Custom
)

// String returns the input-schema wire name ("EventGridSchema", "CloudEventSchemaV1_0",
// "CustomEventSchema").
func (s Schema) String() string {
	switch s {
	case EventGrid:
		return "EventGridSchema"
	case CloudEvents:
		return "CloudEventSchemaV1_0"
	case Custom:
		return "CustomEventSchema"
	}
	return fmt.Sprintf("Schema(%d)", uint8(s))
}

// DeliveryName returns the delivery-schema wire name; it differs from [Schema.String] only for
// Custom ("CustomInputSchema").
func (s Schema) DeliveryName() string {
	if s == Custom {
		return "CustomInputSchema"
	}
	return s.String()
}

// ParseInputSchema parses a topic's inputSchema, case-insensitively as ARM does. The empty
// string gives EventGrid.
func ParseInputSchema(v string) (Schema, error) {
	switch strings.ToLower(v) {
	case "", "eventgridschema":
		return EventGrid, nil
	case "cloudeventschemav1_0":
		return CloudEvents, nil
	case "customeventschema":
		return Custom, nil
	}
	return 0, fmt.Errorf("unknown input schema %q: use EventGridSchema, CloudEventSchemaV1_0 or CustomEventSchema", clip.String(v))
}

// ParseDeliverySchema parses a subscription's eventDeliverySchema, case-insensitively. The
// empty string gives 0 (use the default for the topic's input schema).
func ParseDeliverySchema(v string) (Schema, error) {
	switch strings.ToLower(v) {
	case "":
		return 0, nil
	case "eventgridschema":
		return EventGrid, nil
	case "cloudeventschemav1_0":
		return CloudEvents, nil
	case "custominputschema":
		return Custom, nil
	}
	return 0, fmt.Errorf("unknown event delivery schema %q: use EventGridSchema, CloudEventSchemaV1_0 or CustomInputSchema", clip.String(v))
}

// CanDeliver reports whether events published in schema in can be delivered in schema out
// (SPEC §4, the conversion matrix of eventgrid-behaviour.md §2.4).
func CanDeliver(in, out Schema) bool {
	switch in {
	case EventGrid:
		return out == EventGrid || out == CloudEvents
	case CloudEvents:
		return out == CloudEvents
	case Custom:
		return out == EventGrid || out == CloudEvents || out == Custom
	}
	return false
}

// Event is one accepted event. Its fields are immutable once decoded and it is shared between
// goroutines without copying.
//
// Raw is the event's JSON object as it will be delivered in its input schema: for Event Grid
// schema the normalised object with `topic` and `metadataVersion` stamped; for CloudEvents the
// structured-mode object (binary-mode events are turned into structured ones); for a custom
// schema the object exactly as published.
type Event struct {
	ID          string // id
	Type        string // eventType (Event Grid) or type (CloudEvents)
	Subject     string // subject
	Time        string // eventTime or time, RFC 3339 as published but with "T" and "Z" upper-case and a "+0000" offset as "+00:00" (as stored, for an event decoded from a dead-letter record)
	DataVersion string // dataVersion (Event Grid); empty for CloudEvents
	Source      string // source (CloudEvents); the topic (Event Grid)
	SpecVersion string // specversion (CloudEvents); empty for Event Grid
	Traceparent string // the traceparent extension, when the event carries one
	Raw         []byte // the JSON object, see above
}

// Size is the event's encoded size in bytes, the figure batching and limits count.
func (e *Event) Size() int { return len(e.Raw) }
