package schemas

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/egridio/egrid/schemas/clip"
)

// FieldMapping maps one Event Grid envelope field of a custom input schema to a field of the
// published objects (eventgrid-behaviour.md §2.3). SourceField names a top-level member of the
// event object or a dotted path into nested objects ("header.type"); a top-level member whose
// name is the whole SourceField, dots included, wins over the path. DefaultValue applies when
// SourceField is empty or the event does not have it.
type FieldMapping struct {
	// SourceField is the member of the published object the field is read from.
	SourceField string `json:"sourceField,omitempty" yaml:"sourceField,omitempty"`
	// DefaultValue is the field's value when the object does not have SourceField.
	DefaultValue string `json:"defaultValue,omitempty" yaml:"defaultValue,omitempty"`
}

// InputMapping is the input schema mapping of a topic with the custom input schema
// (CustomEventSchema, SPEC §4), in the shape of ARM's inputSchemaMapping.properties. id, topic
// and eventTime come only from source fields; eventType, subject and dataVersion from a source
// field or a default value.
type InputMapping struct {
	// ID maps the event id; unmapped or absent, an id is generated.
	ID FieldMapping `json:"id,omitzero" yaml:"id,omitempty"`
	// Topic maps a field that, when present, must name this topic.
	Topic FieldMapping `json:"topic,omitzero" yaml:"topic,omitempty"`
	// EventTime maps the event time; unmapped or absent, it is the publish time.
	EventTime FieldMapping `json:"eventTime,omitzero" yaml:"eventTime,omitempty"`
	// EventType maps the event type, which every event must end up with.
	EventType FieldMapping `json:"eventType,omitzero" yaml:"eventType,omitempty"`
	// Subject maps the subject; it may end up empty.
	Subject FieldMapping `json:"subject,omitzero" yaml:"subject,omitempty"`
	// DataVersion maps the data version; it may end up empty.
	DataVersion FieldMapping `json:"dataVersion,omitzero" yaml:"dataVersion,omitempty"`
}

// The mapped fields, in the order of InputMapping.
const (
	mapID = iota
	mapTopic
	mapEventTime
	mapEventType
	mapSubject
	mapDataVersion
	mapFields
)

var mapNames = [mapFields]string{"id", "topic", "eventTime", "eventType", "subject", "dataVersion"}

func (m *InputMapping) fields() [mapFields]FieldMapping {
	return [mapFields]FieldMapping{m.ID, m.Topic, m.EventTime, m.EventType, m.Subject, m.DataVersion}
}

// MappingError is a problem with one field of an [InputMapping].
type MappingError struct {
	Field  string // the mapped Event Grid field: "id", "eventType", ...
	Reason string
}

// Error reads like `inputSchemaMapping.id: defaultValue is not allowed: ...`.
func (e *MappingError) Error() string {
	return "inputSchemaMapping." + e.Field + ": " + e.Reason
}

// Validate reports every problem of the mapping, joined with errors.Join: a defaultValue on id,
// topic or eventTime (Event Grid allows none there), a sourceField with an empty path segment,
// and an eventType with neither a sourceField nor a defaultValue — every event needs a type
// (CloudEvents delivery requires one), so such a mapping could accept no event.
func (m *InputMapping) Validate() error {
	var errs []error
	for f, fm := range m.fields() {
		if fm.DefaultValue != "" && f <= mapEventTime {
			errs = append(errs, &MappingError{Field: mapNames[f], Reason: "defaultValue is not allowed: " + mapNames[f] + " can only come from a sourceField"})
		}
		if reason := HeaderValueProblem(fm.DefaultValue, MaxHeaderAttributeBytes); reason != "" && f == mapDataVersion {
			errs = append(errs, &MappingError{Field: mapNames[f], Reason: "defaultValue " + reason})
		}
		if fm.SourceField != "" && strings.Contains("."+fm.SourceField+".", "..") {
			errs = append(errs, &MappingError{Field: mapNames[f], Reason: "sourceField " + clip.Quote(fm.SourceField) + " has an empty path segment: name a top-level field or a dotted path such as \"header.type\""})
		}
	}
	if m.EventType == (FieldMapping{}) {
		errs = append(errs, &MappingError{Field: "eventType", Reason: "needs a sourceField or a defaultValue: every event must have a type"})
	}
	return errors.Join(errs...)
}

// sourcePath is a parsed sourceField.
type sourcePath struct {
	full  string   // the whole sourceField, "" when unmapped
	first string   // its first segment when it is dotted
	rest  []string // the remaining segments
}

