package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// columnStarts returns the rune offsets at which the header's columns start.
func columnStarts(t *testing.T, header string, cols ...string) []int {
	t.Helper()
	var at []int
	from := 0
	for _, c := range cols {
		i := strings.Index(header[from:], c)
		if i < 0 {
			t.Fatalf("header %q has no column %s after byte %d", header, c, from)
		}
		at = append(at, len([]rune(header[:from+i])))
		from += i + len(c)
	}
	return at
}

// requireUnder fails unless each cell of want starts at its column's offset on line.
func requireUnder(t *testing.T, out, line string, at []int, want ...string) {
	t.Helper()
	r := []rune(line)
	for i, cell := range want {
		if len(r) < at[i] || !strings.HasPrefix(string(r[at[i]:]), cell) {
			t.Errorf("%q does not start at column offset %d in %q:\n%s", cell, at[i], line, out)
		}
	}
}

// TestTopicTableAlignsLongNames: a topic name longer than any fixed width widens the NAME
// column for every row instead of pushing its own row's other cells out of line.
func TestTopicTableAlignsLongNames(t *testing.T) {
	long := strings.Repeat("a-very-long-topic-name-", 3)
	var buf bytes.Buffer
	err := printTopics(env{Stdout: &buf}, "table",
		armTopic{Name: "orders"},
		armTopic{Name: long},
	)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and 2 rows:\n%s", buf.String())
	}
	at := columnStarts(t, lines[0], "NAME", "INPUT SCHEMA", "KIND")
	requireUnder(t, buf.String(), lines[1], at, "orders", "EventGridSchema", "custom")
	requireUnder(t, buf.String(), lines[2], at, long, "EventGridSchema", "custom")
}

// TestSubscriptionTableAlignsLongNames: long names and endpoints keep every column in line,
// and a provisioning message stays under its own row.
func TestSubscriptionTableAlignsLongNames(t *testing.T) {
	long := strings.Repeat("a-long-subscription-name-", 3)
	endpoint := "https://hooks.example.com/" + strings.Repeat("segment/", 10)
	var subs []armSubscription
	raw := `[
		{"name":"s1","properties":{"provisioningState":"Succeeded","destination":{"endpointType":"WebHook","properties":{"endpointUrl":"https://a.example/"}}}},
		{"name":"` + long + `","properties":{"provisioningState":"AwaitingManualAction","provisioningMessage":"validate it by hand","destination":{"endpointType":"WebHook","properties":{"endpointUrl":"` + endpoint + `"}}}},
		{"name":"s3","properties":{"provisioningState":"Succeeded","destination":{"endpointType":"WebHook","properties":{"endpointUrl":"https://c.example/"}}}}
	]`
	if err := json.Unmarshal([]byte(raw), &subs); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := printSubscriptions(env{Stdout: &buf}, "table", subs...); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("want a header, 3 rows and a message line:\n%s", out)
	}
	at := columnStarts(t, lines[0], "NAME", "PROVISIONING STATE", "TYPE", "ENDPOINT")
	requireUnder(t, out, lines[1], at, "s1", "Succeeded", "WebHook", "https://a.example/")
	requireUnder(t, out, lines[2], at, long, "AwaitingManualAction", "WebHook", endpoint)
	if lines[3] != "  validate it by hand" {
		t.Errorf("line 4 = %q; want the second row's provisioning message, indented:\n%s", lines[3], out)
	}
	requireUnder(t, out, lines[4], at, "s3", "Succeeded", "WebHook", "https://c.example/")
}

// TestSubscriptionShowsLoading: a subscription whose actor still reads its stored state shows
// "loading its state since" its start in the DELIVERY column, not zeros that would read as an
// idle, healthy subscription, and -o json keeps the admin API's loading form; a loaded one
// shows its backlog as before, a backlog of 0 included.
func TestSubscriptionShowsLoading(t *testing.T) {
	var subs []armSubscription
	raw := `[
		{"name":"s1","properties":{"provisioningState":"Succeeded","deliveryState":{"loading":true,"loadingSince":"2026-11-28T09:00:00Z"}}},
		{"name":"s2","properties":{"provisioningState":"Succeeded","deliveryState":{"backlog":0,"inFlight":0,"oldestUndeliveredAgeSeconds":0,"probation":false}}}
	]`
	if err := json.Unmarshal([]byte(raw), &subs); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := printSubscriptions(env{Stdout: &buf}, "table", subs...); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[1], "loading its state since 2026-11-28T09:00:00Z") || strings.Contains(lines[1], "backlog") ||
		!strings.HasSuffix(lines[2], "backlog=0 inFlight=0") {
		t.Errorf("table:\n%s\nwant s1 loading since its start and no backlog, s2 with backlog=0 inFlight=0", buf.String())
	}
	buf.Reset()
	if err := printSubscriptions(env{Stdout: &buf}, "json", subs[0]); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Properties struct {
			DeliveryState map[string]any `json:"deliveryState"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if ds := got.Properties.DeliveryState; len(ds) != 2 || ds["loading"] != true || ds["loadingSince"] != "2026-11-28T09:00:00Z" {
		t.Errorf("-o json deliveryState = %v, want only loading and loadingSince", ds)
	}
	buf.Reset()
	if err := printSubscriptions(env{Stdout: &buf}, "json", subs[1]); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"backlog": 0`) {
		t.Errorf("-o json of a loaded subscription:\n%s\nwant its backlog of 0 shown", buf.String())
	}
}
