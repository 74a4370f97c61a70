package filter

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/schemas/clip"
)

// Compile checks s and turns it into a [Filter] for events published in schema, the topic's
// input schema (0 means [schemas.EventGrid]); the schema decides which keys exist (see the
// package documentation).
//
// Every problem is reported at once, joined with errors.Join: each is an
// *[AdvancedFilterError] naming the filter (`advancedFilters[3] (NumberIn on "data.n"): ...`),
// or for the filter count and includedEventTypes a plain error; each wraps one of the
// package's sentinels ([ErrUnknownOperator], [ErrMissingValue], [ErrInvalidValue],
// [ErrValueTooLong], [ErrInvalidKey], [ErrTooManyFilters], [ErrTooManyValues],
// [ErrInvalidEventType]). An unknown schema is a wiring bug and is reported alone. A spec with
// no condition compiles to [All].
func Compile(s Spec, schema schemas.Schema) (*Filter, error) {
	if schema == 0 {
		schema = schemas.EventGrid
	}
	switch schema {
	case schemas.EventGrid, schemas.CloudEvents, schemas.Custom:
	default:
		return nil, fmt.Errorf("compiling filter: unknown input schema %v: use EventGrid, CloudEvents or Custom", schema)
	}
	var errs []error
	f := &Filter{
		prefix:        s.SubjectBeginsWith,
		suffix:        s.SubjectEndsWith,
		caseSensitive: s.IsSubjectCaseSensitive,
		arrays:        s.EnableAdvancedFilteringOnArrays,
	}

	allTypes := len(s.IncludedEventTypes) == 0
	for i, t := range s.IncludedEventTypes {
		switch {
		case t == "":
			errs = append(errs, fmt.Errorf("includedEventTypes[%d]: %w: the event type is empty; name the type, or leave includedEventTypes out to match every type", i, ErrInvalidEventType))
		case strings.EqualFold(t, "All"):
			allTypes = true // the legacy ["All"] (eventgrid-behaviour.md §4.2)
		}
	}
	if !allTypes {
		f.types = append([]string(nil), s.IncludedEventTypes...)
		if len(f.types) > typeScan {
			f.typeSet = make(map[string]struct{}, len(f.types))
			for _, t := range f.types {
				f.typeSet[foldString(t)] = struct{}{}
			}
		}
	}

	if n := len(s.AdvancedFilters); n > MaxAdvancedFilters {
		errs = append(errs, fmt.Errorf("advancedFilters: %w: %d given, at most %d are allowed per subscription; merge filters on the same key or drop %d",
			ErrTooManyFilters, n, MaxAdvancedFilters, n-MaxAdvancedFilters))
	}
	total := 0
	for _, a := range s.AdvancedFilters {
		total += countValues(a)
	}
	var envelope, raw []cond
	var rawPaths [][]string
	running := 0
	for i, a := range s.AdvancedFilters {
		c, segs, ferrs := compileAdvanced(a, schema)
		n := countValues(a)
		if running <= MaxFilterValues && running+n > MaxFilterValues {
			ferrs = append(ferrs, fmt.Errorf("%w: this filter's %d value(s) bring the total to %d, and all advanced filters together have %d; at most %d are allowed across all advanced filters of a subscription",
				ErrTooManyValues, n, running+n, total, MaxFilterValues))
		}
		running += n
		if len(ferrs) > 0 {
			name := a.OperatorType
			if c.op.valid() {
				name = c.op.String()
			}
			for _, err := range ferrs {
				errs = append(errs, &AdvancedFilterError{Index: i, OperatorType: name, Key: a.Key, Err: err})
			}
			continue
		}
		if c.field == fieldRaw {
			raw = append(raw, c)
			rawPaths = append(rawPaths, segs)
		} else {
			envelope = append(envelope, c)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	if len(raw) > 0 {
		f.root = &pathNode{slot: -1}
		for i := range raw {
			raw[i].slot = f.root.add(rawPaths[i], &f.nslots)
		}
	}
	// Envelope conditions first: they cost nothing, and when one fails the raw JSON is never
	// scanned.
	f.conds = append(envelope, raw...)

	if f.types == nil && f.prefix == "" && f.suffix == "" && len(f.conds) == 0 {
		return All, nil
	}
	return f, nil
}

// countValues is how many values a filter adds to the subscription's total: one per element
// of "values" and one for "value".
func countValues(a AdvancedFilter) int {
	n := len(a.Values)
	if a.Value != nil {
		n++
	}
	return n
}

// compileAdvanced checks one advanced filter. segs is the raw path when the key is not an
// envelope field.
func compileAdvanced(a AdvancedFilter, schema schemas.Schema) (c cond, segs []string, errs []error) {
	op, err := ParseOperator(a.OperatorType)
	if err != nil {
		errs = append(errs, err)
	}
	c.field, segs, err = resolveKey(a.Key, schema)
	if err != nil {
		errs = append(errs, err)
	}
	if op == 0 {
		return c, segs, errs
	}
	c.op = op
	info := op.info()
	switch info.operand {
	case operandNone:
		if a.Value != nil || len(a.Values) > 0 {
			errs = append(errs, fmt.Errorf("%w: %s takes no value; remove \"value\" and \"values\"", ErrInvalidValue, op))
		}
		return c, segs, errs
	case operandNumber, operandBool:
		what := "a number"
		if info.operand == operandBool {
			what = "true or false"
		}
		switch {
		case a.Value == nil && len(a.Values) > 0:
			return c, segs, append(errs, fmt.Errorf("%w: %s takes one \"value\" (%s), not a \"values\" list", ErrInvalidValue, op, what))
		case a.Value == nil:
			return c, segs, append(errs, fmt.Errorf("%w: %s needs \"value\": %s", ErrMissingValue, op, what))
		case len(a.Values) > 0:
			errs = append(errs, fmt.Errorf("%w: %s takes only \"value\"; remove \"values\"", ErrInvalidValue, op))
		}
		v := normalize(a.Value)
		if info.operand == operandBool {
			b, ok := v.(bool)
			if !ok {
				return c, segs, append(errs, fmt.Errorf("%w: \"value\" must be true or false, got %s", ErrInvalidValue, describe(v)))
			}
			c.b = b
			return c, segs, errs
		}
		n, err := number(v, `"value"`)
		if err != nil {
			return c, segs, append(errs, err)
		}
		c.num = n
		return c, segs, errs
	}

	// Multi-value operators.
	what := "a list of strings, such as [\"a\", \"b\"]"
	switch info.operand {
	case operandNumbers:
		what = "a list of numbers, such as [5, 10]"
	case operandRanges:
		what = "a list of [low, high] pairs, such as [[0, 10], [20, 30]]"
	}
	switch {
	case a.Value != nil && len(a.Values) == 0:
		return c, segs, append(errs, fmt.Errorf("%w: %s takes \"values\" (%s), not a single \"value\"", ErrInvalidValue, op, what))
	case a.Value != nil:
		errs = append(errs, fmt.Errorf("%w: %s takes only \"values\"; remove \"value\"", ErrInvalidValue, op))
	case len(a.Values) == 0:
		return c, segs, append(errs, fmt.Errorf("%w: %s needs \"values\": %s", ErrMissingValue, op, what))
	}
	for j, raw := range a.Values {
		v := normalize(raw)
		name := fmt.Sprintf("values[%d]", j)
		switch info.operand {
		case operandNumbers:
			n, err := number(v, name)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			c.nums = append(c.nums, n)
		case operandRanges:
			r, err := numberRange(v, name)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			c.ranges = append(c.ranges, r)
		case operandStrings:
			s, ok := toString(v)
			if !ok {
				errs = append(errs, fmt.Errorf("%w: %s must be a string, got %s", ErrInvalidValue, name, describe(v)))
				continue
			}
			if n := utf8.RuneCountInString(s); n > MaxStringValueLength {
				errs = append(errs, fmt.Errorf("%w: %s has %d characters, at most %d are allowed", ErrValueTooLong, name, n, MaxStringValueLength))
				continue
			}
			c.strs = append(c.strs, s)
		}
	}
	if info.base == StringContains || op == StringContains {
		c.folded = make([]string, len(c.strs))
		for j, s := range c.strs {
			c.folded[j] = foldString(s)
		}
	}
	return c, segs, errs
}

// envelope field names of the Event Grid schema (eventgrid-behaviour.md §4.4), lower case.
var eventGridFields = map[string]field{
	"id":          fieldID,
	"topic":       fieldSource,
	"subject":     fieldSubject,
	"eventtype":   fieldType,
	"dataversion": fieldDataVersion,
	"eventtime":   fieldTime,
}

// CloudEvents attributes the decoded event carries; the others (dataschema, datacontenttype,
// extensions) are read from the raw object.
var cloudEventFields = map[string]field{
	"id":          fieldID,
	"source":      fieldSource,
	"type":        fieldType,
	"specversion": fieldSpecVersion,
	"subject":     fieldSubjectOptional,
	"time":        fieldTimeOptional,
}

// resolveKey maps a key to an envelope field, or to a raw path (field == fieldRaw) in the
// event's Raw; an empty path is Raw itself.
func resolveKey(key string, schema schemas.Schema) (field, []string, error) {
	if key == "" {
		return 0, nil, fmt.Errorf("%w: the key is empty; name an envelope field such as subject, or a data path such as data.key1", ErrInvalidKey)
	}
	segs := strings.Split(key, ".")
	for _, s := range segs {
		if s == "" {
			return 0, nil, fmt.Errorf("%w: key %q has an empty segment; separate field names with single dots, as in data.a.b", ErrInvalidKey, clip.String(key))
		}
	}
	first := strings.ToLower(segs[0])
	switch schema {
	case schemas.EventGrid:
		if first == "data" {
			return fieldRaw, segs, nil
		}
		f, ok := eventGridFields[first]
		if !ok {
			return 0, nil, fmt.Errorf("%w: %q is not a field of the Event Grid schema; use id, topic, subject, eventType, dataVersion, eventTime, or a data path such as data.key1", ErrInvalidKey, clip.String(segs[0]))
		}
		if len(segs) > 1 {
			return 0, nil, fmt.Errorf("%w: %q is a string field of the Event Grid envelope and has no fields of its own; only data can be walked into (data.key1)", ErrInvalidKey, clip.String(segs[0]))
		}
		return f, nil, nil
	case schemas.CloudEvents:
		if f, ok := cloudEventFields[first]; ok && len(segs) == 1 {
			return f, nil, nil
		}
	case schemas.Custom:
		// In Event Grid's view the whole published object is the event's data and the
		// envelope is what inputSchemaMapping made of it (eventgrid-behaviour.md §2.3, §4.4):
		// data paths walk the object from its root, and envelope names read the mapped fields.
		if first == "data" {
			return fieldRaw, segs[1:], nil // "data" alone is the object itself: the trie's root
		}
		if f, ok := eventGridFields[first]; ok && len(segs) == 1 {
			return f, nil, nil
		}
		// egrid's extension: any other key, and an envelope name with a path below it, is a
		// top-level member of the object and a dotted path below it. It keeps subscriptions
		// stored before data paths read the object's root compiling and matching as they did.
	}
	return fieldRaw, segs, nil
}

// normalize decodes a json.RawMessage operand; other values are returned as they are.
func normalize(v any) any {
	if r, ok := v.(json.RawMessage); ok {
		var out any
		if err := json.Unmarshal(r, &out); err != nil {
			return r
		}
		return out
	}
	return v
}

// toNumber converts any Go number, or a json.Number, to float64.
func toNumber(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return float64(rv.Int()), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return float64(rv.Uint()), true
	case reflect.Float32, reflect.Float64:
		return rv.Float(), true
	}
	return 0, false
}

// toString accepts a string, or a value of a named string type other than json.Number.
func toString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case json.Number:
		return "", false
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.String {
		return rv.String(), true
	}
	return "", false
}

