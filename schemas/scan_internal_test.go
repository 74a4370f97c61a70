package schemas

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// scanAll reports whether b is one JSON value, as the scanner sees it.
func scanAll(b []byte) error {
	s := &scanner{buf: b}
	s.skipWS()
	if _, err := s.skipValue(0); err != nil {
		return err
	}
	return s.end()
}

// The scanner accepts exactly what encoding/json accepts, except invalid UTF-8 (refused).
func TestScannerAgreesWithEncodingJSON(t *testing.T) {
	inputs := []string{
		`{}`, `[]`, `""`, `0`, `-0`, `-0.5e-7`, `1E+2`, `true`, `false`, `null`, ` [1, {"a": [true, null]}] `,
		`"\u00e9\ud83d\ude00\ud800\"\\\/\b\f\n\r\t"`, `{"a":1,"b":{"c":[]}}`,
		`01`, `1.`, `.5`, `-`, `1e`, `+1`, `[1,]`, `{"a":1,}`, `{"a" 1}`, `{1:2}`, `[1 2]`, `tru`, `nulll`,
		`"\x"`, `"\u12"`, `"\u12g4"`, "\"a\x01\"", `"abc`, `[`, `{`, ``, ` `, `1 2`, `{"a":}`,
		"\"\xff\"", "[\"\xc3\"]", "\xef\xbb\xbf[]",
		strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
		strings.Repeat("[", 9999) + strings.Repeat("]", 9999),
	}
	for _, in := range inputs {
		want := json.Valid([]byte(in)) && utf8.ValidString(in)
		if got := scanAll([]byte(in)) == nil; got != want {
			t.Errorf("scanner accepts %.40q: %v, want %v (%v)", in, got, want, scanAll([]byte(in)))
		}
	}
}

// Long strings go through plainRun after their first eight words, which tests four words at a
// time and then one: every kind of byte that ends a plain run, at every offset around and past
// the switch and in each word of plainRun's blocks, in strings with one or two of them, must be
// read as encoding/json reads it (invalid UTF-8 refused).
func TestLongStringsAgreeWithEncodingJSON(t *testing.T) {
	kinds := []string{`\"`, `\\`, `\u00e9`, `\n`, "é", "😀", "\xff", "\xc3", "\x01", "\x1f", "\x7f", `"`, `\x`, `\u12`}
	for _, k1 := range kinds {
		for _, k2 := range append([]string{""}, kinds...) {
			for at := 0; at < 200; at += 3 {
				for _, gap := range []int{0, 1, 9, 40} {
					str := strings.Repeat("a", at) + k1 + strings.Repeat("b", gap) + k2 + strings.Repeat("c", 50)
					in := `["` + str + `","tail"]`
					want := json.Valid([]byte(in)) && utf8.ValidString(in)
					if got := scanAll([]byte(in)) == nil; got != want {
						t.Fatalf("scanner accepts %q: %v, want %v (%v)", in, got, want, scanAll([]byte(in)))
					}
				}
			}
		}
	}
}

// special must flag a word exactly when one of its bytes is not plain.
func TestSpecial(t *testing.T) {
	for c := 0; c < 256; c++ {
		for at := 0; at < 8; at++ {
			word := []byte("abcdefgh")
			word[at] = byte(c)
			want := c >= utf8.RuneSelf || !plain[c]
			if got := special(binary.LittleEndian.Uint64(word)); got != want {
				t.Errorf("special(%q) = %v, want %v", word, got, want)
			}
		}
	}
	// Neighbouring bytes must not hide or fake a special byte (borrows between bytes).
	for _, w := range []string{"\x00\x00\x00\x00\x00\x00\x00\x00", "\x1f\x20\x21\x22\x5b\x5c\x5d\x7f", "\x20\x20\x20\x20\x20\x20\x20\x20", "\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f", "!#[]~ 0z"} {
		want := false
		for i := 0; i < 8; i++ {
			want = want || w[i] >= utf8.RuneSelf || !plain[w[i]]
		}
		if got := special(binary.LittleEndian.Uint64([]byte(w))); got != want {
			t.Errorf("special(%q) = %v, want %v", w, got, want)
		}
	}
}

// specialMask's lowest set bit must mark the first byte of a word that is not plain, whatever
// the bytes around it (toSpecial jumps to it), and the mask must be empty for a plain word.
func TestSpecialMaskFindsFirstSpecialByte(t *testing.T) {
	first := func(w []byte) int {
		for i, c := range w {
			if c >= utf8.RuneSelf || !plain[c] {
				return i
			}
		}
		return 8
	}
	check := func(w []byte) {
		t.Helper()
		m := specialMask(binary.LittleEndian.Uint64(w))
		got := 8
		if m != 0 {
			got = bits.TrailingZeros64(m) >> 3
		}
		if want := first(w); got != want {
			t.Fatalf("specialMask(%q) marks byte %d first, want %d", w, got, want)
		}
	}
	for _, at := range [][2]int{{0, 1}, {2, 3}, {6, 7}, {0, 7}, {3, 5}} {
		for c1 := 0; c1 < 256; c1++ {
			for c2 := 0; c2 < 256; c2++ {
				word := []byte("abcdefgh")
				word[at[0]], word[at[1]] = byte(c1), byte(c2)
				check(word)
			}
		}
	}
	// Every word of bytes around the thresholds the tricks test (0x20, '"', '\\', 0x80).
	edges := []byte{0x00, 0x1f, 0x20, 0x21, '"', 0x23, 0x5b, '\\', 0x5d, 0x7f, 0x80, 0xff}
	word := make([]byte, 8)
	for n := 0; n < 1<<16; n++ {
		for i := range word {
			word[i] = edges[(n>>(2*i)+n*i)%len(edges)]
		}
		check(word)
	}
}

