package schemas

import (
	"errors"
	"fmt"
	"slices"
)

// EncodeBatch appends to dst the body of one delivery request carrying events, all published
// in input schema in, delivered in schema out (SPEC §2.3, §4), and returns it with its
// Content-Type (a ContentType* constant).
//
//   - EventGrid out: a JSON array of Event Grid objects, [ContentTypeJSON]. From Event Grid
//     input these are the events' Raw objects; from custom input, Event Grid envelopes
//     {"id","topic","subject","eventType","eventTime","data","dataVersion","metadataVersion":"1"}
//     whose data is the published object (eventgrid-behaviour.md §2.3).
//   - CloudEvents out: a single event as one object with [ContentTypeCloudEvent], several as a
//     JSON array with [ContentTypeCloudEventsBatch]. From CloudEvents input these are the Raw
//     objects. From Event Grid input each event is converted:
//     {"specversion":"1.0","type":eventType,"source":topic,"id","time":eventTime,"subject",
//     "dataschema":"#"+dataVersion,"datacontenttype":"application/json","data":data}, where
//     subject is left out when empty (CloudEvents forbids an empty subject) and dataschema is
//     "#" when dataVersion is empty, as Azure sends it (with the bytes of dataVersion that a
//     URI fragment cannot hold, and '%', percent-encoded, so dataschema is a URI-reference
//     that [DecodeDeadLetters] turns back into dataVersion exactly). CloudEvents SDKs that
//     require dataschema to be an absolute URI (sdk-go) refuse such events from Azure and
//     egrid alike. Custom input converts the same way from its Event Grid envelope.
//   - Custom out (only from custom input): a JSON array of the Raw objects, [ContentTypeJSON].
//
// topic is topicID, or the event's Source when topicID is empty. A pair that [CanDeliver]
// refuses, or an empty events, is an error; an event that cannot be converted (its Raw is not
// the object its schema says) is an *[EncodeError] with its index. [Encoding.AppendBatch] adds
// the batch framing of subscriptions with batching on. This is the delivery hot path: bodies are built
// with append, only the Event Grid → CloudEvents conversion scans Raw (to find data), and dst
// grows at most once.
func EncodeBatch(dst []byte, in, out Schema, topicID string, events []*Event) (body []byte, contentType string, err error) {
	return EncodeBatchWith(dst, in, out, topicID, events, EncodeOptions{})
}

// EncodeOptions are egrid's extensions to the delivery encoding; the zero value encodes as
// Azure does.
type EncodeOptions struct {
	// OmitConvertedDataSchema leaves dataschema out of Event Grid and custom-schema events
	// delivered as CloudEvents, instead of Azure's "#"+dataVersion, for receivers that require
	// dataschema to be an absolute URI and refuse Azure's (the CloudEvents Go SDK:
	// cloudevents/sdk-go#615).
	OmitConvertedDataSchema bool
}

// EncodeBatchWith is [EncodeBatch] with egrid's encoding extensions.
func EncodeBatchWith(dst []byte, in, out Schema, topicID string, events []*Event, opts EncodeOptions) (body []byte, contentType string, err error) {
	if !CanDeliver(in, out) {
		return dst, "", fmt.Errorf("encoding a delivery batch: events published in %s cannot be delivered in %s: CloudEvents input is delivered only as CloudEvents, and only custom input can use CustomInputSchema", in, out.DeliveryName())
	}
	if len(events) == 0 {
		return dst, "", errors.New("encoding a delivery batch: no events")
	}
	converting := in != out
	size := len(events) + 1
	for _, e := range events {
		size += len(e.Raw)
		if converting {
			size += 160 + len(e.ID) + len(e.Type) + len(e.Subject) + len(e.Time) + len(e.DataVersion) + max(len(topicID), len(e.Source))
		}
	}
	dst = slices.Grow(dst, size)

	if out == CloudEvents && len(events) == 1 {
		dst, err = appendCloudEvent(dst, in, topicID, events[0], opts.OmitConvertedDataSchema)
		if err != nil {
			return dst, "", &EncodeError{Index: 0, Err: err}
		}
		return dst, ContentTypeCloudEvent, nil
	}
	dst = append(dst, '[')
	for i, e := range events {
		if i > 0 {
			dst = append(dst, ',')
		}
		switch {
		case !converting:
			dst = append(dst, e.Raw...)
		case out == EventGrid: // from Custom
			dst = appendEventGridEnvelope(dst, topicOf(topicID, e), e)
		default: // CloudEvents from EventGrid or Custom
			if dst, err = appendCloudEvent(dst, in, topicID, e, opts.OmitConvertedDataSchema); err != nil {
				return dst, "", &EncodeError{Index: i, Err: err}
			}
		}
	}
	dst = append(dst, ']')
	if out == CloudEvents {
		return dst, ContentTypeCloudEventsBatch, nil
	}
	return dst, ContentTypeJSON, nil
}

// MetadataVersion returns the aeg-metadata-version header value of a delivery in schema out
// (eventgrid-behaviour.md §5.1): "1" for Event Grid and custom schemas, the CloudEvents
// specversion "1.0" for CloudEvents, "" for an unknown schema.
func MetadataVersion(out Schema) string {
	switch out {
	case EventGrid, Custom:
		return metadataVersionEG
	case CloudEvents:
		return specVersionCE
	}
	return ""
}

