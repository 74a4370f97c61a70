package main

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// TestListingsAreJSONArrays: `topic list -o json` and `event-subscription list -o json`
// print an array whatever the listing's length — [] for none, an array of one for one — as
// az does, so a script reads them alike; show prints the one object.
func TestListingsAreJSONArrays(t *testing.T) {
	server := "--server=" + startInProcess(t)
	listLen := func(args ...string) int {
		t.Helper()
		code, out := cliRun(t, append(args, server, "-o", "json")...)
		if code != 0 {
			t.Fatalf("%s: exit %d %s", strings.Join(args, " "), code, out)
		}
		var v []map[string]any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("%s -o json printed %q, want a JSON array: %v", strings.Join(args, " "), out, err)
		}
		return len(v)
	}
	if n := listLen("topic", "list"); n != 0 {
		t.Errorf("topic list with no topic: %d items, want []", n)
	}
	if code, out := cliRun(t, "topic", "create", server, "--name", "orders"); code != 0 {
		t.Fatalf("topic create: %d %s", code, out)
	}
	if n := listLen("topic", "list"); n != 1 {
		t.Errorf("topic list with one topic: %d items, want 1", n)
	}
	if n := listLen("event-subscription", "list", "--topic", "orders"); n != 0 {
		t.Errorf("event-subscription list with none: %d items, want []", n)
	}
	if code, out := cliRun(t, "event-subscription", "create", server, "--topic", "orders", "--name", "billing",
		"--endpoint", "http://127.0.0.1:9/hook", "--skip-validation"); code != 0 {
		t.Fatalf("event-subscription create: %d %s", code, out)
	}
	if n := listLen("event-subscription", "list", "--topic", "orders"); n != 1 {
		t.Errorf("event-subscription list with one: %d items, want 1", n)
	}
	code, out := cliRun(t, "topic", "show", server, "--name", "orders", "-o", "json")
	var one map[string]any
	if err := json.Unmarshal([]byte(out), &one); code != 0 || err != nil || one["name"] != "orders" {
		t.Errorf("topic show -o json: exit %d %q (%v), want the topic's object", code, out, err)
	}
}

// TestJSONIsWhatTheServerAnswered: -o json prints the object the admin API answered, every
// field of it (id, type, properties.endpoint, provisioningState, ...), not only the fields
// the CLI's table shows: `topic show -o json` printed only name and properties.inputSchema.
func TestJSONIsWhatTheServerAnswered(t *testing.T) {
	url := startInProcess(t)
	server := "--server=" + url
	get := func(path string) any {
		t.Helper()
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v any
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		return v
	}
	cliJSON := func(args ...string) any {
		t.Helper()
		code, out := cliRun(t, append(args, server, "-o", "json")...)
		var v any
		if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil {
			t.Fatalf("%s: exit %d %q (%v)", strings.Join(args, " "), code, out, err)
		}
		return v
	}
	created := cliJSON("topic", "create", "--name", "orders")
	topic := get("/admin/topics/orders")
	props, _ := topic.(map[string]any)["properties"].(map[string]any)
	for _, f := range []any{topic.(map[string]any)["id"], topic.(map[string]any)["type"], props["endpoint"], props["provisioningState"]} {
		if f == nil || f == "" {
			t.Fatalf("the server's topic %v lacks id, type, properties.endpoint or provisioningState: the test's premise", topic)
		}
	}
	if !reflect.DeepEqual(created, topic) {
		t.Errorf("topic create -o json printed %v; the server answers %v", created, topic)
	}
	if shown := cliJSON("topic", "show", "--name", "orders"); !reflect.DeepEqual(shown, topic) {
		t.Errorf("topic show -o json printed %v; the server answered %v", shown, topic)
	}
	if listed, want := cliJSON("topic", "list"), get("/admin/topics").(map[string]any)["value"]; !reflect.DeepEqual(listed, want) {
		t.Errorf("topic list -o json printed %v; the server answered %v", listed, want)
	}

	cliJSON("event-subscription", "create", "--topic", "orders", "--name", "billing", "--endpoint", "http://127.0.0.1:9/hook", "--skip-validation")
	sub := get("/admin/topics/orders/eventSubscriptions/billing")
	if sub.(map[string]any)["id"] == nil {
		t.Fatalf("the server's event subscription %v has no id: the test's premise", sub)
	}
	if shown := cliJSON("event-subscription", "show", "--topic", "orders", "--name", "billing"); !reflect.DeepEqual(shown, sub) {
		t.Errorf("event-subscription show -o json printed %v; the server answered %v", shown, sub)
	}
	if listed, want := cliJSON("event-subscription", "list", "--topic", "orders"), get("/admin/topics/orders/eventSubscriptions").(map[string]any)["value"]; !reflect.DeepEqual(listed, want) {
		t.Errorf("event-subscription list -o json printed %v; the server answered %v", listed, want)
	}
}
