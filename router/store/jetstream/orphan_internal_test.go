package jetstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// orphanRounds bounds the races of the orphan tests: each round is one topic's delete against
// one subscription's create, on two stores (two nodes) of one server.
const orphanRounds = 150

// slowCreates holds each Create back by a number of round trips to the server (slow, read
// when the Create starts): a node slow between its look at the topic and its write, by a
// pause of its process or its network, stretched over the other node's delete.
type slowCreates struct {
	jetstream.KeyValue
	nc   interface{ Flush() error }
	slow func() int
}

func (c *slowCreates) Create(ctx context.Context, key string, v []byte) (uint64, error) {
	for range c.slow() {
		if err := c.nc.Flush(); err != nil {
			return 0, err
		}
	}
	return c.KeyValue.Create(ctx, key, v)
}

// raceOrphan runs del and create at once, from a shared start, and returns their errors.
func raceOrphan(del, create func() error) (delErr, createErr error) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { <-start; delErr = del() })
	wg.Go(func() { <-start; createErr = create() })
	close(start)
	wg.Wait()
	return delErr, createErr
}

// createOrPut is round i's definition write of subscription sub: CreateSubscription on even
// rounds, PutSubscription (of a name that holds nothing: a create too) on odd ones.
func createOrPut(ctx context.Context, s *Store, i int, topic string) error {
	if i%2 == 0 {
		return s.CreateSubscription(ctx, topic, "sub", []byte(`{}`))
	}
	return s.PutSubscription(ctx, topic, "sub", []byte(`{}`))
}

