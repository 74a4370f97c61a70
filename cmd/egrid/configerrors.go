package main

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/egridio/egrid/schemas/member"
)

// The YAML parser's own errors ("yaml: line 5: did not find expected ',' or '}'") are
// rewritten here so that they name the right line and say what to do.

// parserError matches an error of the YAML parser proper (go.yaml.in/yaml/v3's parserc.go),
// as opposed to its scanner: the parser reports its 0-based line (the line where the mapping,
// list or node it was reading starts, or else the line of the problem), and none at all for
// the first line, where the scanner's errors carry the 1-based line.
var parserError = regexp.MustCompile(`^yaml: (?:line (\d+): )?(did not find expected (?:<document start>|node content|'-' indicator|key|',' or ']'|',' or '}')|found undefined tag handle|found duplicate %YAML directive|found incompatible YAML document|found duplicate %TAG directive)$`)

// syntaxHints say what to do about a parser error.
var syntaxHints = map[string]string{
	"did not find expected ',' or '}'":    "inside {…} a plain value ends at ',', '?', '[', ']', '{' or '}': quote a value that holds one, e.g. {dsn: \"postgres://host/db?sslmode=disable\"}",
	"did not find expected ',' or ']'":    "inside […] a plain value ends at ',', '?', '[', ']', '{' or '}': quote a value that holds one, e.g. [\"a,b\"]",
	"did not find expected key":           "check the indentation: the keys of one mapping line up, and a list item (-) cannot follow a key's value",
	"did not find expected '-' indicator": "check the indentation: the items (-) of one list line up",
}

// syntaxError returns err, an error of decoding YAML text, naming the 1-based line the YAML
// parser meant and, where it can, what to do.
func syntaxError(err error) error {
	m := parserError.FindStringSubmatch(err.Error())
	if m == nil {
		return err // the scanner's errors and the decoder's name their lines right
	}
	line := 1
	if m[1] != "" {
		n, _ := strconv.Atoi(m[1])
		line = n + 1
	}
	msg := fmt.Sprintf("yaml: line %d: %s", line, m[2])
	if hint, ok := syntaxHints[m[2]]; ok {
		msg += ": " + hint
	}
	return errors.New(msg)
}

// The decoder's own errors name Go types ("line 7: field bogus not found in type
// router.RetryPolicy", "line 3: cannot unmarshal !!str `ten` into int"), which say nothing to
// whoever wrote the file. configProblems finds the same problems by walking the YAML along the
// Go type it is decoded into, and names each by its path in the config and its line, in the
// words the admin API uses for JSON bodies (schemas/member).

// configError is err, the decoder's error decoding the config document doc, told in the
// config's terms (configProblems): every key and value it refuses, each on a line of its own.
// Its other problems (a key given twice) it words well itself.
func configError(err error, doc *yaml.Node) error {
	problems := configProblems(doc, reflect.TypeFor[fileConfig]())
	if len(problems) == 0 {
		return syntaxError(err)
	}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		for _, line := range te.Errors {
			if !goTypeProblem.MatchString(line) {
				problems = append(problems, errors.New(scrubUserinfo(line)))
			}
		}
	}
	if len(problems) > maxConfigProblems {
		more := len(problems) - maxConfigProblems
		problems = append(problems[:maxConfigProblems], fmt.Errorf("and %d more problems", more))
	}
	return errors.Join(problems...)
}

// maxConfigProblems bounds the problems an error lists: a config declaring thousands of
// subscriptions with one mistake copied into each is told the first ones and how many more.
const maxConfigProblems = 50

// goTypeProblem matches the decoder's errors that configProblems tells in the config's terms.
var goTypeProblem = regexp.MustCompile(`^line \d+: (field .* not found in type |cannot unmarshal )`)

// configProblems returns the problems of the YAML document doc decoded into a value of type t:
// keys t has no field for, and values of the wrong type, in the order they appear.
func configProblems(doc *yaml.Node, t reflect.Type) []error {
	w := configWalk{}
	for _, n := range doc.Content { // a document node holds its one root
		w.value(n, t, "", 0)
	}
	if w.tooExpanded { // first, so that the bound on the problems listed keeps it
		return append([]error{errTooExpanded}, w.problems...)
	}
	return w.problems
}

// errTooExpanded is the problem of a config whose aliases expand too far (configWalk.expanded).
var errTooExpanded = errors.New("the config's aliases (*name) expand it too far to be read: " +
	"a file whose aliases refer to lists of aliases repeats itself millions of times; write the repeated parts out, or refer to them fewer times")

