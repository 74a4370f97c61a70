package main

import (
	"encoding/json"
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