// TestDeleteTopicRacingASubscriptionCreateLeavesNoOrphan: one node deletes a topic while
// another creates a subscription of it. Whichever comes first, no subscription record is left
// once the delete returned: the topic is gone, and a record left under its name would belong
// to no topic (and, the names of a topic's things not telling its lives apart, to the next
// topic of the name).
func TestDeleteTopicRacingASubscriptionCreateLeavesNoOrphan(t *testing.T) {
	s, _ := holesStore(t, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	other, err := Open(ctx, s.nc, Options{Prefix: "HOLES"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	orphans, created := 0, 0
	var slow int
	s.meta = &slowCreates{KeyValue: s.meta, nc: s.nc, slow: func() int { return slow }}
	for i := range orphanRounds {
		slow = i % 32
		topic := fmt.Sprintf("t%d", i)
		if err := s.CreateTopic(ctx, topic, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(ctx, topic, time.Unix(1, 0), []*schemas.Event{{ID: "e1"}, {ID: "e2"}}); err != nil {
			t.Fatal(err)
		}
		delErr, createErr := raceOrphan(
			func() error { return other.DeleteTopic(ctx, topic) },
			func() error { return createOrPut(ctx, s, i, topic) },
		)
		if delErr != nil {
			t.Fatalf("round %d: DeleteTopic: %v", i, delErr)
		}
		switch {
		case createErr == nil:
			created++
		case !errors.Is(createErr, store.ErrNotFound):
			t.Fatalf("round %d: the subscription's create: %v, want nil or store.ErrNotFound", i, createErr)
		}
		_, err := s.meta.Get(ctx, subKey(topic, "sub"))
		switch {
		case err == nil:
			orphans++
		case !errors.Is(err, jetstream.ErrKeyNotFound):
			t.Fatal(err)
		}
	}
	t.Logf("%d of %d creates succeeded", created, orphanRounds)
	if orphans > 0 {
		t.Errorf("%d of %d rounds left a subscription record of a deleted topic; want none", orphans, orphanRounds)
	}
}

// TestTopicCreatedAgainDoesNotTakeARacedSubscription: one node deletes a topic and creates it
// again while another creates a subscription of it. A subscription the new topic holds after
// is one of the new topic: its cursor within the new journal (numbered from 1 again), not at
// the end of the old one, where it would wait for numbers the new journal has not reached.
func TestTopicCreatedAgainDoesNotTakeARacedSubscription(t *testing.T) {
	s, _ := holesStore(t, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	other, err := Open(ctx, s.nc, Options{Prefix: "HOLES"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	stale, created := 0, 0
	var slow int
	s.meta = &slowCreates{KeyValue: s.meta, nc: s.nc, slow: func() int { return slow }}
	for i := range orphanRounds {
		slow = i % 32
		topic := fmt.Sprintf("t%d", i)
		if err := s.CreateTopic(ctx, topic, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(ctx, topic, time.Unix(1, 0), []*schemas.Event{{ID: "e1"}, {ID: "e2"}}); err != nil {
			t.Fatal(err)
		}
		delErr, createErr := raceOrphan(
			func() error {
				if err := other.DeleteTopic(ctx, topic); err != nil {
					return err
				}
				return other.CreateTopic(ctx, topic, []byte(`{}`))
			},
			func() error { return createOrPut(ctx, s, i, topic) },
		)
		if delErr != nil {
			t.Fatalf("round %d: DeleteTopic and CreateTopic: %v", i, delErr)
		}
		switch {
		case createErr == nil:
			created++
		case !errors.Is(createErr, store.ErrNotFound):
			t.Fatalf("round %d: the subscription's create: %v, want nil or store.ErrNotFound", i, createErr)
		}
		st, err := other.LoadSubscriptionIndex(ctx, topic, "sub")
		switch {
		case errors.Is(err, store.ErrNotFound):
			continue
		case err != nil:
			t.Fatal(err)
		}
		last, err := other.LastSeq(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		if st.Cursor > last || createErr != nil {
			stale++
			t.Logf("round %d: the topic created again holds a subscription at cursor %d (its journal ends at %d); its create answered %v", i, st.Cursor, last, createErr)
		}
	}
	t.Logf("%d of %d creates succeeded", created, orphanRounds)
	if stale > 0 {
		t.Errorf("%d of %d rounds left the topic created again with the old topic's subscription; want none", stale, orphanRounds)
	}
}

// aroundCreates runs before, once, just before the first Create it passes on, and after,
// once, just after it: other nodes' calls landing between this store's look at the topic and
// its write, and between its write and its look at the topic again.
type aroundCreates struct {
	jetstream.KeyValue
	before, after func()
}

func (a *aroundCreates) Create(ctx context.Context, key string, v []byte) (uint64, error) {
	if before := a.before; before != nil {
		a.before = nil
		before()
	}
	rev, err := a.KeyValue.Create(ctx, key, v)
	if after := a.after; after != nil {
		a.after = nil
		after()
	}
	return rev, err
}

// TestATakenBackCreateLeavesAnotherNodesPut: this store's create of a subscription writes its
// record after another node deleted the topic and created it again, so the record is of the
// old topic (its cursor at the old journal's end); a third node's PutSubscription of the name
// lands before this store looks at the topic again. The third node's answered write stands,
// of the topic created again (its cursor within the new journal), and the create, which found
// the name held, writes nothing: the outcome of the put before the create.
func TestATakenBackCreateLeavesAnotherNodesPut(t *testing.T) {
	for _, create := range []bool{true, false} {
		t.Run(fmt.Sprintf("create=%v", create), func(t *testing.T) {
			s, _ := holesStore(t, 1)
			ctx := bounded(t)
			var nodes [2]*Store
			for i := range nodes {
				o, err := Open(ctx, s.nc, Options{Prefix: "HOLES"})
				if err != nil {
					t.Fatal(err)
				}
				defer o.Close()
				nodes[i] = o
			}
			b, c := nodes[0], nodes[1]
			if err := s.CreateTopic(ctx, "t", []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Append(ctx, "t", time.Unix(1, 0), []*schemas.Event{{ID: "e1"}, {ID: "e2"}}); err != nil {
				t.Fatal(err)
			}
			var raceErr, putErr error
			s.meta = &aroundCreates{KeyValue: s.meta,
				before: func() {
					if raceErr = b.DeleteTopic(ctx, "t"); raceErr == nil {
						raceErr = b.CreateTopic(ctx, "t", []byte(`{}`))
					}
				},
				after: func() { putErr = c.PutSubscription(ctx, "t", "sub", []byte(`spec2`)) },
			}
			var err error
			if create {
				err = s.CreateSubscription(ctx, "t", "sub", []byte(`spec1`))
			} else {
				err = s.PutSubscription(ctx, "t", "sub", []byte(`spec1`))
			}
			if raceErr != nil {
				t.Fatal(raceErr)
			}
			if putErr != nil {
				t.Fatalf("the other node's PutSubscription: %v", putErr)
			}
			defs, lerr := b.Subscriptions(ctx, "t")
			if lerr != nil {
				t.Fatal(lerr)
			}
			switch {
			case len(defs) != 1:
				t.Fatalf("the topic created again holds %+v; want one subscription", defs)
			case string(defs[0].Spec) == "spec1" && (create || err != nil):
				t.Errorf("stored spec1, the create answering %v: the other node's answered put (spec2) was removed", err)
			case string(defs[0].Spec) == "spec1":
			case string(defs[0].Spec) != "spec2":
				t.Errorf("stored %q; want spec2, the other node's answered put", defs[0].Spec)
			case err == nil:
				t.Errorf("the create answered success but the stored definition is the other node's put (spec2)")
			case create && !errors.Is(err, store.ErrExists), !create && !errors.Is(err, store.ErrFenced):
				t.Errorf("the create that found the name held: %v, want store.ErrExists (CreateSubscription) or store.ErrFenced (PutSubscription)", err)
			}
			st, serr := b.LoadSubscriptionIndex(ctx, "t", "sub")
			if serr != nil {
				t.Fatal(serr)
			}
			last, lerr := b.LastSeq(ctx, "t")
			if lerr != nil {
				t.Fatal(lerr)
			}
			if st.Cursor > last {
				t.Errorf("the subscription's cursor is %d, past the new journal's end %d: a cursor of the old topic", st.Cursor, last)
			}
		})
	}
}

// TestARecordOfTheTopicsEarlierLifeIsNotSwappedOrDeleted: as in
// TestATakenBackCreateLeavesAnotherNodesPut, this store's create writes a record of the topic
// deleted and created again, and a third node's SwapSubscription or DeleteSubscription of the
// name lands before this store looks at the topic again. The record is no subscription of the
// topic that stands: the call finds none (store.ErrNotFound), and the create, taken back and
// made again, stands on the new topic. A swap or delete that answered success would be undone
// by the create's take-back.
func TestARecordOfTheTopicsEarlierLifeIsNotSwappedOrDeleted(t *testing.T) {
	calls := map[string]func(ctx context.Context, c *Store) error{
		"swap": func(ctx context.Context, c *Store) error {
			return c.SwapSubscription(ctx, "t", "sub", []byte(`spec1`), []byte(`spec2`))
		},
		"delete": func(ctx context.Context, c *Store) error { return c.DeleteSubscription(ctx, "t", "sub") },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			s, _ := holesStore(t, 1)
			ctx := bounded(t)
			var nodes [2]*Store
			for i := range nodes {
				o, err := Open(ctx, s.nc, Options{Prefix: "HOLES"})
				if err != nil {
					t.Fatal(err)
				}
				defer o.Close()
				nodes[i] = o
			}
			b, c := nodes[0], nodes[1]
			if err := s.CreateTopic(ctx, "t", []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Append(ctx, "t", time.Unix(1, 0), []*schemas.Event{{ID: "e1"}, {ID: "e2"}}); err != nil {
				t.Fatal(err)
			}
			var raceErr, callErr error
			s.meta = &aroundCreates{KeyValue: s.meta,
				before: func() {
					if raceErr = b.DeleteTopic(ctx, "t"); raceErr == nil {
						raceErr = b.CreateTopic(ctx, "t", []byte(`{}`))
					}
				},
				after: func() { callErr = call(ctx, c) },
			}
			err := s.CreateSubscription(ctx, "t", "sub", []byte(`spec1`))
			if raceErr != nil {
				t.Fatal(raceErr)
			}
			if !errors.Is(callErr, store.ErrNotFound) {
				t.Errorf("the other node's %s of the old topic's record: %v, want store.ErrNotFound", name, callErr)
			}
			if err != nil {
				t.Fatalf("the create: %v, want it made again on the topic created again", err)
			}
			defs, err := b.Subscriptions(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			if len(defs) != 1 || string(defs[0].Spec) != "spec1" {
				t.Errorf("the topic created again holds %+v; want the create's spec1", defs)
			}
		})
	}
}
