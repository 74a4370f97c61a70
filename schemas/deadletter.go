package schemas

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/egridio/egrid/schemas/clip"
)

// This file encodes and decodes dead-letter records (SPEC §5): the JSON objects a dead-letter
// object holds, one per event that ended without delivery.

// DeadLetterRecord is one dead-lettered event with the facts of its delivery (SPEC §5).
type DeadLetterRecord struct {
	// Event is the event, in the topic's input schema (as the router keeps it).
	Event *Event
	// Reason says why the delivery ended (deadLetterReason).
	Reason Reason
	// DeliveryAttempts counts the attempts made (0 when the event ended without one).
	DeliveryAttempts int
	// LastOutcome is the outcome of the last attempt (lastDeliveryOutcome); Probation when the
	// event ended without an attempt because of a probation.
	LastOutcome Outcome
	// LastHTTPStatus is the HTTP status of the last attempt, 0 when there was no HTTP answer.
	LastHTTPStatus int
	// PublishTime is when egrid accepted the event.
	PublishTime time.Time
	// LastAttemptTime is when the last attempt started; zero when no attempt was made.
	LastAttemptTime time.Time
}

// DeadLetterShape is the layout of a dead-letter record (SPEC §5, seeds 000 and 002).
type DeadLetterShape uint8

// Dead-letter record shapes.
const (
	// DeadLetterEventGrid is the Event Grid schema layout, also used for custom-schema
	// deliveries: the event object (custom events wrapped in an Event Grid envelope whose data
	// is the published object) plus deadLetterReason, deliveryAttempts, lastDeliveryOutcome,
	// lastHttpStatusCode, publishTime and lastDeliveryAttemptTime.
	DeadLetterEventGrid DeadLetterShape = iota + 1
	// DeadLetterCloudEvents is the CloudEvents layout: the CloudEvent plus the same facts as
	// lower-case top-level attributes (deadletterreason, deliveryattempts, ...).
	DeadLetterCloudEvents
	// DeadLetterNamespace is the namespace layout of seed 002:
	// {"deadLetterProperties":{deadletterreason, deliveryattempts, deliveryresult, publishutc,
	// deliveryattemptutc},"event":{...}}.
	DeadLetterNamespace
)

// String returns the shape's name.
func (s DeadLetterShape) String() string {
	switch s {
	case DeadLetterEventGrid:
		return "EventGrid"
	case DeadLetterCloudEvents:
		return "CloudEvents"
	case DeadLetterNamespace:
		return "Namespace"
	}
	return fmt.Sprintf("DeadLetterShape(%d)", uint8(s))
}

// DeadLetterFormat says how a subscription's dead letters are written.
type DeadLetterFormat struct {
	// Input is the topic's input schema: the schema of [DeadLetterRecord.Event].
	Input Schema
	// Delivery is the subscription's delivery schema: the records hold the event as it was
	// (or would have been) delivered.
	Delivery Schema
	// Namespace selects the namespace layout (namespace topics and the namespace profile).
	Namespace bool
	// TopicID is the topic's resource ID: the topic of Event Grid envelopes and the source of
	// converted CloudEvents.
	TopicID string
}

// Shape returns the record layout of the format.
func (f DeadLetterFormat) Shape() DeadLetterShape {
	switch {
	case f.Namespace:
		return DeadLetterNamespace
	case f.Delivery == CloudEvents:
		return DeadLetterCloudEvents
	}
	return DeadLetterEventGrid
}

// DeadLetterTimeLayout is the layout of the times in dead-letter records: UTC with seven
// fractional digits, as Event Grid writes them ("2020-08-13T17:18:14.0265758Z").
const DeadLetterTimeLayout = "2006-01-02T15:04:05.0000000Z"

// ContentTypeDeadLetters is the content type of a dead-letter object: a JSON array of records.
const ContentTypeDeadLetters = "application/json"

