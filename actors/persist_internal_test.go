package actors

import (
	"context"
	"testing"

	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/store"
)

// updateCounter records the subscription updates that reach the store.
type updateCounter struct {
	store.Store
	updates []store.Update
}

func (c *updateCounter) UpdateSubscription(ctx context.Context, topic, name string, u store.Update) error {
	c.updates = append(c.updates, u)
	return c.Store.UpdateSubscription(ctx, topic, name, u)
}

// Completions that arrive together are written as one update, after the last of them: while
// another attemptDone is on its way (finished > 0), a completion's update waits, and nothing
// it holds is lost — the last completion writes everything.
func TestCompletionsArrivingTogetherShareOneUpdate(t *testing.T) {
	mem := store.NewMemory()
	if err := mem.PutTopic(context.Background(), "orders", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := mem.PutSubscription(context.Background(), "orders", "billing", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	st := &updateCounter{Store: mem}
	s := &subscription{
		cfg:   &SubscriptionConfig{SubscriptionShared: &SubscriptionShared{Topic: "orders", Store: st, Metrics: new(metrics.Set)}, Name: "billing"},
		items: make(map[uint64]*item), batches: make(map[uint64]*batch), ctx: context.Background(),
	}
	// Without a router's writer the actor makes its own at its first write: wait for it to
	// have written what was queued before counting.
	flush := func() {
		if s.writer != nil {
			_ = s.writer.Flush(s.cfg.Name, s.epoch)
		}
	}
	defer func() { _ = s.writer.Close() }()
	// Three attempts finished; their attemptDone messages are all in the mailbox.
	s.finished.Store(3)
	for seq := uint64(1); seq <= 3; seq++ {
		s.next = seq + 1 // the completion settled event seq: the cursor may move to it
		s.persistSoon()
		flush()
		want := 0
		if seq == 3 {
			want = 1
		}
		if len(st.updates) != want {
			t.Fatalf("after completion %d of 3: %d store updates, want %d", seq, len(st.updates), want)
		}
	}
	if got := st.updates[0].Cursor; got != 3 {
		t.Fatalf("the shared update moved the cursor to %d, want 3 (every completion's)", got)
	}
	// A lone completion is written at once.
	s.finished.Store(1)
	s.next = 5
	s.persistSoon()
	flush()
	if len(st.updates) != 2 || st.updates[1].Cursor != 4 {
		t.Fatalf("a lone completion: updates %+v, want a second one with cursor 4", st.updates)
	}
}