// DecodeCustom decodes a publish to a topic with the custom input schema (SPEC §4,
// eventgrid-behaviour.md §2.3): a JSON array of JSON objects of any shape, whose envelope
// fields m maps.
//
// A mapped source field may be a string, a number or a boolean (numbers and booleans are taken
// as their JSON text); JSON null and the empty string count as absent, an object or array is
// an error. id comes from its source field, or newID() when unmapped or absent. eventTime comes from its
// source field, which must then be an RFC 3339 date-time string, or is now in UTC (RFC 3339).
// topic, when mapped and present, must equal topicID case-insensitively, as in the Event Grid
// schema. eventType, subject and dataVersion come from the source field or the default value;
// an event left without an eventType is an error, subject and dataVersion may end up "". A
// mapped string field holding a lone UTF-16 surrogate escape is an error, as in
// [DecodeEventGrid]; the other fields are not read.
//
// Event.Raw is the published object, byte for byte; Event.Source is topicID. m must pass
// [InputMapping.Validate]; otherwise, or when newID is nil, DecodeCustom returns a plain error
// (a configuration bug, not bad input). Other errors are those of [DecodeEventGrid]; a
// *ValidationError about a mapped field names the source field.
func DecodeCustom(body []byte, m *InputMapping, topicID string, lim Limits, newID func() string, now time.Time) ([]*Event, error) {
	return decodeCustom(body, m, topicID, lim, newID, now, false)
}

// DecodeCustomObjectOrArray decodes what [DecodeCustom] does, and also a body holding a single
// event object, as event 0: a message a broker source feeds to a topic may carry one event or
// a batch. A single object is measured against lim as itself, and nothing but white space may
// follow it. Errors are those of [DecodeCustom].
func DecodeCustomObjectOrArray(body []byte, m *InputMapping, topicID string, lim Limits, newID func() string, now time.Time) ([]*Event, error) {
	return decodeCustom(body, m, topicID, lim, newID, now, true)
}