// Member names of the Event Grid layout, and their lower-case CloudEvents twins.
var (
	dlNamesEG = [...]string{"deadLetterReason", "deliveryAttempts", "lastDeliveryOutcome", "lastHttpStatusCode", "publishTime", "lastDeliveryAttemptTime"}
	dlNamesCE = [...]string{"deadletterreason", "deliveryattempts", "lastdeliveryoutcome", "lasthttpstatuscode", "publishtime", "lastdeliveryattempttime"}
)

const (
	dlReason = iota
	dlAttempts
	dlOutcome
	dlStatus
	dlPublish
	dlLastAttempt
)

// namespaceReasonText is the human text of a reason in the namespace layout, where Event Grid
// writes prose ("Maximum delivery attempts was exceeded.", seed 002). Each reason has its own
// text so that a record decodes back to its reason.
var namespaceReasonText = map[Reason]string{
	MaxDeliveryAttemptsExceeded:                    "Maximum delivery attempts was exceeded.",
	TimeToLiveExceeded:                             "Time to live was exceeded.",
	UndeliverableDueToHTTPBadRequest:               "Undeliverable due to HTTP bad request.",
	UndeliverableDueToClientError:                  "Undeliverable due to client error",
	UndeliverableDueToProbationCausedByClientError: "Undeliverable due to probation caused by client error.",
	DeadLetterDestinationUnavailable:               "Dead-letter destination was unavailable.",
	UndeliverableDueToEventContent:                 "Undeliverable because the event cannot be encoded or sent.",
	RejectedBySubscriber:                           "Event was rejected by the subscriber.",
}

// Reasons lists every [Reason] egrid writes, in a stable order.
var Reasons = []Reason{
	MaxDeliveryAttemptsExceeded, TimeToLiveExceeded, UndeliverableDueToHTTPBadRequest,
	UndeliverableDueToClientError, UndeliverableDueToProbationCausedByClientError,
	DeadLetterDestinationUnavailable, UndeliverableDueToEventContent, RejectedBySubscriber,
}

// ParseReason parses a dead-letter reason, case-insensitively.
func ParseReason(v string) (Reason, error) {
	for _, r := range Reasons {
		if strings.EqualFold(v, string(r)) {
			return r, nil
		}
	}
	names := make([]string, len(Reasons))
	for i, r := range Reasons {
		names[i] = string(r)
	}
	return "", fmt.Errorf("unknown dead-letter reason %q: use one of %s", clip.String(v), strings.Join(names, ", "))
}

// ParseOutcome parses an outcome's wire name (as [Outcome.String] writes it), case-insensitively.
func ParseOutcome(v string) (Outcome, error) {
	for o, name := range outcomeNames {
		if name != "" && strings.EqualFold(v, name) {
			return Outcome(o), nil
		}
	}
	return 0, fmt.Errorf("unknown delivery outcome %q", clip.String(v))
}

// AppendDeadLetters appends to dst a dead-letter object: a JSON array of recs in the layout of
// f ([DeadLetterFormat.Shape]), each record holding its event as the subscription delivers it
// (SPEC §5). The added members follow the event's own members; lastHttpStatusCode is left out
// when there was no HTTP answer, the last outcome and the last-attempt time when no attempt was
// made. Every
// record's event must be in f.Input, and f.Input must be deliverable in f.Delivery
// ([CanDeliver]).
func AppendDeadLetters(dst []byte, f DeadLetterFormat, recs []DeadLetterRecord) ([]byte, error) {
	if !CanDeliver(f.Input, f.Delivery) {
		return dst, fmt.Errorf("encoding dead letters: events published in %s cannot be delivered in %s: CloudEvents input is delivered only as CloudEvents, and only custom input can use CustomInputSchema", f.Input, f.Delivery.DeliveryName())
	}
	dst = append(dst, '[')
	for i := range recs {
		if i > 0 {
			dst = append(dst, ',')
		}
		var err error
		if dst, err = appendDeadLetter(dst, f, &recs[i]); err != nil {
			return dst, fmt.Errorf("encoding dead letter %d: %w", i, err)
		}
	}
	return append(dst, ']'), nil
}

// deadLetterFixedBytes bounds what a record adds to its event besides the strings counted
// one by one in [DeadLetterSizeBound]: member names, punctuation, numbers, times, outcome
// names, the namespace reason texts and the fixed members of a converted CloudEvent or an
// Event Grid envelope (about 600 bytes at most).
const deadLetterFixedBytes = 1024

