package filter

import (
	"slices"
	"strings"

	"github.com/egridio/egrid/schemas"
)

// Filter is a compiled [Spec]. It is immutable and safe for concurrent use; a nil *Filter
// matches every event, like [All].
type Filter struct {
	types         []string            // nil: every type
	typeSet       map[string]struct{} // types folded ([foldString]), when there are more than [typeScan]
	prefix        string
	suffix        string
	caseSensitive bool
	arrays        bool
	conds         []cond // envelope conditions first, then raw ones
	root          *pathNode
	nslots        int
}

// typeScan is the most includedEventTypes a filter compares one by one; a longer list (Azure
// documents no bound on it) is looked up in a set of its folded types, so its length costs a
// matched event nothing.
const typeScan = 8

// All is the filter that matches every event; [Compile] returns it for a [Spec] without
// conditions, so a caller can skip matching with f == filter.All.
var All = &Filter{}

// field says where a condition reads its key.
type field uint8

const (
	fieldRaw             field = iota // a path in the event's raw JSON
	fieldID                           // Event.ID
	fieldSource                       // Event.Source: CloudEvents source, Event Grid topic
	fieldSubject                      // Event.Subject
	fieldType                         // Event.Type
	fieldDataVersion                  // Event.DataVersion
	fieldTime                         // Event.Time
	fieldSpecVersion                  // Event.SpecVersion
	fieldSubjectOptional              // Event.Subject, absent when empty (CloudEvents)
	fieldTimeOptional                 // Event.Time, absent when empty (CloudEvents)
)

// cond is one compiled advanced filter.
type cond struct {
	op     Operator
	field  field
	slot   int // index into the extracted raw values when field == fieldRaw
	num    float64
	b      bool
	nums   []float64
	ranges [][2]float64
	strs   []string
	folded []string // strs case-folded, for StringContains and StringNotContains
}

// Advanced returns the number of advanced filters of f (0 for nil): a subscription whose filter
// has any counts its evaluations in AdvancedFilterEvaluationCount.
func (f *Filter) Advanced() int {
	if f == nil {
		return 0
	}
	return len(f.conds)
}

// Match reports whether ev passes every part of the filter: event type, subject prefix and
// suffix, and every advanced filter (SPEC.md §3). It reads ev.Raw only if an advanced filter
// on a raw key is reached, and scans it at most once. A nil ev matches no filter (a store
// returns none; this keeps a bug elsewhere from becoming a panic here). Match does not
// modify ev.
func (f *Filter) Match(ev *schemas.Event) bool {
	if f == nil {
		return true
	}
	if ev == nil {
		return false
	}
	if f.typeSet != nil {
		var buf [128]byte
		if _, ok := f.typeSet[string(appendFold(buf[:0], ev.Type))]; !ok {
			return false
		}
	} else if f.types != nil && !slices.ContainsFunc(f.types, func(t string) bool { return strings.EqualFold(t, ev.Type) }) {
		return false
	}
	if f.caseSensitive {
		if !strings.HasPrefix(ev.Subject, f.prefix) || !strings.HasSuffix(ev.Subject, f.suffix) {
			return false
		}
	} else if !hasPrefixFold(ev.Subject, f.prefix) || !hasSuffixFold(ev.Subject, f.suffix) {
		return false
	}
	var buf [4]value // raw values of a filter with few paths stay off the heap
	var raw []value
	// Envelope values are kept, like raw ones, so that each is case-folded at most once.
	var env [fieldTimeOptional + 1]value
	var envRead uint16
	for i := range f.conds {
		c := &f.conds[i]
		var v *value
		if c.field == fieldRaw {
			if raw == nil {
				if f.nslots <= len(buf) {
					raw = buf[:f.nslots]
				} else {
					raw = make([]value, f.nslots)
				}
				extract(ev.Raw, f.root, raw, f.arrays, f.conds)
			}
			v = &raw[c.slot]
		} else {
			v = &env[c.field]
			if envRead&(1<<c.field) == 0 {
				*v = envelopeValue(ev, c.field)
				envRead |= 1 << c.field
			}
		}
		if !c.eval(v, f.arrays, 1<<i) {
			return false
		}
	}
	return true
}

// envelopeValue reads an envelope field from the decoded event.
func envelopeValue(ev *schemas.Event, f field) value {
	var s string
	switch f {
	case fieldID:
		s = ev.ID
	case fieldSource:
		s = ev.Source
	case fieldSubject:
		s = ev.Subject
	case fieldType:
		s = ev.Type
	case fieldDataVersion:
		s = ev.DataVersion
	case fieldTime:
		s = ev.Time
	case fieldSpecVersion:
		s = ev.SpecVersion
	case fieldSubjectOptional:
		s = ev.Subject
	case fieldTimeOptional:
		s = ev.Time
	}
	if s == "" && (f == fieldSubjectOptional || f == fieldTimeOptional) {
		return value{} // absent
	}
	return value{kind: kindString, s: s}
}

// eval applies the condition, whose bit in [value.hits] is bit, to a key's value
// (eventgrid-behaviour.md §4.5; the package documentation lists the decisions for missing
// keys, null, types and arrays).
func (c *cond) eval(v *value, arrays bool, bit uint32) bool {
	info := c.op.info()
	switch c.op {
	case IsNullOrUndefined:
		return v.kind == kindMissing || v.kind == kindNull
	case IsNotNull:
		return v.kind != kindMissing && v.kind != kindNull
	}
	var hit bool
	switch v.kind {
	case kindMissing, kindNull:
		return info.matchesMissing
	case kindArray:
		if !arrays {
			return false
		}
		hit = v.hits&bit != 0
	default:
		hit = c.holds(v)
	}
	return hit != info.negated
}

// holds reports whether the positive form of the operator holds for a scalar; a value of
// another JSON type never does. It may case-fold v, once ([value.fold]).
func (c *cond) holds(v *value) bool {
	switch c.op {
	case NumberIn, NumberNotIn:
		return v.kind == kindNumber && slices.Contains(c.nums, v.n)
	case NumberLessThan:
		return v.kind == kindNumber && v.n < c.num
	case NumberGreaterThan:
		return v.kind == kindNumber && v.n > c.num
	case NumberLessThanOrEquals:
		return v.kind == kindNumber && v.n <= c.num
	case NumberGreaterThanOrEquals:
		return v.kind == kindNumber && v.n >= c.num
	case NumberInRange, NumberNotInRange:
		if v.kind != kindNumber {
			return false
		}
		for _, r := range c.ranges {
			if r[0] <= v.n && v.n <= r[1] {
				return true
			}
		}
		return false
	case BoolEquals:
		return v.kind == kindBool && v.b == c.b
	}
	if v.kind != kindString {
		return false
	}
	switch c.op {
	case StringIn, StringNotIn:
		for _, s := range c.strs {
			if strings.EqualFold(v.s, s) {
				return true
			}
		}
	case StringContains, StringNotContains:
		folded := v.fold()
		for _, s := range c.folded {
			if strings.Contains(folded, s) {
				return true
			}
		}
	case StringBeginsWith, StringNotBeginsWith:
		for _, s := range c.strs {
			if hasPrefixFold(v.s, s) {
				return true
			}
		}
	case StringEndsWith, StringNotEndsWith:
		for _, s := range c.strs {
			if hasSuffixFold(v.s, s) {
				return true
			}
		}
	}
	return false
}
