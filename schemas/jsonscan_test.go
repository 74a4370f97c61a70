package schemas_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/egridio/egrid/schemas"
)

// scanWhole reports whether b is one JSON value to a scanner.
func scanWhole(b []byte, lenient bool) error {
	j := schemas.NewJSONScanner(b, lenient)
	j.SkipSpace()
	if _, err := j.Skip(0); err != nil {
		return err
	}
	return j.End()
}

func TestJSONScannerModes(t *testing.T) {
	for _, tt := range []struct {
		in              string
		strict, lenient bool
	}{
		{in: `{"a":[1,true,null,"x"]}`, strict: true, lenient: true},
		{in: "\"\xff\"", strict: false, lenient: true},
		{in: "{\"\xc3\":1}", strict: false, lenient: true},
		{in: `[1,]`},
		{in: strings.Repeat("[", schemas.MaxJSONDepth) + strings.Repeat("]", schemas.MaxJSONDepth), strict: true, lenient: true},
		{in: strings.Repeat("[", schemas.MaxJSONDepth+1) + strings.Repeat("]", schemas.MaxJSONDepth+1)},
	} {
		if got := scanWhole([]byte(tt.in), false) == nil; got != tt.strict {
			t.Errorf("strict scan of %.30q: %v, want %v", tt.in, got, tt.strict)
		}
		if got := scanWhole([]byte(tt.in), true) == nil; got != tt.lenient {
			t.Errorf("lenient scan of %.30q: %v, want %v", tt.in, got, tt.lenient)
		}
	}
}

// FuzzJSONScanner holds egrid's one JSON scanner to encoding/json: a strict scan accepts
// exactly what encoding/json accepts in valid UTF-8, a lenient one exactly what encoding/json
// accepts, and a string decodes to what encoding/json decodes, also with bytes that are not
// UTF-8.
func FuzzJSONScanner(f *testing.F) {
	f.Add([]byte(`{"a":[1,-2.5e3,"\u00e9",true,null]}`))
	f.Add([]byte("\"a\xffb\\u00e9\\ud800\""))
	f.Add([]byte(`{"k" : "v" , "n":[ ]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		valid := json.Valid(b)
		if err := scanWhole(b, true); (err == nil) != valid {
			t.Fatalf("lenient scan of %q: %v, encoding/json valid: %v", b, err, valid)
		}
		if err := scanWhole(b, false); (err == nil) != (valid && utf8.Valid(b)) {
			t.Fatalf("strict scan of %q: %v, encoding/json valid: %v", b, err, valid)
		}
		if !valid {
			return
		}
		j := schemas.NewJSONScanner(b, true)
		j.SkipSpace()
		if j.Peek() == '"' {
			tok, decode, err := j.String()
			if err != nil {
				t.Fatal(err)
			}
			var want string
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatal(err)
			}
			if got := schemas.UnquoteJSON(tok, decode); got != want {
				t.Fatalf("UnquoteJSON(%q) = %q, encoding/json gives %q", tok, got, want)
			}
		}
	})
}