// DeadLetterSizeBound returns an upper bound of the bytes [AppendDeadLetters] writes for r in
// the layout of f, the comma that separates it included. It reads only lengths, so the
// dead-letter actor sizes its objects with it without encoding them.
func DeadLetterSizeBound(f DeadLetterFormat, r *DeadLetterRecord) int {
	n := deadLetterFixedBytes + escapedBound(string(r.Reason))
	e := r.Event
	if e == nil {
		return n
	}
	n += len(e.Raw)
	// A converted CloudEvent holds the data of the event (part of Raw), an envelope the whole
	// of it; both add the event's attributes and the topic as strings of their own.
	converted := (f.Delivery == CloudEvents && f.Input != CloudEvents) || (f.Delivery != CloudEvents && f.Input == Custom)
	if converted {
		n += escapedBound(e.ID) + escapedBound(e.Type) + escapedBound(e.Subject) + escapedBound(e.Time) +
			escapedBound(e.DataVersion) + escapedBound(topicOf(f.TopicID, e))
	}
	return n
}

// escapedBound bounds the bytes of s written by appendString: at most six per byte (a \u
// escape), and the quotes.
func escapedBound(s string) int { return 6*len(s) + 2 }

func appendDeadLetter(dst []byte, f DeadLetterFormat, r *DeadLetterRecord) ([]byte, error) {
	if r.Event == nil {
		return dst, errors.New("record has no event")
	}
	var obj []byte
	switch f.Delivery {
	case CloudEvents:
		var err error
		if obj, err = appendCloudEvent(nil, f.Input, f.TopicID, r.Event, false); err != nil {
			return dst, err
		}
	default:
		if f.Input == Custom {
			obj = appendEventGridEnvelope(nil, topicOf(f.TopicID, r.Event), r.Event)
		} else {
			obj = r.Event.Raw
		}
	}
	switch f.Shape() {
	case DeadLetterNamespace:
		dst = append(dst, `{"deadLetterProperties":{"deadletterreason":`...)
		text, ok := namespaceReasonText[r.Reason]
		if !ok {
			text = string(r.Reason)
		}
		dst = appendString(dst, text)
		dst = append(dst, `,"deliveryattempts":`...)
		dst = strconv.AppendInt(dst, int64(r.DeliveryAttempts), 10)
		if r.LastOutcome != 0 {
			dst = append(dst, `,"deliveryresult":`...)
			dst = appendString(dst, r.LastOutcome.String())
		}
		dst = append(dst, `,"publishutc":`...)
		dst = appendString(dst, r.PublishTime.UTC().Format(DeadLetterTimeLayout))
		if !r.LastAttemptTime.IsZero() {
			dst = append(dst, `,"deliveryattemptutc":`...)
			dst = appendString(dst, r.LastAttemptTime.UTC().Format(DeadLetterTimeLayout))
		}
		dst = append(dst, `},"event":`...)
		dst = append(dst, obj...)
		return append(dst, '}'), nil
	case DeadLetterCloudEvents:
		return appendWithFacts(dst, obj, &dlNamesCE, r)
	}
	return appendWithFacts(dst, obj, &dlNamesEG, r)
}

// appendWithFacts appends the JSON object obj with the record's facts added as members named
// by names.
func appendWithFacts(dst, obj []byte, names *[6]string, r *DeadLetterRecord) ([]byte, error) {
	body, empty, err := openObject(obj)
	if err != nil {
		return dst, err
	}
	dst = append(dst, body...)
	sep := func(name string) {
		if !empty {
			dst = append(dst, ',')
		}
		empty = false
		dst = appendString(dst, name)
		dst = append(dst, ':')
	}
	sep(names[dlReason])
	dst = appendString(dst, string(r.Reason))
	sep(names[dlAttempts])
	dst = strconv.AppendInt(dst, int64(r.DeliveryAttempts), 10)
	if r.LastOutcome != 0 {
		sep(names[dlOutcome])
		dst = appendString(dst, r.LastOutcome.String())
	}
	if r.LastHTTPStatus != 0 {
		sep(names[dlStatus])
		dst = strconv.AppendInt(dst, int64(r.LastHTTPStatus), 10)
	}
	sep(names[dlPublish])
	dst = appendString(dst, r.PublishTime.UTC().Format(DeadLetterTimeLayout))
	if !r.LastAttemptTime.IsZero() {
		sep(names[dlLastAttempt])
		dst = appendString(dst, r.LastAttemptTime.UTC().Format(DeadLetterTimeLayout))
	}
	return append(dst, '}'), nil
}

