package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
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
