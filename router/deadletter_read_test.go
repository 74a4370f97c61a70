package router_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// Reading dead letters back takes objects of up to the object bound plus deadletter.ReadMargin:
// a larger one — egrid writes none — is reported as a problem that names it and says what to
// do, and is not read into memory.
func TestDeadLetterObjectTooLargeToRead(t *testing.T) {
	const bound = 4096
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.Always(http.StatusBadRequest))
		h.CreateSubscription("orders", "billing", hook, router.RetryPolicy{})
		h.Publish("orders", h.EventGridEvent(testkit.ID("e1")))
		h.Advance(6 * time.Minute)
		store := h.DeadLetterObjects()
		objs := store.Objects("deadletters")
		if len(objs) != 1 {
			t.Fatalf("%d objects, want 1", len(objs))
		}
		ctx := context.Background()
		body, _, err := store.Get(ctx, "deadletters", objs[0].Key, 0)
		if err != nil {
			t.Fatal(err)
		}
		// The same records, padded past what a reader takes: decodable, but not egrid's.
		padded := append(body, bytes.Repeat([]byte{' '}, bound+deadletter.ReadMargin+1-len(body))...)
		big := "BILLING/2025/1/2/3/00000000-0000-0000-0000-000000000000.json"
		if _, err := store.Put(ctx, "deadletters", big, padded, sinks.PutOptions{
			ContentType: "application/json", Metadata: map[string]string{deadletter.TopicMetadata: "orders"},
		}); err != nil {
			t.Fatal(err)
		}
		read, err := h.Router().DeadLetterRecords(ctx, "orders", "billing", router.DeadLetterQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if read.Objects != 1 || len(read.Entries) != 1 || len(read.Problems) != 1 {
			t.Fatalf("read %d records from %d objects, problems %q; want the written object read and the padded one refused", len(read.Entries), read.Objects, read.Problems)
		}
		if p := read.Problems[0]; !strings.HasPrefix(p, big+": ") || !strings.Contains(p, "larger than") || !strings.Contains(p, "mc cat") {
			t.Errorf("problem %q, want it to name %s, say it is too large and what to do", p, big)
		}
		sum, err := h.Router().ReplayDeadLetters(ctx, "orders", "billing", router.ReplayOptions{DryRun: true})
		if err != nil || sum.Replayed != 1 || len(sum.Problems) != 1 {
			t.Errorf("dry-run replay %+v, %v; want the one record and the refused object as a problem", sum, err)
		}
	}, testkit.WithConfig(router.Config{DeadLetters: router.DeadLetterConfig{MaxObjectBytes: bound}}))
}