// openObject returns a JSON object's bytes without its closing brace (and the whitespace
// before it), and whether the object has no members.
func openObject(obj []byte) (body []byte, empty bool, err error) {
	end := len(obj)
	for end > 0 && isSpace(obj[end-1]) {
		end--
	}
	start := 0
	for start < end && isSpace(obj[start]) {
		start++
	}
	if end-start < 2 || obj[start] != '{' || obj[end-1] != '}' {
		return nil, false, errors.New("event is not a JSON object")
	}
	inner := end - 1
	for inner > start+1 && isSpace(obj[inner-1]) {
		inner--
	}
	return obj[start:inner], inner == start+1, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// DeadLetterDecodeError is a problem with one record of a dead-letter object (Index counts
// from 0) or with the whole object (Index -1).
type DeadLetterDecodeError struct {
	Index  int
	Reason string
}

// Error reads like `dead letter 2: publishTime: is not an RFC 3339 time`.
func (e *DeadLetterDecodeError) Error() string {
	if e.Index < 0 {
		return "dead-letter object: " + e.Reason
	}
	return "dead letter " + strconv.Itoa(e.Index) + ": " + e.Reason
}

// DecodeDeadLetters decodes a dead-letter object written by [AppendDeadLetters] — or by Azure
// Event Grid, whose layouts it follows — back into records whose events are in the topic's
// input schema in, for replay. Each record's layout is recognised on its own (a subscription's
// delivery schema may have changed between objects): a deadLetterProperties/event pair is the
// namespace layout, deadLetterReason the Event Grid one, deadletterreason the CloudEvents one.
//
// Events come back with their original ids. Event Grid events are decoded (and validated) as
// published to the topic topicID; a CloudEvent record of an Event Grid topic is converted back
// (source is replaced by topicID, dataschema "#"+dataVersion becomes dataVersion, its fragment
// percent-decoded); a custom-schema event is the envelope's data, with the envelope's id,
// eventType, subject, eventTime and dataVersion. Events are checked as an earlier release
// checked them at publish, not as strictly as a publish is now (a CloudEvent's source and
// dataschema need not be URI-references, a time that Go's time.Parse reads is taken), and
// come back as they were stored: records written before a check was added still replay.
// Outcome and reason values egrid does not know are kept as GenericError and as written. The
// error is a *[DeadLetterDecodeError], several joined with errors.Join; no records are returned
// with an error: one record that cannot be decoded fails the object ([DecodeDeadLetterRecords]
// decodes the others).
func DecodeDeadLetters(body []byte, in Schema, topicID string) ([]DeadLetterRecord, error) {
	recs, bad, err := DecodeDeadLetterRecords(body, in, topicID)
	if err != nil {
		return nil, err
	}
	if len(bad) > 0 {
		errs := make([]error, 0, min(len(bad), maxReported))
		for _, e := range bad[:min(len(bad), maxReported)] {
			errs = append(errs, e)
		}
		return nil, errors.Join(errs...)
	}
	return recs, nil
}

// DecodeDeadLetterRecords decodes a dead-letter object as [DecodeDeadLetters] does, record by
// record: a record that cannot be decoded is left out and described in bad (with its index in
// the object's array, in order), and the others are returned, so one bad record does not hide
// the rest of its object. The error, a *[DeadLetterDecodeError] with Index -1, is set (and no
// records are returned) only when the object as a whole is not a JSON array.
func DecodeDeadLetterRecords(body []byte, in Schema, topicID string) (recs []DeadLetterRecord, bad []*DeadLetterDecodeError, err error) {
	s := &scanner{buf: body}
	s.skipWS()
	if s.peek() != '[' {
		return nil, nil, &DeadLetterDecodeError{Index: -1, Reason: "is not a JSON array of records"}
	}
	empty, _ := s.arrayStart()
	for i := 0; !empty; i++ {
		start := s.pos
		if _, err := s.skipValue(1); err != nil {
			return nil, nil, &DeadLetterDecodeError{Index: -1, Reason: "is not valid JSON: " + err.Error()}
		}
		rec, err := decodeDeadLetter(s.buf[start:s.pos], in, topicID)
		if err != nil {
			bad = append(bad, &DeadLetterDecodeError{Index: i, Reason: err.Error()})
		} else {
			recs = append(recs, rec)
		}
		more, err := s.arrayNext()
		if err != nil {
			return nil, nil, &DeadLetterDecodeError{Index: -1, Reason: "is not valid JSON: " + err.Error()}
		}
		empty = !more
	}
	if err := s.end(); err != nil {
		return nil, nil, &DeadLetterDecodeError{Index: -1, Reason: "is not valid JSON: " + err.Error()}
	}
	return recs, bad, nil
}

// rawMember is one member of a scanned object.
type rawMember struct {
	key   string
	value []byte // the value's bytes
	kind  jsonKind
	span  []byte // `"key":value` as written
}

// objectMembers scans a JSON object into its members, in order.
func objectMembers(obj []byte) ([]rawMember, error) {
	s := &scanner{buf: obj}
	s.skipWS()
	if s.peek() != '{' {
		return nil, errors.New("is not a JSON object")
	}
	var out []rawMember
	empty, _ := s.objectStart()
	for !empty {
		start := s.pos
		key, _, err := s.objectKey()
		if err != nil {
			return nil, err
		}
		vstart := s.pos
		kind, err := s.skipValue(1)
		if err != nil {
			return nil, err
		}
		out = append(out, rawMember{key: string(key), value: s.buf[vstart:s.pos], kind: kind, span: s.buf[start:s.pos]})
		more, err := s.objectNext()
		if err != nil {
			return nil, err
		}
		empty = !more
	}
	return out, nil
}

func find(ms []rawMember, key string) *rawMember {
	for i := range ms {
		if ms[i].key == key {
			return &ms[i]
		}
	}
	return nil
}

func (m *rawMember) str() (string, bool) {
	if m == nil || m.kind != kindString {
		return "", false
	}
	return unquote(m.value, bytes.IndexByte(m.value, '\\') >= 0), true
}

func decodeDeadLetter(obj []byte, in Schema, topicID string) (DeadLetterRecord, error) {
	var rec DeadLetterRecord
	ms, err := objectMembers(obj)
	if err != nil {
		return rec, err
	}
	var names *[6]string
	var event []byte
	switch {
	case find(ms, "deadLetterProperties") != nil && find(ms, "event") != nil:
		props, ev := find(ms, "deadLetterProperties"), find(ms, "event")
		if props.kind != kindObject || ev.kind != kindObject {
			return rec, errors.New("deadLetterProperties and event must be JSON objects")
		}
		if err := decodeNamespaceFacts(props.value, &rec); err != nil {
			return rec, err
		}
		event = ev.value
	case find(ms, dlNamesEG[dlReason]) != nil:
		names = &dlNamesEG
	case find(ms, dlNamesCE[dlReason]) != nil:
		names = &dlNamesCE
	default:
		return rec, errors.New("is not a dead-letter record: it has no deadLetterReason, deadletterreason or deadLetterProperties")
	}
	if names != nil {
		if err := decodeFacts(ms, names, &rec); err != nil {
			return rec, err
		}
		event = withoutMembers(ms, names)
	}
	if rec.Event, err = eventFromDelivered(event, in, topicID); err != nil {
		return rec, err
	}
	return rec, nil
}

// withoutMembers rebuilds the object of ms without the members named in names.
func withoutMembers(ms []rawMember, names *[6]string) []byte {
	out := []byte{'{'}
	first := true
outer:
	for _, m := range ms {
		for _, n := range names {
			if m.key == n {
				continue outer
			}
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(out, m.span...)
	}
	return append(out, '}')
}

func decodeFacts(ms []rawMember, names *[6]string, rec *DeadLetterRecord) error {
	var errs []error
	if v, ok := find(ms, names[dlReason]).str(); ok {
		rec.Reason = Reason(v)
	} else {
		errs = append(errs, fmt.Errorf("%s: must be a string", names[dlReason]))
	}
	if m := find(ms, names[dlAttempts]); m != nil {
		n, err := intValue(m)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", names[dlAttempts], err))
		}
		rec.DeliveryAttempts = n
	}
	if m := find(ms, names[dlOutcome]); m != nil {
		v, ok := m.str()
		if !ok {
			errs = append(errs, fmt.Errorf("%s: must be a string", names[dlOutcome]))
		}
		rec.LastOutcome = lenientOutcome(v)
	}
	if m := find(ms, names[dlStatus]); m != nil {
		n, err := intValue(m)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", names[dlStatus], err))
		}
		rec.LastHTTPStatus = n
	}
	var err error
	if rec.PublishTime, err = timeValue(find(ms, names[dlPublish])); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", names[dlPublish], err))
	}
	if rec.LastAttemptTime, err = timeValue(find(ms, names[dlLastAttempt])); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", names[dlLastAttempt], err))
	}
	return errors.Join(errs...)
}

