package httpapi

import (
	"encoding"
	"encoding/json"
	"reflect"
	"strings"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/schemas/member"
)

// isUnknownField reports whether err is encoding/json's error for a member that
// DisallowUnknownFields refused ("json: unknown field "x""), which names the member but not
// where it is.
func isUnknownField(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "json: unknown field ")
}

// unknownMembers finds the members of the JSON raw that encoding/json, decoding it into a
// value of type t with DisallowUnknownFields, refuses as unknown, at any depth, in the order
// they appear: it returns the first max of them, each with its JSON path under root ("" for
// the body itself), and how many there are in all. Member names are matched ignoring case, as
// encoding/json matches them. raw has passed checkStrictJSON, so it is JSON; a value of the
// wrong JSON type for its field is passed over (the decoder's own error names it).
//
// The walk takes time in proportion to raw, as the decode did: it follows the Go type, which
// is finite, and skips what the type does not describe, and a path is written out only for a
// member it reports.
func unknownMembers(raw []byte, t reflect.Type, root string, max int) (found []member.Unknown, total int) {
	w := unknownWalk{sc: schemas.NewJSONScanner(raw, true), max: max}
	w.sc.SkipSpace()
	w.path = []pathSegment{{name: root, index: -1}}
	_ = w.value(t, 0) // a syntax error ends the walk with what it found
	return w.found, w.total
}

type unknownWalk struct {
	sc    schemas.JSONScanner
	path  []pathSegment // as strictWalk keeps it
	max   int
	found []member.Unknown
	total int
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// pathString is the walk's path, as strictWalk writes it.
func (w *unknownWalk) pathString() string {
	sw := strictWalk{path: w.path}
	return sw.pathString()
}

// value walks the value at the scanner's position, decoded into t.
func (w *unknownWalk) value(t reflect.Type, depth int) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	sc := &w.sc
	custom := reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler)
	switch {
	case custom: // decodes itself (time.Time, json.RawMessage): no members to check
	case t.Kind() == reflect.Struct && sc.Peek() == '{':
		return w.object(t, depth)
	case (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && sc.Peek() == '[':
		if sc.ArrayStart() {
			return nil
		}
		w.path = append(w.path, pathSegment{})
		defer func() { w.path = w.path[:len(w.path)-1] }()
		for i := 0; ; i++ {
			w.path[len(w.path)-1].index = i
			if err := w.value(t.Elem(), depth+1); err != nil {
				return err
			}
			if more, err := sc.ArrayNext(); err != nil || !more {
				return err
			}
		}
	case t.Kind() == reflect.Map && sc.Peek() == '{':
		if sc.ObjectStart() {
			return nil
		}
		for {
			key, err := sc.Key()
			if err != nil {
				return err
			}
			w.path = append(w.path, pathSegment{name: string(key), index: -1})
			err = w.value(t.Elem(), depth+1)
			w.path = w.path[:len(w.path)-1]
			if err != nil {
				return err
			}
			if more, err := sc.ObjectNext(); err != nil || !more {
				return err
			}
		}
	}
	_, err := sc.Skip(depth)
	sc.SkipSpace()
	return err
}

// object walks an object decoded into the struct type t.
func (w *unknownWalk) object(t reflect.Type, depth int) error {
	sc := &w.sc
	if sc.ObjectStart() {
		return nil
	}
	fields := jsonFields(t)
	for {
		key, err := sc.Key()
		if err != nil {
			return err
		}
		name := string(key)
		i := -1
		for j, f := range fields {
			if strings.EqualFold(f.name, name) {
				i = j
				break
			}
		}
		if i < 0 {
			w.total++
			if len(w.found) < w.max {
				parent := w.pathString()
				w.path = append(w.path, pathSegment{name: name, index: -1})
				u := member.Unknown{Path: w.pathString(), Parent: parent, Document: "the body"}
				w.path = w.path[:len(w.path)-1]
				for _, f := range fields {
					u.Known = append(u.Known, f.name)
				}
				w.found = append(w.found, u)
			}
			if _, err := sc.Skip(depth + 1); err != nil {
				return err
			}
			sc.SkipSpace()
		} else {
			w.path = append(w.path, pathSegment{name: fields[i].name, index: -1})
			err := w.value(fields[i].typ, depth+1)
			w.path = w.path[:len(w.path)-1]
			if err != nil {
				return err
			}
		}
		if more, err := sc.ObjectNext(); err != nil || !more {
			return err
		}
	}
}

// jsonField is a member of a struct's JSON object: its name and the Go type of its value.
type jsonField struct {
	name string
	typ  reflect.Type
}

// jsonFields lists the members encoding/json decodes into the struct type t, in field order:
// its exported fields and those of its embedded structs, by their JSON names.
func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	for _, f := range reflect.VisibleFields(t) {
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" && tag == "-" {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			continue // its fields are among the visible ones
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, jsonField{name: name, typ: f.Type})
	}
	return out
}