// configWalk is one walk of configProblems: the problems found, and how far aliases have
// expanded the document so far.
type configWalk struct {
	problems []error
	// visits counts the nodes walked, aliased counts those of them reached through an
	// alias, and aliasDepth how many aliases lead to the node being walked.
	visits, aliased, aliasDepth int
	// tooExpanded is set once the walk has stopped on a document whose aliases expand too
	// far (tooExpanded).
	tooExpanded bool
}

// expanded counts one more node walked and reports whether the document's aliases have now
// expanded too far to go on, by the YAML decoder's own rule (go.yaml.in/yaml/v3's
// allowedAliasRatio): a small file whose aliases refer to lists of aliases ("billion laughs")
// would otherwise be walked for minutes along billions of nodes.
func (w *configWalk) expanded() bool {
	if w.tooExpanded {
		return true
	}
	w.visits++
	if w.aliasDepth > 0 {
		w.aliased++
	}
	if w.aliased > 100 && w.visits > 1000 && float64(w.aliased)/float64(w.visits) > allowedAliasRatio(w.visits) {
		w.tooExpanded = true
	}
	return w.tooExpanded
}

// allowedAliasRatio is the YAML decoder's bound on the share of the nodes it decodes that
// come through aliases, after decoding n nodes: 99% up to 400,000 nodes, falling to 10% at
// 4,000,000. The walk keeps to the same bound, so it stops where the decoder refuses
// ("document contains excessive aliasing") and takes what the decoder takes.
func allowedAliasRatio(n int) float64 {
	const low, high = 400_000, 4_000_000
	switch {
	case n <= low:
		return 0.99
	case n >= high:
		return 0.10
	}
	return 0.99 - 0.89*float64(n-low)/float64(high-low)
}

// maxConfigDepth bounds the walk, as the decoder bounds its nesting.
const maxConfigDepth = 100

var (
	yamlUnmarshaler = reflect.TypeFor[yaml.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	durationType    = reflect.TypeFor[time.Duration]()
	timeType        = reflect.TypeFor[time.Time]()
)

func (w *configWalk) add(n *yaml.Node, path, format string, args ...any) {
	w.problems = append(w.problems, errors.New(scrubUserinfo(fmt.Sprintf("line %d: %s: %s", n.Line, pathOrRoot(path), fmt.Sprintf(format, args...)))))
}

// urlUserinfo matches the user information of an URL (scheme://user:password@), which a
// message never repeats: a config error ends up in CI logs and terminals.
var urlUserinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^\s/?#@"'\x60]*@`)

// scrubUserinfo returns s with the user information of every URL in it replaced by "***".
func scrubUserinfo(s string) string { return urlUserinfo.ReplaceAllString(s, "${1}***@") }

func pathOrRoot(path string) string {
	if path == "" {
		return "the config"
	}
	return path
}

// value walks the node n, decoded into a value of type t at path.
func (w *configWalk) value(n *yaml.Node, t reflect.Type, path string, depth int) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
		w.aliasDepth++
		defer func() { w.aliasDepth-- }()
	}
	if w.expanded() {
		return
	}
	if depth > maxConfigDepth {
		return // the decoder's own error stands
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // null leaves a value zero, whatever its type
	}
	pt := reflect.PointerTo(t)
	switch {
	case pt.Implements(yamlUnmarshaler) || pt.Implements(textUnmarshaler) || t == durationType || t == timeType:
		w.leaf(n, t, path)
	case t.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			w.add(n, path, "is %s; give a mapping of %s", nodeShape(n), member.List(yamlFieldNames(t)))
			return
		}
		w.mapping(n, t, path, depth)
	case t.Kind() == reflect.Map:
		if n.Kind != yaml.MappingNode {
			w.add(n, path, "is %s; give a mapping", nodeShape(n))
			return
		}
		for i := 0; i+1 < len(n.Content) && !w.tooExpanded; i += 2 {
			w.value(n.Content[i+1], t.Elem(), joinConfigPath(path, n.Content[i].Value), depth+1)
		}
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		if n.Kind != yaml.SequenceNode {
			w.add(n, path, "is %s; give a list", nodeShape(n))
			return
		}
		for i, item := range n.Content {
			if w.tooExpanded {
				break
			}
			w.value(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i), depth+1)
		}
	case t.Kind() == reflect.Interface:
	default:
		w.leaf(n, t, path)
	}
}