// outsideASCIIText must flag a word exactly when one of its bytes is a control character or
// not ASCII, whatever its neighbours (the subtraction borrows between bytes).
func TestOutsideASCIIText(t *testing.T) {
	outside := func(c byte) bool { return c < 0x20 || c >= utf8.RuneSelf }
	for _, at := range [][2]int{{0, 1}, {3, 4}, {6, 7}, {0, 7}} {
		for c1 := 0; c1 < 256; c1++ {
			for c2 := 0; c2 < 256; c2++ {
				word := []byte("abcdefgh")
				word[at[0]], word[at[1]] = byte(c1), byte(c2)
				want := outside(byte(c1)) || outside(byte(c2))
				if got := outsideASCIIText(binary.LittleEndian.Uint64(word)); got != want {
					t.Fatalf("outsideASCIIText(%q) = %v, want %v", word, got, want)
				}
			}
		}
	}
	for _, w := range []string{"\x00\x00\x00\x00\x00\x00\x00\x00", "\x1f\x20\x21\x22\x5b\x5c\x5d\x7f", "\x20\x20\x20\x20\x20\x20\x20\x20", "\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f", "!#[]~ 0z"} {
		want := false
		for i := 0; i < 8; i++ {
			want = want || outside(w[i])
		}
		if got := outsideASCIIText(binary.LittleEndian.Uint64([]byte(w))); got != want {
			t.Errorf("outsideASCIIText(%q) = %v, want %v", w, got, want)
		}
	}
}

func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	inputs := []string{"", "plain", "quote \" backslash \\ slash /", "\n\r\t\b\f\x00\x1f\x7f", "<html> & é 😀", "\u2028\u2029", "bad \xff utf-8 \xc3"}
	for _, in := range inputs {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(in); err != nil {
			t.Fatal(err)
		}
		want := strings.TrimSuffix(buf.String(), "\n")
		if got := string(appendString(nil, in)); got != want {
			t.Errorf("appendString(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestAppendCompactMatchesEncodingJSON(t *testing.T) {
	inputs := []string{"{ \"a\" : [ 1 , 2 ] ,\n\t\"b\" : \"x  y\\\" z\" }", `"  "`, ` 1 `, "[\r\n]"}
	for _, in := range inputs {
		var want bytes.Buffer
		if err := json.Compact(&want, []byte(in)); err != nil {
			t.Fatal(err)
		}
		if got := appendCompact(nil, []byte(in)); string(got) != want.String() {
			t.Errorf("appendCompact(%q) = %s, want %s", in, got, want.String())
		}
	}
}

func FuzzScanner(f *testing.F) {
	f.Add([]byte(`{"a":[1,-2.5e3,"\u00e9",true,null]}`))
	f.Add([]byte(`"\ud83d\ude00 \ud800"`))
	f.Add([]byte(`[1,]`))
	// Strings long enough for scanString's word loop to hand over to scanStringRest and for
	// plainRun's four-word steps, with bytes that end a plain run inside them.
	f.Add([]byte(`["` + strings.Repeat("lorem ipsum ", 8) + `"éé` + strings.Repeat("dolor sit ", 6) + "" + strings.Repeat("x", 40) + `"]`))
	f.Add([]byte(`{"` + strings.Repeat("k", 70) + `":"` + strings.Repeat("v", 33) + "	" + `"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		want := json.Valid(b) && utf8.Valid(b)
		err := scanAll(b)
		if (err == nil) != want {
			t.Fatalf("scanner accepts %q: %v, encoding/json: %v", b, err, want)
		}
		if err != nil {
			return
		}
		var compact bytes.Buffer
		_ = json.Compact(&compact, b)
		if got := appendCompact(nil, b); !bytes.Equal(got, compact.Bytes()) {
			t.Fatalf("appendCompact(%q) = %q, want %q", b, got, compact.Bytes())
		}
		// Strings decode as encoding/json decodes them, and re-encode to themselves.
		s := &scanner{buf: b}
		s.skipWS()
		if start := s.pos; s.peek() == '"' {
			esc, _ := s.scanString()
			got := unquote(b[start:s.pos], esc)
			var want string
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("unquote(%q) = %q, want %q", b, got, want)
			}
			var back string
			if err := json.Unmarshal(appendString(nil, got), &back); err != nil || back != got {
				t.Fatalf("appendString(%q) does not round-trip: %v", got, err)
			}
		}
	})
}

// BenchmarkScanString scans one JSON string of n plain ASCII bytes, as in an event's data.
func BenchmarkScanString(b *testing.B) {
	for _, n := range []int{8, 24, 64, 200, 820} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			in := []byte(`"` + strings.Repeat("x", n) + `"`)
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				if err := scanAll(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