func topicOf(topicID string, e *Event) string {
	if topicID != "" {
		return topicID
	}
	return e.Source
}

// appendCloudEvent appends e, published in schema in, as a CloudEvent object; a converted
// event has no dataschema when omitDataSchema is set.
func appendCloudEvent(dst []byte, in Schema, topicID string, e *Event, omitDataSchema bool) ([]byte, error) {
	switch in {
	case CloudEvents:
		return append(dst, e.Raw...), nil
	case EventGrid:
		data, err := eventGridData(e.Raw)
		if err != nil {
			return dst, err
		}
		return appendConverted(dst, topicOf(topicID, e), e, data, omitDataSchema), nil
	}
	return appendConverted(dst, topicOf(topicID, e), e, e.Raw, omitDataSchema), nil // Custom: data is the object
}

// dataSchemaPrefix starts the dataschema of an Event Grid event converted to a CloudEvent.
const dataSchemaPrefix = "#"

// fragmentEscape returns v as a URI fragment: v itself when it is one (a dataVersion such as
// "1.0"), else with each byte a fragment cannot hold percent-encoded, so the dataschema of a
// converted event is a URI-reference, as [DecodeCloudEvents] requires of one published. A '%'
// is always encoded (%25), even before two hex digits, so [fragmentUnescape] gives v back.
func fragmentEscape(v string) string {
	ok := func(i int) bool {
		c := v[i]
		return c != '%' && c < 0x80 && uriChar(c) && c != '#' && c != '[' && c != ']'
	}
	i := 0
	for i < len(v) && ok(i) {
		i++
	}
	if i == len(v) {
		return v
	}
	b := make([]byte, 0, len(v)+8)
	b = append(b, v[:i]...)
	for ; i < len(v); i++ {
		if ok(i) {
			b = append(b, v[i])
		} else {
			b = append(b, pctEncode(v[i])...)
		}
	}
	return string(b)
}

// appendConverted appends the CloudEvent form of an Event Grid event (SPEC §4).
func appendConverted(dst []byte, topic string, e *Event, data []byte, omitDataSchema bool) []byte {
	dst = append(dst, `{"specversion":"1.0","type":`...)
	dst = appendString(dst, e.Type)
	dst = append(dst, `,"source":`...)
	dst = appendString(dst, topic)
	dst = append(dst, `,"id":`...)
	dst = appendString(dst, e.ID)
	if e.Time != "" {
		dst = append(dst, `,"time":`...)
		dst = appendString(dst, e.Time)
	}
	if e.Subject != "" {
		dst = append(dst, `,"subject":`...)
		dst = appendString(dst, e.Subject)
	}
	// Azure writes "#" followed by dataVersion ("#" when it is empty, "#1.0" for "1.0"): the
	// converted storage event on learn.microsoft.com/azure/event-grid/cloudevents-schema has
	// "dataschema": "#", and cloudevents/sdk-go#615 quotes a delivery carrying it.
	if !omitDataSchema {
		dst = append(dst, `,"dataschema":`...)
		dst = appendString(dst, dataSchemaPrefix+fragmentEscape(e.DataVersion))
	}
	dst = append(dst, `,"datacontenttype":"application/json","data":`...)
	dst = append(dst, data...)
	return append(dst, '}')
}

// appendEventGridEnvelope appends the Event Grid envelope of a custom-schema event, whose data
// is the published object (eventgrid-behaviour.md §2.3).
func appendEventGridEnvelope(dst []byte, topic string, e *Event) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, e.ID)
	dst = append(dst, `,"topic":`...)
	dst = appendString(dst, topic)
	dst = append(dst, `,"subject":`...)
	dst = appendString(dst, e.Subject)
	dst = append(dst, `,"eventType":`...)
	dst = appendString(dst, e.Type)
	dst = append(dst, `,"eventTime":`...)
	dst = appendString(dst, e.Time)
	dst = append(dst, `,"data":`...)
	dst = append(dst, e.Raw...)
	dst = append(dst, `,"dataVersion":`...)
	dst = appendString(dst, e.DataVersion)
	return append(dst, `,"metadataVersion":"1"}`...)
}

// eventGridData returns the bytes of the data member of an Event Grid object.
func eventGridData(raw []byte) ([]byte, error) {
	s := &scanner{buf: raw}
	s.skipWS()
	if s.peek() != '{' {
		return nil, errors.New("event is not an Event Grid object")
	}
	empty, _ := s.objectStart()
	for !empty {
		key, _, err := s.objectKey()
		if err != nil {
			return nil, fmt.Errorf("event is not a valid Event Grid object: %w", err)
		}
		start := s.pos
		if _, err := s.skipValue(1); err != nil {
			return nil, fmt.Errorf("event is not a valid Event Grid object: %w", err)
		}
		if string(key) == "data" {
			return s.buf[start:s.pos], nil
		}
		more, err := s.objectNext()
		if err != nil {
			return nil, fmt.Errorf("event is not a valid Event Grid object: %w", err)
		}
		empty = !more
	}
	return nil, errors.New("event is an Event Grid object without data")
}