func decodeNamespaceFacts(obj []byte, rec *DeadLetterRecord) error {
	ms, err := objectMembers(obj)
	if err != nil {
		return fmt.Errorf("deadLetterProperties: %w", err)
	}
	var errs []error
	if v, ok := find(ms, "deadletterreason").str(); ok {
		rec.Reason = Reason(v)
		for r, text := range namespaceReasonText {
			if text == v {
				rec.Reason = r
			}
		}
	} else {
		errs = append(errs, errors.New("deadLetterProperties.deadletterreason: must be a string"))
	}
	if m := find(ms, "deliveryattempts"); m != nil {
		n, err := intValue(m)
		if err != nil {
			errs = append(errs, fmt.Errorf("deadLetterProperties.deliveryattempts: %w", err))
		}
		rec.DeliveryAttempts = n
	}
	if v, ok := find(ms, "deliveryresult").str(); ok {
		rec.LastOutcome = lenientOutcome(v)
	}
	if rec.PublishTime, err = timeValue(find(ms, "publishutc")); err != nil {
		errs = append(errs, fmt.Errorf("deadLetterProperties.publishutc: %w", err))
	}
	if rec.LastAttemptTime, err = timeValue(find(ms, "deliveryattemptutc")); err != nil {
		errs = append(errs, fmt.Errorf("deadLetterProperties.deliveryattemptutc: %w", err))
	}
	return errors.Join(errs...)
}