func number(v any, name string) (float64, error) {
	n, ok := toNumber(v)
	if !ok {
		hint := ""
		if _, isString := v.(string); isString {
			hint = " (write numbers without quotes)"
		}
		return 0, fmt.Errorf("%w: %s must be a number, got %s%s", ErrInvalidValue, name, describe(v), hint)
	}
	if math.IsNaN(n) || math.IsInf(n, 0) {
		return 0, fmt.Errorf("%w: %s must be a finite number, got %v", ErrInvalidValue, name, n)
	}
	return n, nil
}

func numberRange(v any, name string) ([2]float64, error) {
	rv := reflect.ValueOf(v)
	if k := rv.Kind(); (k != reflect.Slice && k != reflect.Array) || rv.Len() != 2 {
		return [2]float64{}, fmt.Errorf("%w: %s must be a [low, high] pair of numbers, got %s", ErrInvalidValue, name, describe(v))
	}
	var r [2]float64
	for k := range 2 {
		n, err := number(normalize(rv.Index(k).Interface()), fmt.Sprintf("%s[%d]", name, k))
		if err != nil {
			return r, err
		}
		r[k] = n
	}
	if r[0] > r[1] {
		return r, fmt.Errorf("%w: %s: the low end %s is above the high end %s; write [low, high]",
			ErrInvalidValue, name, formatNumber(r[0]), formatNumber(r[1]))
	}
	return r, nil
}

func formatNumber(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// describe names a value's type (and the value, shortened) for an error message.
func describe(v any) string {
	if v == nil {
		return "null"
	}
	switch x := v.(type) {
	case string:
		return "string " + clip.Quote(x)
	case bool:
		return "bool " + strconv.FormatBool(x)
	case json.RawMessage:
		return "invalid JSON"
	}
	if n, ok := toNumber(v); ok {
		return "number " + formatNumber(n)
	}
	switch reflect.ValueOf(v).Kind() {
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return fmt.Sprintf("a %T", v)
}
