package schemas

import (
	"strconv"
	"strings"
	"time"

	"github.com/egridio/egrid/schemas/clip"
)

// The members of an Event Grid schema event, in the order Raw writes them.
const (
	egID = iota
	egTopic
	egSubject
	egEventType
	egEventTime
	egData
	egDataVersion
	egMetadataVersion
	egMembers
)

// memberStrings has room for every member.
var _ [maxMembers - egMembers]struct{}

var egNames = [egMembers]string{"id", "topic", "subject", "eventType", "eventTime", "data", "dataVersion", "metadataVersion"}

func egIndex(key []byte) int {
	switch string(key) {
	case "id":
		return egID
	case "topic":
		return egTopic
	case "subject":
		return egSubject
	case "eventType":
		return egEventType
	case "eventTime":
		return egEventTime
	case "data":
		return egData
	case "dataVersion":
		return egDataVersion
	case "metadataVersion":
		return egMetadataVersion
	}
	return -1
}

// member is one scanned member value.
type member struct {
	tok  []byte   // the value's bytes as published
	kind jsonKind // kindNone when the member is absent
	esc  bool     // a string with escapes
	ws   bool     // tok holds insignificant whitespace
}

// present reports whether the member was sent with a non-null value.
func (m *member) present() bool { return m.kind != kindNone && m.kind != kindNull }

// scanMember scans the value s is positioned at into m.
func (s *scanner) scanMember(m *member) error {
	start := s.pos
	if s.peek() == '"' {
		esc, err := s.scanString()
		*m = member{tok: s.buf[start:s.pos], kind: kindString, esc: esc}
		return err
	}
	outer := s.ws
	s.ws = false
	kind, err := s.skipValue(1)
	*m = member{tok: s.buf[start:s.pos], kind: kind, ws: s.ws}
	s.ws = s.ws || outer
	return err
}

// metadataVersionEG is the only metadataVersion of the Event Grid schema.
const metadataVersionEG = "1"

// DecodeEventGrid decodes a publish in the Event Grid schema (SPEC §4, eventgrid-behaviour.md
// §1.3 and §1.6): a JSON array of event objects, even for a single event.
//
// Each event must have string members id (non-empty), subject (may be empty), eventType
// (non-empty) and eventTime (an RFC 3339 date-time), and a data member of any JSON kind. A
// data of JSON null counts as present and is delivered as null: the SDKs serialise "no data"
// that way and receivers handle it. dataVersion is optional and stamped "" when absent.
// topic, when present, must equal topicID case-insensitively (ARM resource IDs are) and is
// stamped with topicID either way; metadataVersion, when present, must be "1" and is stamped
// "1". Optional members sent as JSON null count as absent. Member names are case-sensitive;
// a member the schema does not have is an error (Azure answers 400 InputJsonInvalid), and so
// is a known member sent twice. eventTime is checked against RFC 3339's grammar ([parseTime]:
// no ',' before a fraction of a second); a lower-case "t" or "z" is delivered upper-case. It
// may also carry an ISO 8601 offset without a colon ("+0000"), which Azure accepts; it is
// normalised to RFC 3339 ("+00:00"). A string member
// other than data holding a \u escape of a lone UTF-16 surrogate ("\ud800") is an error, as it
// is for Azure's .NET reader: decoded, it would be U+FFFD, and two ids would become one.
//
// Event.Raw is the normalised, compact object
// {"id","topic","subject","eventType","eventTime","data","dataVersion","metadataVersion"}
// with the published bytes of each value (data compacted when it held whitespace).
// Event.Source is topicID.
//
// Errors: a *[TooLargeError] for a body over lim.MaxRequestBytes (Index -1) or an event over
// lim.MaxEventBytes (its index); a *[TooManyEventsError] for more than lim.MaxEvents events;
// a request-level *[ValidationError] (Index -1) for malformed JSON (with the byte offset), an
// empty array or a body that is not an array; otherwise up to 20 per-event *ValidationError
// joined with errors.Join. No events are returned with an error: a publish is all or nothing.
func DecodeEventGrid(body []byte, topicID string, lim Limits) ([]*Event, error) {
	return decodeEventGrid(body, topicID, lim, false, false)
}