func lenientOutcome(v string) Outcome {
	if o, err := ParseOutcome(v); err == nil {
		return o
	}
	return GenericError
}

func intValue(m *rawMember) (int, error) {
	if m.kind != kindNumber {
		return 0, errors.New("must be a number")
	}
	n, err := strconv.Atoi(string(m.value))
	if err != nil || n < 0 {
		return 0, errors.New("must be a whole number >= 0")
	}
	return n, nil
}

func timeValue(m *rawMember) (time.Time, error) {
	if m == nil || m.kind == kindNull {
		return time.Time{}, nil
	}
	v, ok := m.str()
	if !ok {
		return time.Time{}, errors.New("must be a string")
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, errors.New("is not an RFC 3339 time")
	}
	return t, nil
}

// eventFromDelivered turns an event object as it was delivered back into an event of input
// schema in. It is decoded as an event egrid accepted before (stored), not as a publish: a
// record written by an earlier release holds what that release's publish took, and replays
// even where today's publish checks more ([checkEventTime], [checkURIRef]).
func eventFromDelivered(obj []byte, in Schema, topicID string) (*Event, error) {
	ms, err := objectMembers(obj)
	if err != nil {
		return nil, fmt.Errorf("event: %w", err)
	}
	isCE := find(ms, "specversion") != nil
	switch in {
	case CloudEvents:
		if !isCE {
			return nil, errors.New("event is not a CloudEvent, but the topic takes CloudEvents")
		}
		evs, err := decodeCloudEvents(obj, Limits{}, true)
		if err != nil {
			return nil, fmt.Errorf("event: %w", err)
		}
		return evs[0], nil
	case EventGrid:
		if isCE {
			obj, err = eventGridFromCloudEvent(ms, topicID)
			if err != nil {
				return nil, err
			}
		}
		evs, err := decodeEventGrid(append(append([]byte{'['}, obj...), ']'), topicID, Limits{}, false, true)
		if err != nil {
			return nil, fmt.Errorf("event: %w", err)
		}
		return evs[0], nil
	case Custom:
		return customFromDelivered(ms, isCE, topicID)
	}
	return nil, fmt.Errorf("unknown input schema %v", in)
}

