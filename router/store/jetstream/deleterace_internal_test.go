package jetstream

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/store"
)

// racedPurges is a meta bucket whose first Purge lets another writer write first (race, run
// once), as the owner's state write landing between a delete's read and its purge.
type racedPurges struct {
	jetstream.KeyValue
	race func()
}

func (r *racedPurges) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	if race := r.race; race != nil {
		r.race = nil
		race()
	}
	return r.KeyValue.Purge(ctx, key, opts...)
}

// A delete that loses to the owner's state write between its read of the record and its
// purge reads the record again and deletes it, instead of failing with ErrFenced (answered
// 503, the delete lost).
func TestDeleteSubscriptionReadsAgainAfterAStateWrite(t *testing.T) {
	s, _ := holesStore(t, 1)
	ctx := bounded(t)
	owner, err := Open(ctx, s.nc, Options{Prefix: "HOLES"})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	if err := s.PutSubscription(ctx, "orders", "sub", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.LoadSubscription(ctx, "orders", "sub"); err != nil {
		t.Fatal(err)
	}
	var raceErr error
	s.meta = &racedPurges{KeyValue: s.meta, race: func() {
		raceErr = owner.UpdateSubscription(ctx, "orders", "sub", store.Update{Cursor: 3})
	}}
	if err := s.DeleteSubscription(ctx, "orders", "sub"); err != nil {
		t.Errorf("DeleteSubscription after the owner's state write = %v, want it deleted", err)
	}
	if raceErr != nil {
		t.Fatalf("owner's state write: %v", raceErr)
	}
	if _, err := owner.LoadSubscription(ctx, "orders", "sub"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LoadSubscription after the delete = %v, want ErrNotFound", err)
	}
}