// DecodeEventGridObjectOrArray decodes what [DecodeEventGrid] does, and also a body holding a
// single event object, as event 0: a message a broker source feeds to a topic may carry one
// event or a batch (an HTTP publish in the Event Grid schema must be an array, as Azure
// requires). A single object is measured against lim as itself, and nothing but white space
// may follow it: two objects separated by a comma are malformed JSON. Errors are those of
// [DecodeEventGrid].
func DecodeEventGridObjectOrArray(body []byte, topicID string, lim Limits) ([]*Event, error) {
	return decodeEventGrid(body, topicID, lim, true, false)
}

// decodeEventGrid is [DecodeEventGrid], and with single [DecodeEventGridObjectOrArray];
// stored relaxes its checks for events accepted before, see [checkEventTime].
func decodeEventGrid(body []byte, topicID string, lim Limits, single, stored bool) ([]*Event, error) {
	if err := checkRequestSize(len(body), lim); err != nil {
		return nil, err
	}
	s := &scanner{buf: body}
	s.skipWS()
	topicTok := appendString(nil, topicID)
	var p problems
	var events []*Event
	decode := func(i int) error {
		ev, err := decodeEventGridObject(s, i, topicID, topicTok, &p, stored)
		if ev != nil && len(p.errs) == 0 {
			events = append(events, ev)
		}
		return err
	}
	err := scanPublish(s, lim, &p, single, "an Event Grid schema", "events", decode)
	if err != nil {
		return nil, err
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	return events, nil
}

// decodeEventGridObject scans one event object, reports its problems to p and returns the
// event when it has none; stored relaxes the checks for an event accepted before. The error
// is a scanner error.
func decodeEventGridObject(s *scanner, i int, topicID string, topicTok []byte, p *problems, stored bool) (*Event, error) {
	var m [egMembers]member
	var misnamed [egMembers][]byte
	var unexpected []string // member names that are not in the schema
	bad := false
	empty, _ := s.objectStart()
	for !empty {
		key, _, err := s.objectKey()
		if err != nil {
			return nil, err
		}
		if k := egIndex(key); k >= 0 {
			if m[k].kind != kindNone {
				p.add(i, egNames[k], "appears more than once: send each member once")
				bad = true
			}
			err = s.scanMember(&m[k])
		} else {
			known := false
			for k, name := range egNames {
				if strings.EqualFold(string(key), name) {
					known = true
					if misnamed[k] == nil {
						misnamed[k] = key
					}
				}
			}
			if !known {
				unexpected = append(unexpected, string(key))
			}
			_, err = s.skipValue(1)
		}
		if err != nil {
			return nil, err
		}
		more, err := s.objectNext()
		if err != nil {
			return nil, err
		}
		empty = !more
	}

	var vals memberStrings
	vals.unquoteMembers(m[:], func(k int) bool { return k == egData })

	// surrogate marks the members refused for a lone surrogate, whose other checks are moot.
	var surrogate [egMembers]bool
	// str validates a string member and returns its value.
	str := func(k int, required bool) string {
		switch {
		case !m[k].present():
			if required {
				reason := "is required"
				if misnamed[k] != nil {
					reason += " (the event has \"" + string(misnamed[k]) + "\": member names are case-sensitive)"
				}
				p.add(i, egNames[k], reason)
				bad = true
			}
			return ""
		case m[k].kind != kindString:
			p.add(i, egNames[k], "must be a string, got "+m[k].kind.String())
			bad = true
			return ""
		}
		if esc := loneSurrogateIn(&m[k]); esc != "" {
			p.add(i, egNames[k], loneSurrogateReason(esc))
			bad = true
			surrogate[k] = true
		}
		return vals.get(k)
	}
	ev := &Event{Source: topicID}
	ev.ID = str(egID, true)
	if m[egID].kind == kindString && ev.ID == "" {
		p.add(i, "id", "must not be empty")
		bad = true
	}
	bad = checkHeaderBound(p, i, "id", ev.ID, MaxIDBytes) || bad
	if topic := str(egTopic, false); m[egTopic].kind == kindString && !surrogate[egTopic] && !strings.EqualFold(topic, topicID) {
		p.add(i, "topic", "is "+clip.Quote(topic)+", but this topic's resource ID is "+clip.Quote(topicID)+": send the topic's ID or leave topic out and it is stamped")
		bad = true
	}
	ev.Subject = str(egSubject, true)
	ev.Type = str(egEventType, true)
	if m[egEventType].kind == kindString && ev.Type == "" {
		p.add(i, "eventType", "must not be empty")
		bad = true
	}
	ev.Time = str(egEventTime, true)
	if m[egEventTime].kind == kindString && !surrogate[egEventTime] {
		t, reason := checkEventTime(ev.Time, true, stored)
		if reason != "" {
			p.add(i, "eventTime", reason)
			bad = true
		} else if t != ev.Time {
			ev.Time = t
			m[egEventTime].tok = appendString(nil, t)
		}
	}
	if m[egData].kind == kindNone {
		reason := "is required: send the event's payload as data (null when it has none)"
		if misnamed[egData] != nil {
			reason += " (the event has \"" + string(misnamed[egData]) + "\": member names are case-sensitive)"
		}
		p.add(i, "data", reason)
		bad = true
	}
	ev.DataVersion = str(egDataVersion, false)
	bad = checkHeaderBound(p, i, "dataVersion", ev.DataVersion, MaxHeaderAttributeBytes) || bad
	if mv := str(egMetadataVersion, false); m[egMetadataVersion].kind == kindString && !surrogate[egMetadataVersion] && mv != metadataVersionEG {
		p.add(i, "metadataVersion", "is "+clip.Quote(mv)+", but the only metadata version is \"1\": send \"1\" or leave it out and it is stamped")
		bad = true
	}
	// Azure refuses a member the schema does not have (an Azure response quoted in
	// microsoft/onefuzz#3285: 400, detail code InputJsonInvalid, "This resource is configured
	// for 'EventGridEvent' schema. Received unexpected property 'sas_url' ..."). A member that
	// differs from a schema member only in case is reported as such; when that member is a
	// missing required one, its "is required" problem says so already.
	for _, key := range unexpected {
		p.add(i, key, "unexpected property: this topic is configured for 'EventGridEvent' schema, whose members are id, topic, subject, eventType, eventTime, data, dataVersion and metadataVersion: move custom fields into data, or publish to a topic with inputSchema CustomEventSchema")
		bad = true
	}
	for k, key := range misnamed {
		if key != nil && (m[k].present() || !egRequired(k)) {
			p.add(i, string(key), "unexpected property: member names are case-sensitive: send it as \""+egNames[k]+"\"")
			bad = true
		}
	}
	if bad || len(p.errs) > 0 {
		return nil, nil
	}
	ev.Raw = appendEventGridRaw(m, topicTok)
	return ev, nil
}

// appendEventGridRaw builds the normalised object of a valid event.
func appendEventGridRaw(m [egMembers]member, topicTok []byte) []byte {
	n := len(`{"id":,"topic":,"subject":,"eventType":,"eventTime":,"data":,"dataVersion":,"metadataVersion":"1"}`) +
		len(m[egID].tok) + len(topicTok) + len(m[egSubject].tok) + len(m[egEventType].tok) +
		len(m[egEventTime].tok) + len(m[egData].tok) + len(m[egDataVersion].tok) + 2
	b := make([]byte, 0, n)
	b = append(b, `{"id":`...)
	b = append(b, m[egID].tok...)
	b = append(b, `,"topic":`...)
	b = append(b, topicTok...)
	b = append(b, `,"subject":`...)
	b = append(b, m[egSubject].tok...)
	b = append(b, `,"eventType":`...)
	b = append(b, m[egEventType].tok...)
	b = append(b, `,"eventTime":`...)
	b = append(b, m[egEventTime].tok...)
	b = append(b, `,"data":`...)
	if m[egData].ws {
		b = appendCompact(b, m[egData].tok)
	} else {
		b = append(b, m[egData].tok...)
	}
	b = append(b, `,"dataVersion":`...)
	if m[egDataVersion].kind == kindString {
		b = append(b, m[egDataVersion].tok...)
	} else {
		b = append(b, `""`...)
	}
	b = append(b, `,"metadataVersion":"1"}`...)
	return b
}

// egRequired reports whether the member k must be sent.
func egRequired(k int) bool {
	switch k {
	case egID, egSubject, egEventType, egEventTime, egData:
		return true
	}
	return false
}

// offsetWithColon returns v with a colon put into its numeric UTC offset when v is an ISO 8601
// date-time whose offset has none ("2024-05-01T12:00:00+0000", what `date +%Y-%m-%dT%H:%M:%S%z`
// prints, as Microsoft's curl quickstart for custom topics does), and false for any other v.
// Azure accepts such a time; egrid delivers it in RFC 3339 form ("+00:00", as [parseTime]
// writes it) so CloudEvents receivers, which require RFC 3339, accept it after a conversion too.
func offsetWithColon(v string) (string, bool) {
	n := len(v)
	if n < len("2006-01-02T15:04:05+0000") || (v[n-5] != '+' && v[n-5] != '-') {
		return "", false
	}
	for _, c := range v[n-4:] {
		if c < '0' || c > '9' {
			return "", false
		}
	}
	fixed, reason := parseTime(v[:n-2] + ":" + v[n-2:])
	return fixed, reason == ""
}

// checkEventTime returns an event's time v as egrid delivers it, or why a decode refuses it.
// A publish holds v to RFC 3339's grammar ([parseTime]); isoOffset takes an ISO 8601 offset
// without a colon too ([offsetWithColon]), as the Event Grid schema does.
//
// stored is set for an event egrid accepted before (one in a dead-letter record, decoded for
// replay), which an earlier release checked with Go's time.Parse alone: a time that time.Parse
// reads as RFC 3339 (a ',' before the fraction, an offset such as "+24:00") or that RFC 3339's
// grammar allows (a lower-case "t" or "z") is taken as it was stored, so a replay delivers the
// event unchanged. Only a publish decides what is accepted from now on.
func checkEventTime(v string, isoOffset, stored bool) (string, string) {
	if stored {
		if _, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return v, ""
		}
		if _, reason := parseTime(v); reason == "" {
			return v, ""
		}
	}
	t, reason := parseTime(v)
	if reason != "" && isoOffset {
		if fixed, ok := offsetWithColon(v); ok {
			return fixed, ""
		}
	}
	return t, reason
}

