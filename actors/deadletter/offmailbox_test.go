package deadletter_test

import (
	"context"
	"testing"
	"time"

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/testkit"
)

// gatedOutboxStore is a store whose dead-letter outbox writes wait until the test releases
// them, one release per write.
type gatedOutboxStore struct {
	store.Store
	gate chan struct{}
}

func (g *gatedOutboxStore) PutDeadLetters(ctx context.Context, recs []store.DeadLetterRecord) error {
	<-g.gate
	return g.Store.PutDeadLetters(ctx, recs)
}

// The dead-letter actor saves its outbox off the mailbox: while a synced outbox write is held
// up it still answers, and an object is put only once the outbox says which records it holds.
func TestOutboxWritesDoNotBlockTheDeadLetterActor(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		st := &gatedOutboxStore{Store: store.NewMemory(), gate: make(chan struct{})}
		objects := testkit.NewObjectStore()
		pid := h.Spawn(deadletter.Props(&deadletter.Config{
			Store: objects, Outbox: storeOutbox(t, st), Metrics: new(metrics.Set),
		}))
		root := h.System().Root
		root.Send(pid, &deadletter.Enqueue{Letter: dlLetter(t, "sub-a", "e1", time.Now()), Target: dlTarget("sub-a", false)})
		h.Settle() // the record's outbox write is held up
		if st := dlStatus(t, h, pid); st.Waiting != 1 || st.Pending() != 1 {
			t.Errorf("status while the outbox write is held up = %+v, want one record waiting", st)
		}
		flushed := root.RequestFuture(pid, &deadletter.Flush{}, time.Hour)
		h.Settle()
		if st := dlStatus(t, h, pid); st.Writing != 1 {
			t.Errorf("status after the flush asked = %+v, want the record writing", st)
		}
		if n := objects.Puts(); n != 0 {
			t.Fatalf("%d objects put before the outbox holds the record and its object", n)
		}
		st.gate <- struct{}{} // the record
		h.Settle()
		if n := objects.Puts(); n != 0 {
			t.Fatalf("%d objects put before the outbox holds the record's object", n)
		}
		st.gate <- struct{}{} // its write state: object and attempt
		h.Settle()
		if n := objects.Puts(); n != 1 {
			t.Fatalf("%d objects put once the outbox is saved, want 1", n)
		}
		res, err := flushed.Result()
		if err != nil {
			t.Fatal(err)
		}
		if st := res.(*deadletter.Status); st.Pending() != 0 || st.RecordsWritten != 1 {
			t.Errorf("flush answered %+v, want the record written", st)
		}
		left, _ := st.DeadLetters(context.Background())
		if len(left) != 0 {
			t.Errorf("%d records left in the outbox after the flush answered, want none", len(left))
		}
	})
}
