package filter

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// refNode is a JSON value decoded by encoding/json with object members kept in order, the
// reference the scanner is checked against.
type refNode struct {
	v       value
	keys    []string
	members []*refNode
	elems   []*refNode
}

func refDecode(data []byte) (*refNode, bool) {
	if !json.Valid(data) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	n, err := refValue(dec)
	if err != nil || n.v.kind != kindObject {
		return nil, false
	}
	return n, true
}

func refValue(dec *json.Decoder) (*refNode, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch x := tok.(type) {
	case json.Delim:
		if x == '{' {
			n := &refNode{v: value{kind: kindObject}}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				m, err := refValue(dec)
				if err != nil {
					return nil, err
				}
				n.keys = append(n.keys, k.(string))
				n.members = append(n.members, m)
			}
			_, err := dec.Token()
			return n, err
		}
		n := &refNode{v: value{kind: kindArray}}
		for dec.More() {
			e, err := refValue(dec)
			if err != nil {
				return nil, err
			}
			n.elems = append(n.elems, e)
		}
		_, err := dec.Token()
		return n, err
	case json.Number:
		f, _ := strconv.ParseFloat(string(x), 64)
		return &refNode{v: value{kind: kindNumber, n: f}}, nil
	case string:
		return &refNode{v: value{kind: kindString, s: x}}, nil
	case bool:
		return &refNode{v: value{kind: kindBool, b: x}}, nil
	}
	return &refNode{v: value{kind: kindNull}}, nil
}

// refLookup finds a path by the documented rule: an object member repeated under one name
// counts only at its last occurrence, and of the candidates left the one with the fewest
// case-insensitive segment matches wins, among those the last in document order. An array
// found carries, in hits, the conditions of conds (those on slot) that hold for one of its
// scalar elements.
func refLookup(n *refNode, segs []string, folds int, arrays bool, conds []cond, slot int, best *value, found *bool) {
	if len(segs) == 0 {
		v := n.v
		if v.kind == kindArray && arrays {
			for i, c := range conds {
				if c.slot != slot || c.op == IsNotNull || c.op == IsNullOrUndefined {
					continue
				}
				for _, e := range n.elems {
					if e.v.kind != kindObject && e.v.kind != kindArray && c.holds(&e.v) {
						v.hits |= 1 << i
					}
				}
			}
		}
		if !*found || folds <= best.folds {
			*best, *found = v, true
			best.folds = folds
		}
		return
	}
	for i, k := range n.keys {
		if slices.Contains(n.keys[i+1:], k) {
			continue // a later member of the same name replaces this one
		}
		switch {
		case k == segs[0]:
			refLookup(n.members[i], segs[1:], folds, arrays, conds, slot, best, found)
		case strings.EqualFold(k, segs[0]):
			refLookup(n.members[i], segs[1:], folds+1, arrays, conds, slot, best, found)
		}
	}
}

// sameValue compares two values, their hits only in mask.
func sameValue(a, b value, mask uint32) bool {
	return a.kind == b.kind && a.b == b.b && a.s == b.s && a.n == b.n && a.folds == b.folds && a.hits&mask == b.hits&mask
}

var scanPaths = [][]string{{"a"}, {"a", "b"}, {"A", "b"}, {"data"}, {"data", "k"}, {"data", "K", "x"}, {"k"}, {"é"}}

// scanConds returns, for each of n slots, the conditions the scan tests array elements with:
// one each for numbers, strings and booleans, and IsNotNull, which reads no element.
func scanConds(n int) []cond {
	var conds []cond
	for slot := range n {
		conds = append(conds,
			cond{op: NumberGreaterThan, slot: slot, num: 0},
			cond{op: StringContains, slot: slot, strs: []string{"é"}, folded: []string{foldString("é")}},
			cond{op: BoolEquals, slot: slot, b: true})
	}
	return append(conds, cond{op: IsNotNull, slot: 0})
}