// eventGridFromCloudEvent reverses the Event Grid → CloudEvents conversion of SPEC §4.
func eventGridFromCloudEvent(ms []rawMember, topicID string) ([]byte, error) {
	get := func(name string) string {
		v, _ := find(ms, name).str()
		return v
	}
	data := find(ms, "data")
	if data == nil {
		return nil, errors.New("event: a CloudEvent record of an Event Grid topic must have data")
	}
	out := []byte(`{"id":`)
	out = appendString(out, get("id"))
	out = append(out, `,"topic":`...)
	out = appendString(out, topicID)
	out = append(out, `,"subject":`...)
	out = appendString(out, get("subject"))
	out = append(out, `,"eventType":`...)
	out = appendString(out, get("type"))
	out = append(out, `,"eventTime":`...)
	out = appendString(out, get("time"))
	out = append(out, `,"data":`...)
	out = append(out, data.value...)
	out = append(out, `,"dataVersion":`...)
	out = appendString(out, dataVersionOf(get("dataschema")))
	return append(out, `,"metadataVersion":"1"}`...), nil
}

// customFromDelivered recovers a custom-schema event from its Event Grid envelope or its
// CloudEvent: the published object is the data.
func customFromDelivered(ms []rawMember, isCE bool, topicID string) (*Event, error) {
	names := [...]string{"id", "eventType", "subject", "eventTime", "dataVersion"}
	if isCE {
		names = [...]string{"id", "type", "subject", "time", "dataschema"}
	}
	var vals [5]string
	for i, n := range names {
		vals[i], _ = find(ms, n).str()
	}
	if isCE {
		vals[4] = dataVersionOf(vals[4])
	}
	data := find(ms, "data")
	if data == nil || data.kind != kindObject {
		return nil, errors.New("event: the data of a custom-schema record must be the published JSON object")
	}
	if vals[0] == "" {
		return nil, errors.New("event: id is missing")
	}
	return &Event{
		ID: vals[0], Type: vals[1], Subject: vals[2], Time: vals[3], DataVersion: vals[4],
		Source: topicID, Raw: append([]byte(nil), data.value...),
	}, nil
}

// dataVersionOf returns the dataVersion of a converted event's dataschema: "#"+dataVersion
// with the fragment percent-decoded, as [fragmentEscape] encoded it. A fragment that does not
// decode (a '%' without two hex digits after it, or bytes that are no UTF-8 text) is taken as
// it is: a record written before the fragment was encoded holds dataVersion as published. A
// dataschema without the '#' is not a converted one and is taken whole.
func dataVersionOf(dataschema string) string {
	v, ok := strings.CutPrefix(dataschema, dataSchemaPrefix)
	if !ok {
		return dataschema
	}
	return fragmentUnescape(v)
}

// fragmentUnescape reverses [fragmentEscape]: v percent-decoded, or v itself when it holds a
// '%' not followed by two hex digits or decodes to bytes that are not UTF-8.
func fragmentUnescape(v string) string {
	s, all := decodePercent(v)
	if !all || !utf8.ValidString(s) {
		return v
	}
	return s
}
