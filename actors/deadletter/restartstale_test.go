package deadletter_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// heldPuts is an object store whose puts of keys under a held prefix wait, whatever their
// context, for the result the test sends on that prefix's channel.
type heldPuts struct {
	*testkit.ObjectStore
	mu   sync.Mutex
	hold map[string]chan error
}

func (s *heldPuts) Put(ctx context.Context, bucket, key string, body []byte, opts sinks.PutOptions) (sinks.ObjectInfo, error) {
	s.mu.Lock()
	var ch chan error
	for prefix, c := range s.hold {
		if strings.HasPrefix(key, prefix) {
			ch = c
		}
	}
	s.mu.Unlock()
	if ch != nil {
		if err := <-ch; err != nil {
			return sinks.ObjectInfo{}, err
		}
		ctx = context.WithoutCancel(ctx) // a write that went out lands, cancelled or not
	}
	return s.ObjectStore.Put(ctx, bucket, key, body, opts)
}

// failingOutbox is an in-memory outbox whose next Put fails once fail is set.
type failingOutbox struct {
	*deadletter.MemoryOutbox
	fail atomic.Bool
}

func (o *failingOutbox) Put(ctx context.Context, recs []deadletter.Record) error {
	if o.fail.CompareAndSwap(true, false) {
		return errors.New("disk full")
	}
	return o.MemoryOutbox.Put(ctx, recs)
}

// The results of writes that a crashed incarnation of the dead-letter actor started are not
// taken for those of the next one's. The first incarnation writes sub-a's and sub-b's objects
// as its second and third; it crashes while both are in flight, and the next one, loading
// them from the outbox, has them as its first and second. sub-a's old write then succeeds:
// taken for the new second object's, it forgot sub-b's record, which is in no object.
func TestWritesOfACrashedIncarnationAreNotTheNextOnes(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		objs := &heldPuts{ObjectStore: testkit.NewObjectStore(), hold: map[string]chan error{}}
		outbox := &failingOutbox{MemoryOutbox: deadletter.NewMemoryOutbox()}
		pid := h.Spawn(deadletter.Props(&deadletter.Config{Store: objs, Outbox: outbox, NewID: sequentialIDs()}))
		root := h.System().Root
		enqueue := func(sub, id string) {
			root.Send(pid, &deadletter.Enqueue{Letter: dlLetter(t, sub, id, time.Now()), Target: dlTarget(sub, false)})
		}
		enqueue("sub-c", "c1") // the first object: written and done with
		h.Advance(deadletter.DefaultDelay + time.Minute)
		a, b := make(chan error, 1), make(chan error, 1)
		objs.mu.Lock()
		objs.hold[dlTarget("sub-a", false).Prefix] = a
		objs.hold[dlTarget("sub-b", false).Prefix] = b
		objs.mu.Unlock()
		enqueue("sub-a", "a1")
		enqueue("sub-b", "b1")
		h.Advance(deadletter.DefaultDelay + time.Minute) // both writes started, and held
		// An outbox change fails: the actor crashes and restarts from the outbox. Meanwhile
		// sub-a's write succeeds and sub-b's fails.
		outbox.fail.Store(true)
		enqueue("sub-c", "c2")
		h.Settle()
		a <- nil
		b <- errors.New("unavailable")
		objs.mu.Lock()
		clear(objs.hold)
		objs.mu.Unlock()
		h.Advance(time.Hour)
		var ids []string
		for _, r := range objs.Records(t, "deadletters", dlTarget("sub-b", false).Prefix, schemas.EventGrid, dlTopicID) {
			ids = append(ids, r.Event.ID)
		}
		if len(ids) != 1 || ids[0] != "b1" {
			t.Errorf("sub-b's objects hold %v, want b1 written once its write is tried again", ids)
		}
	})
}

// An outbox change that fails restarts the actor, and the change is written again as it goes:
// a record whose first put failed is still written, not forgotten with the incarnation that
// took it in.
func TestAFailedOutboxChangeIsSavedOnRestart(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		objs := testkit.NewObjectStore()
		outbox := &failingOutbox{MemoryOutbox: deadletter.NewMemoryOutbox()}
		pid := h.Spawn(deadletter.Props(&deadletter.Config{Store: objs, Outbox: outbox}))
		h.Settle()
		outbox.fail.Store(true) // the store fails once, then takes writes again
		h.System().Root.Send(pid, &deadletter.Enqueue{Letter: dlLetter(t, "sub-a", "a1", time.Now()), Target: dlTarget("sub-a", false)})
		h.Advance(deadletter.DefaultDelay + time.Hour)
		var ids []string
		for _, r := range objs.Records(t, "deadletters", dlTarget("sub-a", false).Prefix, schemas.EventGrid, dlTopicID) {
			ids = append(ids, r.Event.ID)
		}
		if len(ids) != 1 || ids[0] != "a1" {
			t.Errorf("sub-a's objects hold %v, want a1 written once", ids)
		}
	})
}