// checkExtract compares extract with the encoding/json reference for one input.
func checkExtract(t *testing.T, data []byte, extra string) {
	paths := scanPaths
	if extra != "" && !slicesHasEmpty(strings.Split(extra, ".")) {
		paths = append(paths[:len(paths):len(paths)], strings.Split(extra, "."))
	}
	root := &pathNode{slot: -1}
	var nslots int
	slots := make([]int, len(paths))
	for i, p := range paths {
		slots[i] = root.add(p, &nslots)
	}
	conds := scanConds(nslots)
	ref, ok := refDecode(data)
	for _, arrays := range []bool{false, true} {
		got := make([]value, nslots)
		extract(data, root, got, arrays, conds)
		if !ok {
			for i, v := range got {
				if v.kind != kindMissing {
					t.Fatalf("extract(%q) (arrays %v): slot %d is %+v, but the JSON is not a valid object, so every key is missing", data, arrays, i, v)
				}
			}
			continue
		}
		for i, p := range paths {
			var want value
			var found bool
			refLookup(ref, p, 0, arrays, conds, slots[i], &want, &found)
			var mask uint32
			for j, c := range conds {
				if c.slot == slots[i] {
					mask |= 1 << j
				}
			}
			if !sameValue(got[slots[i]], want, mask) {
				t.Fatalf("extract(%q) path %q (arrays %v) = %+v, encoding/json gives %+v", data, p, arrays, got[slots[i]], want)
			}
		}
	}
}

func slicesHasEmpty(s []string) bool {
	for _, x := range s {
		if x == "" {
			return true
		}
	}
	return false
}

// TestExtract checks the single-pass scanner against encoding/json on hand-picked inputs.
func TestExtract(t *testing.T) {
	for _, data := range []string{
		`{}`,
		`{"a":1,"A":{"b":2},"a":{"b":3}}`,
		`{"a":{"b":1},"a":{"c":2}}`,
		`{"A":{"b":2},"a":{"b":1},"a":{}}`,
		`{"a":{"b":1,"b":2,"B":3},"A":{"b":4}}`,
		`{"data":{"k":[1,"é"],"k":[true]},"k":{},"k":[0,"x",{"k":1},[2],true,null,"É"]}`,
		`{"k":1,"k":2,"K":3,"K":4}`,
		`{"A":{"b":"x"},"a":{"B":"y"}}`,
		`{"data":{"k":[1,"2",true,null,{"x":1},[2]],"K":{"x":null}}}`,
		`{"data":{"K":{"x":1e400},"k":{"x":2}}}`,
		`{"\u00e9":"\u00c9t\u00e9","É":1}`,
		"{\"k\":\"\xff\xfe\"}",
		`{"k":"a\u0000b\ud83d\ude00\ud800"}`,
		`{"a" : [ ] , "k" : -0 }`,
		`{"a":{"b":{}}} `,
		`{"a":1}x`,
		`{"a":tru}`,
		`{"a":"\u12"}`,
		`{"a":1.}`,
		`{"a":-}`,
		`{"a":1e}`,
		`{"a":[1,]}`,
		`{"a":{"b":1,}}`,
		`{"a" 1}`,
		`["a"]`,
		`"a"`,
		`{"data":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`,
		`{"data":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`,
		`{"data":` + strings.Repeat(`{"k":`, 10001) + `1` + strings.Repeat("}", 10001) + `}`,
	} {
		checkExtract(t, []byte(data), "")
	}
}

// FuzzExtract checks the single-pass scanner against encoding/json on arbitrary input: on
// valid JSON the same value at every path, on anything else no panic.
func FuzzExtract(f *testing.F) {
	f.Add([]byte(`{"a":{"b":[1,"x",true]},"data":{"k":null}}`), "a.b")
	f.Add([]byte(`{"A":{"b":2},"a":{"b":3},"k":"\u006b"}`), "a")
	f.Add([]byte(`{"data":{"K":{"x":"y"}}}`), "data.k.x")
	f.Add([]byte(`{"a":{"b":1},"a":{"c":[1,"é",true]},"A":{"b":2},"k":[0],"k":["É"]}`), "a.c")
	f.Fuzz(func(t *testing.T, data []byte, key string) {
		checkExtract(t, data, key)
	})
}

