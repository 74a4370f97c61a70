package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/egridio/egrid/router/store"
)

// testHistory checks the delivery histories: kept per subscription and event id, replaced by
// a later put, hidden once expired, deleted by ExpireHistory and with their subscription, and
// a put of a deleted subscription's epoch written nowhere.
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
		if err := s.PutHistory(ctx, "orders", sub, 0, recs); err != nil {
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
	if err := s.PutHistory(ctx, "orders", "missing", 0, []store.HistoryRecord{{EventID: "x", Expires: now}}); !errors.Is(err, store.ErrNotFound) {
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

	// A put of the subscription's own epoch is written.
	first := load(t, s, "orders", "a").Epoch
	late := store.HistoryRecord{EventID: "e3", Expires: now.Add(time.Hour), Payload: []byte("three")}
	if err := s.PutHistory(ctx, "orders", "a", first, []store.HistoryRecord{late}); err != nil {
		t.Fatalf("PutHistory of the subscription's epoch: %v", err)
	}
	if got, err := get("a", "e3", now); err != nil || got != "three" {
		t.Errorf("History of a put of the subscription's epoch = %q, %v", got, err)
	}

	// A recreated subscription starts without the old one's histories, and a put of the old
	// one's epoch, landing late, writes nothing under it.
	if err := s.DeleteSubscription(ctx, "orders", "a"); err != nil {
		t.Fatal(err)
	}
	putSub(t, s, "orders", "a")
	if _, err := get("a", "e1", now); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a deleted subscription's history came back: err %v", err)
	}
	late.Payload = []byte("three, late")
	err := s.PutHistory(ctx, "orders", "a", first, []store.HistoryRecord{late})
	if !errors.Is(err, store.ErrStaleEpoch) || !errors.Is(err, store.ErrNotFound) {
		t.Errorf("PutHistory of the deleted subscription's epoch: %v, want an error matching ErrStaleEpoch and ErrNotFound", err)
	}
	if got, err := get("a", "e3", now); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a late put of the deleted subscription's epoch shows under the new one: %q, %v", got, err)
	}
	if err := s.PutHistory(ctx, "orders", "a", load(t, s, "orders", "a").Epoch, []store.HistoryRecord{late}); err != nil {
		t.Errorf("PutHistory of the new subscription's epoch: %v", err)
	}
}

// testExpireManyHistories checks that one ExpireHistory deletes every history expired by
// then, however many there are and in every topic and subscription, keeps the others, and
// judges a history put again by its newest Expires.
func testExpireManyHistories(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	const perSub = 500
	type sub struct{ topic, name string }
	subs := []sub{{"orders", "a"}, {"orders", "b"}, {"audit", "a"}}
	putTopic(t, s, "orders")
	putTopic(t, s, "audit")
	live := func(i int) bool { return i%5 == 0 }
	id := func(i int) string { return fmt.Sprintf("event-%04d", i) }
	for _, sb := range subs {
		putSub(t, s, sb.topic, sb.name)
		recs := make([]store.HistoryRecord, 0, perSub)
		for i := range perSub {
			exp := now.Add(-time.Duration(i) * time.Second)
			if live(i) {
				exp = now.Add(time.Duration(i+1) * time.Second)
			}
			recs = append(recs, store.HistoryRecord{EventID: id(i), Expires: exp, Payload: []byte(id(i))})
		}
		if err := s.PutHistory(ctx, sb.topic, sb.name, 0, recs); err != nil {
			t.Fatalf("PutHistory(%s, %s): %v", sb.topic, sb.name, err)
		}
	}
	// Event 1 of the first subscription, expired as first put, is put again to live on.
	again := store.HistoryRecord{EventID: id(1), Expires: now.Add(time.Hour), Payload: []byte("again")}
	if err := s.PutHistory(ctx, subs[0].topic, subs[0].name, 0, []store.HistoryRecord{again}); err != nil {
		t.Fatalf("PutHistory again: %v", err)
	}

	if err := s.ExpireHistory(ctx, now); err != nil {
		t.Fatalf("ExpireHistory: %v", err)
	}
	before := now.Add(-time.Hour) // when every history put was live: what History finds is stored
	for j, sb := range subs {
		for i := range perSub {
			keep := live(i) || j == 0 && i == 1
			r, err := s.History(ctx, sb.topic, sb.name, id(i), before)
			switch {
			case keep && err != nil:
				t.Fatalf("live history %s of %s/%s after ExpireHistory: %v", id(i), sb.topic, sb.name, err)
			case !keep && !errors.Is(err, store.ErrNotFound):
				t.Fatalf("expired history %s of %s/%s survived ExpireHistory: %q, %v", id(i), sb.topic, sb.name, r.Payload, err)
			}
		}
	}
}