// parseTime returns v as egrid delivers it when v is an RFC 3339 date-time (RFC 3339 §5.6:
// "2024-05-01T12:00:00.5Z", "2024-05-01T14:00:00+02:00"), or why it is not one.
//
// The check is RFC 3339's grammar, which Go's time.Parse is not: it takes a ',' before the
// fraction of a second, which ECMAScript's Date and Java's OffsetDateTime refuse, and offsets
// such as "+24:00"; both are refused here. RFC 3339 allows a lower-case "t" and "z", which
// time.Parse refuses, and so would the CloudEvents Go SDK of a receiver: they are taken and
// delivered upper-case, so every receiver reads the time, as a "+0000" offset is delivered as
// "+00:00" ([offsetWithColon]). The date and time must exist (no February 30th, no leap
// second "60": time.Parse and the receivers built on it refuse one).
func parseTime(v string) (string, string) {
	const layout = "dddd-dd-ddTdd:dd:dd" // then an optional fraction and the offset
	if len(v) < len(layout)+1 {
		return "", notTime(v)
	}
	for i := 0; i < len(layout); i++ {
		switch c := v[i]; layout[i] {
		case 'd':
			if c < '0' || c > '9' {
				return "", notTime(v)
			}
		case 'T':
			if c != 'T' && c != 't' {
				return "", notTime(v)
			}
		default:
			if c != layout[i] {
				return "", notTime(v)
			}
		}
	}
	i := len(layout)
	switch v[i] {
	case ',':
		return "", notTime(v) + ": write the fraction of a second after a '.', not a ','"
	case '.':
		i++
		n := i
		for i < len(v) && v[i] >= '0' && v[i] <= '9' {
			i++
		}
		if i == n {
			return "", notTime(v)
		}
	}
	switch off := v[i:]; {
	case off == "Z" || off == "z":
	case len(off) == len("+00:00") && (off[0] == '+' || off[0] == '-') && off[3] == ':' &&
		isDigits(off[1:3]) && isDigits(off[4:]) && off[1:3] <= "23" && off[4:] <= "59":
	default:
		return "", notTime(v)
	}
	norm := v
	if v[10] == 't' || v[len(v)-1] == 'z' {
		b := []byte(v)
		b[10] = 'T'
		if b[len(b)-1] == 'z' {
			b[len(b)-1] = 'Z'
		}
		norm = string(b)
	}
	if _, err := time.Parse(time.RFC3339Nano, norm); err != nil {
		return "", notTime(v) + ": " + clip.String(strings.TrimPrefix(err.Error(), "parsing time "+strconv.Quote(norm)+": "))
	}
	return norm, ""
}

// notTime says that v is not an RFC 3339 date-time.
func notTime(v string) string {
	return "is " + clip.Quote(v) + ", not an RFC 3339 date-time such as \"2024-05-01T12:00:00Z\""
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
