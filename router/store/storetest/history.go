package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/egridio/egrid/router/store"
)

// testHistory checks the delivery histories: kept per subscription and event id, replaced by
// a later put, hidden once expired, deleted by ExpireHistory and with their subscription.
func testHistory(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	putTopic(t, s, "orders")
	putSub(t, s, "orders", "a")
	putSub(t, s, "orders", "b")
	get := func(sub, id string, at time.Time) (string, error) {
		t.Helper()
		r, err := s.History(ctx, "orders", sub, id, at)
		if err != nil {
			return "", err
		}
		if r.EventID != id {
			t.Fatalf("History(%s, %s) returned event %q", sub, id, r.EventID)
		}
		return string(r.Payload), nil
	}
	put := func(sub string, recs ...store.HistoryRecord) {
		t.Helper()
		if err := s.PutHistory(ctx, "orders", sub, recs); err != nil {
			t.Fatalf("PutHistory(%s): %v", sub, err)
		}
	}
	put("a",
		store.HistoryRecord{EventID: "e1", Expires: now.Add(time.Hour), Payload: []byte("one")},
		store.HistoryRecord{EventID: "e2", Expires: now.Add(2 * time.Hour), Payload: []byte("two")})
	put("b", store.HistoryRecord{EventID: "e1", Expires: now.Add(time.Hour), Payload: []byte("b-one")})
	put("a", store.HistoryRecord{EventID: "e1", Expires: now.Add(3 * time.Hour), Payload: []byte("one, again")})

	for _, tc := range []struct{ sub, id, want string }{
		{"a", "e1", "one, again"}, {"a", "e2", "two"}, {"b", "e1", "b-one"},
	} {
		if got, err := get(tc.sub, tc.id, now); err != nil || got != tc.want {
			t.Errorf("History(%s, %s) = %q, %v; want %q", tc.sub, tc.id, got, err, tc.want)
		}
	}
	if _, err := get("b", "e2", now); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("History of an event never put: err %v, want ErrNotFound", err)
	}
	if _, err := get("a", "e2", now.Add(2*time.Hour)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("History at its expiry: err %v, want ErrNotFound", err)
	}
	if err := s.PutHistory(ctx, "orders", "missing", []store.HistoryRecord{{EventID: "x", Expires: now}}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("PutHistory on an unknown subscription: err %v, want ErrNotFound", err)
	}

	// ExpireHistory deletes what expired by then (e2 of a, e1 of b) and keeps the rest.
	if err := s.ExpireHistory(ctx, now.Add(2*time.Hour)); err != nil {
		t.Fatalf("ExpireHistory: %v", err)
	}
	if _, err := get("a", "e2", now); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an expired history survived ExpireHistory: err %v", err)
	}
	if _, err := get("b", "e1", now); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an expired history of another subscription survived ExpireHistory: err %v", err)
	}
	if got, err := get("a", "e1", now); err != nil || got != "one, again" {
		t.Errorf("a live history after ExpireHistory = %q, %v", got, err)
	}

	// A recreated subscription starts without the old one's histories.
	if err := s.DeleteSubscription(ctx, "orders", "a"); err != nil {
		t.Fatal(err)
	}
	putSub(t, s, "orders", "a")
	if _, err := get("a", "e1", now); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a deleted subscription's history came back: err %v", err)
	}
}
