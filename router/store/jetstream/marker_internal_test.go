package jetstream

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/egridio/egrid/router/store"
)

// metaKeys returns the keys the meta bucket's stream holds a message for, deletion markers
// included.
func metaKeys(t *testing.T, s *Store) []string {
	t.Helper()
	keys, err := s.metaStream.keys(t.Context(), s.meta, ">")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	return keys
}

// Deleting a subscription or a topic leaves no deletion marker in the meta bucket: on the old
// code every deleted name kept one for good, and the bucket and its listings grew with every
// name a deployment ever deleted. Another store (another node) still sees the deletes — its
// listings leave the names out, and a write on the revision it read before the delete is
// fenced — and a name created again is there for both.
func TestDeletesLeaveNoMetaMarkers(t *testing.T) {
	s, _ := holesStore(t, 1)
	ctx := bounded(t)
	other, err := Open(ctx, s.nc, Options{Prefix: "HOLES"})
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"a", "b"} {
		if err := s.PutSubscription(ctx, "orders", sub, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutTopic(ctx, "gone", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSubscription(ctx, "gone", "x", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := other.LoadSubscription(ctx, "orders", "a"); err != nil {
		t.Fatal(err)
	}

	if err := s.DeleteSubscription(ctx, "orders", "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTopic(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	want := []string{subKey("orders", "b"), topicKey("orders")}
	if got := metaKeys(t, s); !slices.Equal(got, want) {
		t.Errorf("meta bucket's keys after the deletes = %v, want %v (no deletion markers)", got, want)
	}

	subs, err := other.Subscriptions(ctx, "orders")
	if err != nil || len(subs) != 1 || subs[0].Name != "b" {
		t.Errorf("other store's Subscriptions(orders) after the delete = %v, %v; want [b]", subs, err)
	}
	topics, err := other.Topics(ctx)
	if err != nil || len(topics) != 1 || topics[0].Name != "orders" {
		t.Errorf("other store's Topics after the delete = %v, %v; want [orders]", topics, err)
	}
	err = other.UpdateSubscription(ctx, "orders", "a", store.Update{Cursor: 1})
	if !errors.Is(err, store.ErrFenced) {
		t.Errorf("other store's update of the deleted subscription, on the revision it read before = %v, want ErrFenced", err)
	}

	if err := s.PutSubscription(ctx, "orders", "a", []byte(`{"again":true}`)); err != nil {
		t.Fatalf("creating the deleted subscription again: %v", err)
	}
	if err := s.PutTopic(ctx, "gone", []byte(`{}`)); err != nil {
		t.Fatalf("creating the deleted topic again: %v", err)
	}
	subs, err = other.Subscriptions(ctx, "orders")
	if err != nil || len(subs) != 2 || subs[0].Name != "a" || string(subs[0].Spec) != `{"again":true}` {
		t.Errorf("other store's Subscriptions(orders) after the create = %v, %v; want a (created again) and b", subs, err)
	}
}

// A deletion marker already in the meta bucket (one an earlier release left, or a delete cut
// short) is removed by the next listing that finds it; the listing is as before.
func TestListingRemovesOldMetaMarkers(t *testing.T) {
	s, _ := holesStore(t, 1)
	ctx := bounded(t)
	for _, sub := range []string{"a", "b"} {
		if err := s.PutSubscription(ctx, "orders", sub, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.meta.Purge(ctx, subKey("orders", "a")); err != nil { // as earlier releases deleted
		t.Fatal(err)
	}
	if got := metaKeys(t, s); !slices.Contains(got, subKey("orders", "a")) {
		t.Fatalf("meta bucket's keys after a key-value purge = %v, want its marker among them", got)
	}
	subs, err := s.Subscriptions(ctx, "orders")
	if err != nil || len(subs) != 1 || subs[0].Name != "b" {
		t.Fatalf("Subscriptions(orders) = %v, %v; want [b]", subs, err)
	}
	for _, k := range metaKeys(t, s) {
		if strings.HasPrefix(k, subKey("orders", "a")) {
			t.Errorf("meta bucket still holds %s after a listing found its deletion marker", k)
		}
	}
	if _, err := s.meta.Get(ctx, subKey("orders", "b")); err != nil {
		t.Errorf("subscription b after the listing: %v", err)
	}
}

// A listing removes a deletion marker it found only up to the marker itself: a name another
// node creates again after the listing read the marker, before the removal, keeps its new
// definition. A removal of the key's whole subject would delete it.
func TestListingKeepsANameCreatedAgainAfterItsMarker(t *testing.T) {
	s, _ := holesStore(t, 1)
	ctx := bounded(t)
	other, err := Open(ctx, s.nc, Options{Prefix: "HOLES"})
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"a", "b"} {
		if err := s.PutSubscription(ctx, "orders", sub, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.meta.Purge(ctx, subKey("orders", "a")); err != nil { // as earlier releases deleted
		t.Fatal(err)
	}
	created := false
	// scanMeta calls fn once it has read the keys (sub.orders.a's marker among them) and
	// before it removes the markers: the other node creates a again in that window.
	err = s.scanMeta(ctx, subPattern("orders"), func(key string, _ []byte) error {
		if created {
			return nil
		}
		created = true
		return other.PutSubscription(ctx, "orders", "a", []byte(`{"again":true}`))
	})
	if err != nil || !created {
		t.Fatalf("listing while the name is created again: %v (created %v)", err, created)
	}
	if _, err := s.meta.Get(ctx, subKey("orders", "a")); err != nil {
		t.Fatalf("subscription a, created again during the listing that removed its marker: %v", err)
	}
	subs, err := other.Subscriptions(ctx, "orders")
	if err != nil || len(subs) != 2 || subs[0].Name != "a" || string(subs[0].Spec) != `{"again":true}` {
		t.Errorf("Subscriptions(orders) after the listing = %v, %v; want a (created again) and b", subs, err)
	}
}
