package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// deadLetterHook is a webhook endpoint that completes Event Grid's validation handshake (SPEC
// §2.5) and answers every delivery with status, recording the event ids it received (the
// subjects of BlobCreated notifications).
type deadLetterHook struct {
	*httptest.Server
	ids chan string
}

func newDeadLetterHook(t *testing.T, status int) *deadLetterHook {
	h := &deadLetterHook{ids: make(chan string, 1000)}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var evs []struct {
			ID        string          `json:"id"`
			EventType string          `json:"eventType"`
			Subject   string          `json:"subject"`
			Data      json.RawMessage `json:"data"`
		}
		_ = json.Unmarshal(body, &evs)
		if r.Header.Get("aeg-event-type") == "SubscriptionValidation" && len(evs) == 1 {
			var d struct {
				ValidationCode string `json:"validationCode"`
			}
			_ = json.Unmarshal(evs[0].Data, &d)
			_ = json.NewEncoder(w).Encode(map[string]string{"validationResponse": d.ValidationCode})
			return
		}
		for _, e := range evs {
			if e.EventType == "Microsoft.Storage.BlobCreated" {
				h.ids <- e.Subject
				continue
			}
			h.ids <- e.ID
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(h.Close)
	return h
}

// await collects n ids (or subjects, for notifications), failing after a bound.
func (h *deadLetterHook) await(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	timeout := time.After(60 * time.Second)
	for len(out) < n {
		select {
		case id := <-h.ids:
			out = append(out, id)
		case <-timeout:
			t.Fatalf("received %d deliveries within 60 s, want %d", len(out), n)
		}
	}
	return out
}

// The acceptance of SPEC §5 through the real binary: events that exhaust their attempts land
// in MinIO (announced on the notification topic); `egrid deadletter list` and `show` read
// them; `egrid deadletter replay` re-delivers them to the now-healthy endpoint; a second replay
// of the same range with --dry-run changes nothing.
func TestDeadLetterReplayThroughTheBinary(t *testing.T) {
	m := testkit.StartMinIO(t)
	dir := t.TempDir()
	srv := startServer(t, "--insecure-dev", "--data-dir", filepath.Join(dir, "data"), "--time-scale", "100",
		"--minio-endpoint", m.Endpoint, "--minio-access-key", m.AccessKey, "--minio-secret-key", m.SecretKey,
		"--dead-letter-delay", "1s")
	server := "--server=" + srv.url
	mustRun := func(args ...string) string {
		t.Helper()
		code, out := cliRun(t, args...)
		if code != 0 {
			t.Fatalf("egrid %s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
		return out
	}
	binaryRun := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(binary, args...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("egrid %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	failing, healthy, notify := newDeadLetterHook(t, http.StatusInternalServerError), newDeadLetterHook(t, http.StatusOK), newDeadLetterHook(t, http.StatusOK)
	mustRun("topic", "create", server, "--name", "orders")
	mustRun("event-subscription", "create", server, "--topic", "orders", "--name", "billing",
		"--endpoint", failing.URL, "--max-delivery-attempts", "2", "--deadletter-container", "dl-e2e")
	mustRun("event-subscription", "create", server, "--topic", "egrid-deadletters", "--name", "on-dead-letters", "--endpoint", notify.URL)
	ids := []string{"e1", "e2", "e3"}
	for _, id := range ids {
		mustRun("publish", server, "--topic", "orders", "--data",
			`{"id":"`+id+`","subject":"/orders/1","eventType":"Order.Created","eventTime":"2026-01-01T00:00:00Z","data":{"total":1}}`)
	}
	failing.await(t, 6) // two attempts each

	// The three dead letters are written (one object per flush) and announced.
	var subjects []string
	count := func() int {
		out := mustRun("deadletter", "show", server, "--topic", "orders", "--subscription", "billing", "-o", "json")
		var recs struct{ Value []map[string]any }
		if err := json.Unmarshal([]byte(out), &recs); err != nil {
			t.Fatalf("deadletter show -o json: %v\n%s", err, out)
		}
		return len(recs.Value)
	}
	for count() < 3 {
		subjects = append(subjects, notify.await(t, 1)...)
	}
	list := mustRun("deadletter", "list", server, "--topic", "orders", "--subscription", "billing", "--since", "1h")
	for _, s := range subjects {
		key := strings.TrimPrefix(s, "/blobServices/default/containers/dl-e2e/blobs/")
		if !strings.HasPrefix(key, "BILLING/") || !strings.Contains(list, key) {
			t.Errorf("notification subject %s: want a BILLING/ key that deadletter list shows:\n%s", s, list)
		}
	}
	show := mustRun("deadletter", "show", server, "--topic", "orders", "--subscription", "billing", "--reason", "MaxDeliveryAttemptsExceeded")
	if !strings.Contains(show, "3 records") || !strings.Contains(show, "500") {
		t.Errorf("deadletter show:\n%s\nwant the 3 records with their last status 500", show)
	}
	objectsBefore, err := m.Store().List(context.Background(), "dl-e2e", sinks.ListQuery{})
	if err != nil {
		t.Fatal(err)
	}

	// The endpoint is fixed: point the subscription at the healthy one and replay.
	mustRun("event-subscription", "create", server, "--topic", "orders", "--name", "billing",
		"--endpoint", healthy.URL, "--max-delivery-attempts", "2", "--deadletter-container", "dl-e2e")
	out := binaryRun("deadletter", "replay", server, "--topic", "orders", "--subscription", "billing", "--since", "1h")
	if !strings.Contains(out, "replayed 3 events") || !strings.Contains(out, "delivered 3") {
		t.Errorf("deadletter replay:\n%s\nwant 3 events replayed and delivered", out)
	}
	got := healthy.await(t, 3)
	slices.Sort(got)
	if !slices.Equal(got, ids) {
		t.Errorf("the healthy endpoint received %v, want each of %v once", got, ids)
	}

	// A dry run of the same range says what it would do and changes nothing.
	out = binaryRun("deadletter", "replay", server, "--topic", "orders", "--subscription", "billing", "--since", "1h", "--dry-run")
	if !strings.Contains(out, "would replay 3 events") || !strings.Contains(out, "e2") {
		t.Errorf("deadletter replay --dry-run:\n%s\nwant the 3 events it would replay", out)
	}
	if n := len(healthy.ids); n != 0 {
		t.Errorf("the dry run delivered %d events", n)
	}
	objectsAfter, err := m.Store().List(context.Background(), "dl-e2e", sinks.ListQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(objectsAfter) != len(objectsBefore) {
		t.Errorf("objects went from %d to %d; replays never change them", len(objectsBefore), len(objectsAfter))
	}
	if out := mustRun("deadletter", "status", server); !strings.Contains(out, "dropped 0") {
		t.Errorf("deadletter status: %s", out)
	}
	srv.stop(t)
}

// Without MinIO the server refuses a dead-letter destination at create time, saying how to
// configure one.
func TestDeadLetterDestinationWithoutMinIO(t *testing.T) {
	srv := startServer(t, "--insecure-dev", "--data-dir", filepath.Join(t.TempDir(), "data"))
	server := "--server=" + srv.url
	if code, out := cliRun(t, "topic", "create", server, "--name", "orders"); code != 0 {
		t.Fatalf("topic create: %s", out)
	}
	code, out := cliRun(t, "event-subscription", "create", server, "--topic", "orders", "--name", "billing",
		"--endpoint", newDeadLetterHook(t, 200).URL, "--deadletter-container", "dl")
	if code == 0 || !strings.Contains(out, "--minio-endpoint") {
		t.Errorf("a dead-letter destination without MinIO: exit %d\n%s\nwant a refusal naming --minio-endpoint", code, out)
	}
	code, out = cliRun(t, "deadletter", "list", server, "--topic", "orders", "--subscription", "billing")
	if code == 0 || !strings.Contains(out, "404") {
		t.Errorf("deadletter list of a missing subscription: exit %d\n%s", code, out)
	}
	srv.stop(t)
}