// TestFoldRune checks that foldRune maps every rune to a member of its own case-folding orbit
// and gives every member of an orbit the same result, i.e. that foldRune(a) == foldRune(b)
// exactly when strings.EqualFold says a and b are equal.
func TestFoldRune(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		c := foldRune(r)
		inOrbit := c == r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			inOrbit = inOrbit || f == c
			if foldRune(f) != c {
				t.Fatalf("foldRune(%U) = %U but foldRune(%U) = %U, though they fold together", r, c, f, foldRune(f))
			}
		}
		if !inOrbit {
			t.Fatalf("foldRune(%U) = %U, which does not fold together with it", r, c)
		}
	}
}

// FuzzFold checks the case-insensitive helpers against strings.EqualFold.
func FuzzFold(f *testing.F) {
	f.Add("Hello, World", "hello")
	f.Add("\u212aelvin", "kEL")
	f.Add("ΟΔΥΣΣΕΥΣ", "σς")
	f.Fuzz(func(t *testing.T, s, p string) {
		if !utf8.ValidString(s) || !utf8.ValidString(p) {
			return
		}
		var prefix, suffix, contains bool
		for i := 0; i <= len(s); i++ {
			if i < len(s) && !utf8.RuneStart(s[i]) {
				continue
			}
			prefix = prefix || strings.EqualFold(s[:i], p)
			suffix = suffix || strings.EqualFold(s[i:], p)
			for j := i; j <= len(s); j++ {
				if j == len(s) || utf8.RuneStart(s[j]) {
					contains = contains || strings.EqualFold(s[i:j], p)
				}
			}
		}
		if got := hasPrefixFold(s, p); got != prefix {
			t.Errorf("hasPrefixFold(%q, %q) = %v, want %v", s, p, got, prefix)
		}
		if got := hasSuffixFold(s, p); got != suffix {
			t.Errorf("hasSuffixFold(%q, %q) = %v, want %v", s, p, got, suffix)
		}
		if got := strings.Contains(foldString(s), foldString(p)); got != contains {
			t.Errorf("contains(%q, %q) = %v, want %v", s, p, got, contains)
		}
		if got := foldString(s) == foldString(p); got != strings.EqualFold(s, p) {
			t.Errorf("foldString(%q) == foldString(%q) is %v, strings.EqualFold says %v", s, p, got, !got)
		}
		if got := equalFoldBytes([]byte(s), p); got != strings.EqualFold(s, p) {
			t.Errorf("equalFoldBytes(%q, %q) = %v", s, p, got)
		}
	})
}

// TestExtractReadsToTheEnd checks that the scan reads past a path's value to the end of the
// event: a later member of the same name replaces it (as receivers' decoders do), and a
// fault anywhere leaves every key missing.
func TestExtractReadsToTheEnd(t *testing.T) {
	root := &pathNode{slot: -1}
	var nslots int
	slot := root.add([]string{"data", "k"}, &nslots)
	tests := []struct {
		name string
		raw  string
		want kind
	}{
		{name: "exact match, then garbage", raw: `{"data":{"k":5,` + "\x00garbage", want: kindMissing},
		{name: "exact match, then a fault at the end", raw: `{"data":{"k":5}`, want: kindMissing},
		{name: "exact match, then the name again", raw: `{"data":{"k":5,"k":"x"}}`, want: kindString},
		{name: "exact match, then data again without it", raw: `{"data":{"k":5},"data":{"j":true}}`, want: kindMissing},
		{name: "data again without it, then it", raw: `{"data":{"k":5},"data":{"j":true},"data":{"k":null}}`, want: kindNull},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vals := make([]value, nslots)
			extract([]byte(tt.raw), root, vals, false, nil)
			if got := vals[slot].kind; got != tt.want {
				t.Errorf("extract(%q): kind %v, want %v", tt.raw, got, tt.want)
			}
		})
	}
}
