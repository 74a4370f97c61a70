package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// c1 holds C1 control characters: U+009B, CSI as one character, and U+0085, NEL.
const c1 = "order\u009b2J\u0085x"

// requireNoC1 fails if out holds a C1 control character (U+0080–U+009F) as raw UTF-8, which
// a terminal may obey.
func requireNoC1(t *testing.T, what string, out []byte) {
	t.Helper()
	for i := 0; i < len(out); {
		r, n := utf8.DecodeRune(out[i:])
		if r >= 0x80 && r <= 0x9f {
			t.Errorf("%s holds the C1 character %U at byte %d:\n%q", what, r, i, out)
			return
		}
		i += n
	}
}

// TestJSONOutputEscapesC1: -o json writes C1 control characters as \u0080–\u009f, in strings
// it encodes, in JSON it passes on as it came (json.RawMessage) and in map keys, so a topic,
// subject or event id holding them reaches the terminal as text; the JSON decodes to the same
// values.
func TestJSONOutputEscapesC1(t *testing.T) {
	type event struct {
		ID      string            `json:"id"`
		Topic   string            `json:"topic"`
		Subject string            `json:"subject"`
		Data    json.RawMessage   `json:"data"`
		Tags    map[string]string `json:"tags"`
	}
	in := event{ID: c1, Topic: "orders" + c1, Subject: "/s/" + c1 + "é",
		Data: json.RawMessage(`{"note":"` + c1 + `"}`), Tags: map[string]string{c1: c1}}
	var buf bytes.Buffer
	if err := printJSON(&buf, in); err != nil {
		t.Fatal(err)
	}
	requireNoC1(t, "printJSON", buf.Bytes())
	if !bytes.Contains(buf.Bytes(), []byte(`order\u009b2J\u0085x`)) || !bytes.Contains(buf.Bytes(), []byte("é")) {
		t.Errorf("printJSON: %q; want the C1 characters as \\u009b and \\u0085, other text as it is", buf.Bytes())
	}
	var out event
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil {
		t.Fatalf("printJSON wrote JSON that does not decode: %v\n%q", err, buf.Bytes())
	}
	var data, wantData any
	if err := json.Unmarshal(out.Data, &data); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(in.Data, &wantData)
	out.Data, in.Data = nil, nil
	if !reflect.DeepEqual(out, in) || !reflect.DeepEqual(data, wantData) {
		t.Errorf("printJSON's output decodes to %+v (data %v), want %+v (data %v)", out, data, in, wantData)
	}

	// A command's -o json, against a server that answers with C1 characters.
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(armTopic{Name: c1})
	}))
	defer fake.Close()
	code, stdout := cliRun(t, "topic", "show", "--server", fake.URL, "--name", "orders", "-o", "json")
	requireNoC1(t, "topic show -o json", []byte(stdout))
	var topic armTopic
	if err := json.Unmarshal([]byte(stdout), &topic); code != 0 || err != nil || topic.Name != c1 {
		t.Errorf("topic show -o json: exit %d, %q (%v); want the topic named %q", code, stdout, err, c1)
	}
}

// TestJSONOutputIsUTF8: -o json is UTF-8 a terminal cannot obey. JSON the CLI passes on as it
// came (an object as the server answered it, an event's data) went out with its bytes that are
// not UTF-8 (a lone 0x9b is CSI to a terminal reading Latin-1) and DEL as they were: such
// bytes are written as \ufffd, the U+FFFD encoding/json gives a string it decodes or encodes
// with them, and DEL as \u007f; the JSON stays valid and decodes to the same values.
func TestJSONOutputIsUTF8(t *testing.T) {
	const bad = "a\x9b2Jb\xffc\x7fd\xc3" // a lone CSI byte, 0xff, DEL, a cut sequence
	want := strings.ToValidUTF8("a\x9b2Jb\xffc", "\ufffd") + "\x7fd\ufffd"
	requireTermSafe := func(what string, out []byte) {
		t.Helper()
		if !utf8.Valid(out) || !json.Valid(out) {
			t.Errorf("%s: %q is not valid UTF-8 JSON", what, out)
		}
		if bytes.ContainsAny(out, "\x7f") {
			t.Errorf("%s: %q holds DEL", what, out)
		}
		requireNoC1(t, what, out)
	}

	var buf bytes.Buffer
	if err := printJSON(&buf, map[string]json.RawMessage{"data": json.RawMessage(`{"note":"` + bad + `"}`)}); err != nil {
		t.Fatal(err)
	}
	requireTermSafe("printJSON", buf.Bytes())
	var out struct{ Data struct{ Note string } }
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil || out.Data.Note != want {
		t.Errorf("printJSON: %q decodes to %q (%v), want %q", buf.Bytes(), out.Data.Note, err, want)
	}

	// A command's -o json prints the object the server answered: one not UTF-8.
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"name":"` + bad + `","properties":{}}`))
	}))
	defer fake.Close()
	code, stdout := cliRun(t, "topic", "show", "--server", fake.URL, "--name", "orders", "-o", "json")
	requireTermSafe("topic show -o json", []byte(stdout))
	var topic armTopic
	if err := json.Unmarshal([]byte(stdout), &topic); code != 0 || err != nil || topic.Name != want {
		t.Errorf("topic show -o json: exit %d, %q (%v); want the topic named %q", code, stdout, err, want)
	}
}
