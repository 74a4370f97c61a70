package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// showNextRE is the continuation deadletter show prints under a full answer.
var showNextRE = regexp.MustCompile(`(--since \S+(?: --after \S+)?(?: --offset \d+)?) takes up with the next record`)

// Paging through dead letters with the CLI against a server and a real MinIO: show takes up
// inside an object of more records than --limit (it answered that object's first records again
// and again); list -o json and show -o json print the server's answer, continuation
// included; a key that is no object key is a 400 saying what is wrong with it (it was a 503
// telling to check MinIO); --since later than --until is a usage error naming both.
func TestDeadLetterPagingThroughTheCLI(t *testing.T) {
	m := testkit.StartMinIO(t)
	srv := startServer(t, "--insecure-dev", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--minio-endpoint", m.Endpoint, "--minio-access-key", m.AccessKey, "--minio-secret-key", m.SecretKey)
	server := "--server=" + srv.url
	hook := newDeadLetterHook(t, http.StatusOK)
	for _, args := range [][]string{
		{"topic", "create", server, "--name", "orders"},
		{"event-subscription", "create", server, "--topic", "orders", "--name", "billing", "--endpoint", hook.URL, "--deadletter-container", "dl-paging"},
	} {
		if code, out := cliRun(t, args...); code != 0 {
			t.Fatalf("egrid %s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
	}
	// Two objects of 7 records each, written as egrid writes them.
	store := m.Store()
	var want []string
	for i := range 2 {
		var recs []string
		for j := range 7 {
			id := fmt.Sprintf("o%d-%d", i, j)
			want = append(want, id)
			recs = append(recs, `{"id":"`+id+`","subject":"/orders/1","eventType":"Order.Created","eventTime":"2026-01-01T00:00:00Z","dataVersion":"1.0","data":{},`+
				`"deadLetterReason":"MaxDeliveryAttemptsExceeded","deliveryAttempts":3,"publishTime":"2026-01-01T00:00:00Z"}`)
		}
		key := deadletter.Key("BILLING", time.Now(), fmt.Sprintf("%08d-0000-0000-0000-000000000000", i))
		if _, err := store.Put(context.Background(), "dl-paging", key, []byte("["+strings.Join(recs, ",")+"]"), sinks.PutOptions{
			ContentType: "application/json", Metadata: map[string]string{deadletter.TopicMetadata: "orders"}}); err != nil {
			t.Fatal(err)
		}
	}
	base := []string{"deadletter", "show", server, "--topic", "orders", "--subscription", "billing", "--limit", "3"}

	// The table's continuation.
	var got []string
	args := base
	for page := 0; ; page++ {
		if page > len(want) {
			t.Fatalf("%d pages of show --limit 3 and still more; records so far %v", page, got)
		}
		code, out := cliRun(t, args...)
		if code != 0 {
			t.Fatalf("egrid %s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "o") && strings.Contains(f[0], "-") {
				got = append(got, f[0])
			}
		}
		next := showNextRE.FindStringSubmatch(out)
		if next == nil {
			if strings.Contains(out, "more records") {
				t.Fatalf("show printed no continuation that takes up with the next record:\n%s", out)
			}
			break
		}
		args = append(slices.Clone(base), strings.Fields(next[1])...)
	}
	if !slices.Equal(got, want) {
		t.Errorf("show --limit 3, page after page: %v, want %v", got, want)
	}

	// -o json: the answer, its continuation in more.
	got = nil
	args = append(slices.Clone(base), "-o", "json")
	for page := 0; ; page++ {
		if page > len(want) {
			t.Fatalf("%d pages of show -o json and still more", page)
		}
		code, out := cliRun(t, args...)
		var ans struct {
			Value []struct{ ID string }
			More  *struct {
				Since  time.Time
				After  string
				Offset int
			}
		}
		if code != 0 || json.Unmarshal([]byte(out), &ans) != nil {
			t.Fatalf("show -o json: exit %d\n%s\nwant the server's answer", code, out)
		}
		for _, v := range ans.Value {
			got = append(got, v.ID)
		}
		if ans.More == nil {
			break
		}
		args = append(slices.Clone(base), "-o", "json", "--since", ans.More.Since.Format(time.RFC3339Nano), "--offset", fmt.Sprint(ans.More.Offset))
		if ans.More.After != "" {
			args = append(args, "--after", ans.More.After)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("show -o json --limit 3, page after page: %v, want %v", got, want)
	}

	// list -o json: the continuation is in the JSON, not on stderr.
	code, out := cliRun(t, "deadletter", "list", server, "--topic", "orders", "--subscription", "billing", "--limit", "1", "-o", "json")
	var list struct {
		Value []struct{ Key string }
		More  *struct {
			Objects int
			Since   time.Time
			After   string
		}
	}
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list.Value) != 1 || list.More == nil || list.More.Objects != 1 || list.More.After != list.Value[0].Key {
		t.Errorf("list -o json --limit 1: exit %d\n%s\nwant one object and more naming it as after, as one JSON document", code, out)
	}

	// A key that is no object key.
	code, out = cliRun(t, "deadletter", "show", server, "--topic", "orders", "--subscription", "billing", "--key", "BILLING/../MAX500/2026/1/1/1/x.json")
	if code != 1 || !strings.Contains(out, "400") || !strings.Contains(out, `".." path segment`) || strings.Contains(out, "unavailable") {
		t.Errorf("show --key with a .. segment: exit %d\n%s\nwant a 400 saying what is wrong with the key", code, out)
	}
	// --since later than --until.
	for _, cmd := range []string{"list", "show", "replay"} {
		code, out = cliRun(t, "deadletter", cmd, server, "--topic", "orders", "--subscription", "billing", "--since", "2026-01-02T00:00:00Z", "--until", "2026-01-01T00:00:00Z")
		if code != 2 || !strings.Contains(out, "--since 2026-01-02T00:00:00Z is later than --until 2026-01-01T00:00:00Z") {
			t.Errorf("%s --since later than --until: exit %d\n%s\nwant a usage error naming both", cmd, code, out)
		}
	}
	srv.stop(t)
}