// decodeCustom is [DecodeCustom], and with single [DecodeCustomObjectOrArray].
func decodeCustom(body []byte, m *InputMapping, topicID string, lim Limits, newID func() string, now time.Time, single bool) ([]*Event, error) {
	if m == nil {
		m = &InputMapping{}
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("decoding a custom schema publish: the topic's input mapping is invalid: %w", err)
	}
	if newID == nil {
		return nil, errors.New("decoding a custom schema publish: newID is nil")
	}
	if err := checkRequestSize(len(body), lim); err != nil {
		return nil, err
	}
	fields := m.fields()
	var paths [mapFields]sourcePath
	for f, fm := range fields {
		paths[f].full = fm.SourceField
		if first, rest, dotted := strings.Cut(fm.SourceField, "."); dotted {
			paths[f].first = first
			paths[f].rest = strings.Split(rest, ".")
		}
	}
	c := &customDecoder{
		fields:  fields,
		paths:   paths,
		topicID: topicID,
		newID:   newID,
		now:     now.UTC().Format(time.RFC3339Nano),
	}
	s := &scanner{buf: body}
	s.skipWS()
	var p problems
	var events []*Event
	decode := func(i int) error {
		ev, err := c.decodeObject(s, i, &p)
		if ev != nil && len(p.errs) == 0 {
			events = append(events, ev)
		}
		return err
	}
	err := scanPublish(s, lim, &p, single, "a custom schema", "event objects", decode)
	if err != nil {
		return nil, err
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	return events, nil
}

type customDecoder struct {
	fields  [mapFields]FieldMapping
	paths   [mapFields]sourcePath
	topicID string
	newID   func() string
	now     string
}

// decodeObject scans one event object, reports its problems to p and returns the event when
// it has none. The error is a scanner error.
func (c *customDecoder) decodeObject(s *scanner, i int, p *problems) (*Event, error) {
	start := s.pos
	var whole, first [mapFields]member
	empty, _ := s.objectStart()
	for !empty {
		key, _, err := s.objectKey()
		if err != nil {
			return nil, err
		}
		var wantWhole, wantFirst [mapFields]bool
		want := false
		for f, path := range c.paths {
			wantWhole[f] = path.full != "" && string(key) == path.full
			wantFirst[f] = path.first != "" && string(key) == path.first
			want = want || wantWhole[f] || wantFirst[f]
		}
		if want {
			var v member
			err = s.scanMember(&v)
			for f := range c.paths {
				if wantWhole[f] {
					whole[f] = v
				}
				if wantFirst[f] {
					first[f] = v
				}
			}
		} else {
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

	bad := false
	// surrogate marks the fields refused for a lone surrogate, whose other checks are moot.
	var surrogate [mapFields]bool
	// resolve returns the mapped field's member, absent when the event does not have it.
	resolve := func(f int) member {
		v := whole[f]
		if v.kind == kindNone && first[f].kind == kindObject {
			v = lookupPath(first[f].tok, c.paths[f].rest)
		}
		return v
	}
	// value returns the mapped field's value and whether the event has it.
	value := func(f int) (string, bool) {
		switch v := resolve(f); v.kind {
		case kindString:
			if esc := loneSurrogateIn(&v); esc != "" && !surrogate[f] {
				p.add(i, c.paths[f].full, "is mapped to "+mapNames[f]+" and "+loneSurrogateReason(esc))
				bad = true
				surrogate[f] = true
			}
			s := unquote(v.tok, v.esc)
			return s, s != ""
		case kindNumber, kindBool:
			return string(v.tok), true
		case kindObject, kindArray:
			p.add(i, c.paths[f].full, "is mapped to "+mapNames[f]+" and must be a string, number or boolean, got "+v.kind.String())
			bad = true
		}
		return "", false
	}
	orDefault := func(f int) string {
		if v, ok := value(f); ok {
			return v
		}
		return c.fields[f].DefaultValue
	}

	ev := &Event{Source: c.topicID}
	if id, ok := value(mapID); ok {
		ev.ID = id
		bad = checkHeaderBound(p, i, c.paths[mapID].full, id, MaxIDBytes) || bad
	} else {
		ev.ID = c.newID()
	}
	if topic, ok := value(mapTopic); ok && !surrogate[mapTopic] && !strings.EqualFold(topic, c.topicID) {
		p.add(i, c.paths[mapTopic].full, "is mapped to topic and is "+clip.Quote(topic)+", but this topic's resource ID is "+clip.Quote(c.topicID)+": send the topic's ID or leave the field out")
		bad = true
	}
	ev.Time = c.now
	if t, ok := value(mapEventTime); ok {
		ev.Time = t
		// As in the Event Grid schema: RFC 3339's grammar, "t" and "z" delivered upper-case,
		// "+0000" accepted and delivered as "+00:00".
		norm, reason := checkEventTime(t, true, false)
		if kind := resolve(mapEventTime).kind; !surrogate[mapEventTime] && (kind != kindString || reason != "") {
			msg := "is mapped to eventTime and must be an RFC 3339 date-time string such as \"2024-05-01T12:00:00Z\", got " + clip.Quote(t)
			if kind == kindString {
				msg += strings.TrimPrefix(reason, notTime(t)) // what is wrong, when it is known
			}
			p.add(i, c.paths[mapEventTime].full, msg)
			bad = true
		} else if reason == "" {
			ev.Time = norm
		}
	}
	ev.Type = orDefault(mapEventType)
	if k := resolve(mapEventType).kind; ev.Type == "" && k != kindObject && k != kindArray {
		field := c.paths[mapEventType].full
		if field == "" {
			field = "eventType"
		}
		p.add(i, field, "is mapped to eventType, but the event does not have it and the mapping has no defaultValue for eventType")
		bad = true
	}
	ev.Subject = orDefault(mapSubject)
	ev.DataVersion = orDefault(mapDataVersion)
	if field := c.paths[mapDataVersion].full; field != "" {
		bad = checkHeaderBound(p, i, field, ev.DataVersion, MaxHeaderAttributeBytes) || bad
	}
	if bad || len(p.errs) > 0 {
		return nil, nil
	}
	ev.Raw = append([]byte(nil), s.buf[start:s.pos]...)
	return ev, nil
}

// lookupPath follows path through the valid JSON object obj and returns the member it leads
// to, or an absent member.
func lookupPath(obj []byte, path []string) member {
	for j, seg := range path {
		s := &scanner{buf: obj}
		var found member
		empty, _ := s.objectStart()
		for !empty {
			key, _, _ := s.objectKey()
			if string(key) == seg {
				_ = s.scanMember(&found) // obj was validated: no errors
			} else {
				_, _ = s.skipValue(1)
			}
			more, _ := s.objectNext()
			empty = !more
		}
		switch {
		case found.kind == kindNone:
			return member{}
		case j == len(path)-1:
			return found
		case found.kind != kindObject:
			return member{}
		}
		obj = found.tok
	}
	return member{}
}
