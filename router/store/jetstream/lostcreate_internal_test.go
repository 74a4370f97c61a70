package jetstream

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/store"
)

// racedCreates runs race, once, just before the first Create it passes on: another node's
// write landing between this store's look for the key and its create.
type racedCreates struct {
	jetstream.KeyValue
	race func()
}

func (r *racedCreates) Create(ctx context.Context, key string, v []byte) (uint64, error) {
	if race := r.race; race != nil {
		r.race = nil
		race()
	}
	return r.KeyValue.Create(ctx, key, v)
}

// TestALostCreateLeavesTheOtherNodesCreate: two nodes create one subscription at once. The
// create that loses fails with store.ErrFenced and writes nothing, so the other node's create,
// answered already, stands (the router then answers 409, or success for the same definition).
// A definition write that only met a stale view of an existing record is written again on the
// record read (TestPutSubscriptionOnAStaleViewIsWritten); a create that lost is not, where it
// overwrote the other node's definition.
func TestALostCreateLeavesTheOtherNodesCreate(t *testing.T) {
	s, _ := holesStore(t, 1)
	ctx := bounded(t)
	other, err := Open(ctx, s.nc, Options{Prefix: "HOLES"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var raceErr error
	s.meta = &racedCreates{KeyValue: s.meta, race: func() {
		raceErr = other.PutSubscription(ctx, "orders", "sub", []byte(`other`))
	}}
	err = s.PutSubscription(ctx, "orders", "sub", []byte(`mine`))
	if raceErr != nil {
		t.Fatal(raceErr)
	}
	if !errors.Is(err, store.ErrFenced) {
		t.Errorf("the create that lost: %v, want store.ErrFenced", err)
	}
	defs, err := other.Subscriptions(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if len(defs) != 1 || string(defs[0].Spec) != "other" {
		t.Errorf("stored %+v; want the other node's create (other) alone", defs)
	}
}

// TestCreateSubscriptionLosesToAnotherNodesCreate: another node's create of the subscription
// lands just before this store's CreateSubscription writes. The create writes with the
// bucket's Create alone, so it fails with store.ErrExists and the other node's definition,
// state and epoch stand.
func TestCreateSubscriptionLosesToAnotherNodesCreate(t *testing.T) {
	s, _ := holesStore(t, 1)
	ctx := bounded(t)
	other, err := Open(ctx, s.nc, Options{Prefix: "HOLES"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var raceErr error
	s.meta = &racedCreates{KeyValue: s.meta, race: func() {
		raceErr = other.CreateSubscription(ctx, "orders", "sub", []byte(`other`))
	}}
	err = s.CreateSubscription(ctx, "orders", "sub", []byte(`mine`))
	if raceErr != nil {
		t.Fatal(raceErr)
	}
	if !errors.Is(err, store.ErrExists) {
		t.Errorf("the create that lost: %v, want store.ErrExists", err)
	}
	defs, err := other.Subscriptions(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if len(defs) != 1 || string(defs[0].Spec) != "other" {
		t.Errorf("stored %+v; want the other node's create (other) alone", defs)
	}
	st, err := other.LoadSubscription(ctx, "orders", "sub")
	if err != nil {
		t.Fatal(err)
	}
	if st.Epoch != defs[0].Life {
		t.Errorf("epoch %d, want the other node's %d", st.Epoch, defs[0].Life)
	}
}