// mapping walks the mapping n decoded into the struct type t.
func (w *configWalk) mapping(n *yaml.Node, t reflect.Type, path string, depth int) {
	fields := yamlFields(t)
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		if key.Value == "<<" && key.Tag == "!!merge" { // a merge key: its mappings are this one's
			merged := []*yaml.Node{val}
			if val.Kind == yaml.AliasNode && val.Alias != nil && val.Alias.Kind == yaml.SequenceNode {
				merged = val.Alias.Content // merging the list an alias names
			} else if val.Kind == yaml.SequenceNode {
				merged = val.Content
			}
			if len(merged) > 0 && merged[0] != val && val.Kind == yaml.AliasNode {
				w.aliasDepth++
			}
			for _, m := range merged {
				w.value(m, t, path, depth+1) // each merged alias is followed there
			}
			if len(merged) > 0 && merged[0] != val && val.Kind == yaml.AliasNode {
				w.aliasDepth--
			}
			if w.tooExpanded {
				return
			}
			continue
		}
		ft, ok := fields.types[key.Value]
		if !ok {
			if fields.anyKey {
				continue
			}
			u := member.Unknown{Path: joinConfigPath(path, key.Value), Parent: path, Known: fields.names, Document: "the config"}
			msg := u.Problem()
			if strings.Contains(key.Value, "${") {
				msg += "; ${...} references expand in values, not in keys"
			}
			w.problems = append(w.problems, errors.New(scrubUserinfo(fmt.Sprintf("line %d: %s", key.Line, msg))))
			continue
		}
		w.value(val, ft, joinConfigPath(path, key.Value), depth+1)
		if w.tooExpanded {
			return
		}
	}
}

// leaf decodes the node n into a new value of type t, reporting a value of the wrong type (or
// a time or duration that does not parse) in the file's terms, and any other error (a custom
// type's own) as it is.
func (w *configWalk) leaf(n *yaml.Node, t reflect.Type, path string) {
	err := n.Decode(reflect.New(t).Interface())
	if err == nil {
		return
	}
	if n.Kind == yaml.ScalarNode && strings.Contains(n.Value, "${") {
		w.add(n, path, "is a ${...} reference, which expands to a string; write %s here (or use its EGRID_* variable)", yamlKind(t))
		return
	}
	var te *yaml.TypeError
	if !errors.As(err, &te) && t != timeType && t != durationType {
		w.add(n, path, "%v", err) // a custom type's own words, URLs' user information scrubbed
		return
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" && (t == timeType || t == durationType) {
		w.add(n, path, "does not parse as %s", yamlKind(t))
		return
	}
	w.add(n, path, "is %s; give %s", nodeShape(n), yamlKind(t))
}

// nodeShape names what a node holds: a scalar by its YAML kind, never by its value, which may
// be a password or a token (an URL with its user information, a DSN) and a config error ends
// up in CI logs; the line and the path say which value it is.
func nodeShape(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.ShortTag() {
	case "!!str":
		return "a string"
	case "!!int":
		return "a whole number"
	case "!!float":
		return "a number"
	case "!!bool":
		return "true or false"
	case "!!timestamp":
		return "a date"
	case "!!binary":
		return "binary data"
	}
	return "a value"
}

// yamlKind names what a config value of type t is written as.
func yamlKind(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a duration such as 30s, 5m or 1h"
	case t == timeType:
		return "a date and time in RFC 3339 form, such as 2026-01-02T15:04:05Z"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number, 0 or more"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	}
	return "a mapping"
}

func joinConfigPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// structFields are the keys a struct decodes from YAML: their names in field order, the type
// of each, and whether an inlined map takes any other key.
type structFields struct {
	names  []string
	types  map[string]reflect.Type
	anyKey bool
}

// yamlFields lists the keys the YAML decoder decodes into the struct type t: its exported
// fields by their yaml names (the field name in lower case when the tag gives none), and the
// fields of those tagged ",inline".
func yamlFields(t reflect.Type) structFields {
	f := structFields{types: map[string]reflect.Type{}}
	f.add(t)
	return f
}

func (f *structFields) add(t reflect.Type) {
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if tag == "-" {
			continue
		}
		if slices.Contains(strings.Split(opts, ","), "inline") {
			ft := sf.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Map {
				f.anyKey = true
			} else {
				f.add(ft)
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(sf.Name)
		}
		f.names = append(f.names, name)
		f.types[name] = sf.Type
	}
}

// yamlFieldNames lists the keys of the struct type t, for a message.
func yamlFieldNames(t reflect.Type) []string { return yamlFields(t).names }
