package actors_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/testkit"
)

// laggingReads is a store whose first journal reads find nothing, as a replica of a
// replicated journal that lags behind its acknowledged end answers.
type laggingReads struct {
	store.Store
	empty atomic.Int32 // reads still to answer empty
}

func (l *laggingReads) Read(ctx context.Context, topic string, from uint64, limit int) ([]store.Entry, error) {
	if l.empty.Add(-1) >= 0 {
		return nil, nil
	}
	return l.Store.Read(ctx, topic, from, limit)
}

// A queue subscription whose journal read comes back empty although the journal is known to
// reach further (a lagging replica answered, in cluster mode) stays behind and reads again at
// the next message announcing the journal's end, as a push subscription does: it skipped to
// the end instead, and the acknowledged events in between were never received by anyone.
func TestQueueEmptyReadSkipsNoEvents(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		ctx := context.Background()
		mem := store.NewMemory()
		_ = mem.PutTopic(ctx, "orders", nil)
		_ = mem.PutSubscription(ctx, "orders", "workers", nil)
		evs, err := schemas.DecodeCloudEvents([]byte(`[{"specversion":"1.0","id":"e1","source":"/o","type":"T"},`+
			`{"specversion":"1.0","id":"e2","source":"/o","type":"T"},{"specversion":"1.0","id":"e3","source":"/o","type":"T"}]`), schemas.ClassicLimits)
		if err != nil {
			t.Fatal(err)
		}
		last, err := mem.Append(ctx, "orders", time.Now(), evs) // on another node: no Deliver here
		if err != nil {
			t.Fatal(err)
		}
		st := &laggingReads{Store: mem}
		st.empty.Store(1)
		pid := h.Spawn(actors.QueueProps(&actors.SubscriptionConfig{
			SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.CloudEvents, Store: st, Metrics: new(metrics.Set)},
			Name:               "workers", DeliverySchema: schemas.CloudEvents,
			Policy: &retry.Policy{Profile: retry.Namespace()}, Queue: &actors.QueueConfig{},
		}))
		root := h.System().Root
		h.Settle() // loaded (head 3 from the journal) and read from 1: empty
		// The periodic poll of the journal's end (JournalAt, forwarded by the topic actor).
		root.Send(pid, &actors.Deliver{Through: last, From: last + 1})
		res := ask[*actors.ReceivedEvents](t, root, pid, &actors.ReceiveEvents{Subscription: "workers", ID: 1, MaxEvents: 10, MaxWait: 10 * time.Second})
		var got []string
		for _, e := range res.Events {
			var ev struct{ ID string }
			if err := json.Unmarshal(e.Event, &ev); err != nil {
				t.Fatal(err)
			}
			got = append(got, ev.ID)
		}
		if want := []string{"e1", "e2", "e3"}; !slices.Equal(got, want) {
			t.Fatalf("received %v after an empty read and a poll of the journal's end; want %v", got, want)
		}
	})
}
