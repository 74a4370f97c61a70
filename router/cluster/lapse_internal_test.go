package cluster

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A node that cannot renew its leases stops their actors, and gives the duty up, 3/5 of the
// TTL after the last renewal, however long its calls to NATS take and whenever its rounds
// fall. The stop was checked only at the end of each round: on a NATS server that stopped
// answering every round waits 3/10 of the TTL for its membership renewal, rounds run back
// to back, and the first check past 3/5 came up to 9/10 of the TTL after the renewal,
// leaving a tenth of the TTL before another node may take the lease instead of 2/5. With
// NATS disconnected rounds end at once, but the check waited for the next round's tick, up
// to a round late.
//
// Virtual time: the stop is asserted at its exact instant. The TTL is a minute (rounds of
// 12 s, stalled calls end after 18 s, stops fall due 36 s after the renewal); the leases
// were renewed 17 s before the loop starts, so the old rounds' checks (at 18 s, 36 s…
// into the stall, or at the ticks 12 s, 24 s… while disconnected) all miss the due time
// (19 s in).
func TestActorsStopOnTimeWhileNATSStalls(t *testing.T) {
	connected := testNATS(t)
	disconnected := testNATS(t)
	disconnected.Close()
	for _, tc := range []struct {
		name string
		nc   *nats.Conn
	}{
		{"stalled", connected},         // connected, every call waits until its deadline
		{"disconnected", disconnected}, // no call made: every round ends at once
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				stopped := make(chan time.Time, 1)
				n := stalledNode(tc.nc, newStalledKV(false), newStalledKV(false), Hooks{
					Start: func(Key) error { return nil },
					Stop:  func(Key) { stopped <- time.Now() },
				})
				close(n.viewDone) // no membership listing: the round renews what it holds
				k := Key{Topic: "orders", Subscription: "billing"}
				n.want[k] = 1
				renewed := time.Now().Add(-17 * time.Second)
				n.held[k] = &lease{rev: 1, renewed: renewed, running: true, gen: 1}
				n.dutyLease = &lease{rev: 1, renewed: renewed}
				n.duty.Store(true)
				due := renewed.Add(n.stopAfter())
				go n.loop()

				<-time.After(time.Until(due) - time.Millisecond)
				synctest.Wait()
				select {
				case at := <-stopped:
					t.Fatalf("the actor stopped %v after the last renewal, before the due %v", at.Sub(renewed), n.stopAfter())
				default:
				}
				if !n.Duty() {
					t.Fatal("the duty was given up before it was due")
				}

				<-time.After(time.Millisecond)
				synctest.Wait()
				select {
				case at := <-stopped:
					if at != due {
						t.Errorf("the actor stopped %v after the last renewal, want %v", at.Sub(renewed), n.stopAfter())
					}
				default:
					t.Errorf("the actor still runs %v after the last renewal, want stopped at %v", n.stopAfter(), n.stopAfter())
				}
				if n.Duty() {
					t.Errorf("the duty is still held %v after the last renewal, want given up at %v", n.stopAfter(), n.stopAfter())
				}

				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				n.Close(ctx)
			})
		})
	}
}

// slowKV answers every call after delay (a loaded but working NATS server), or with the
// context's error if that ends first; failOnce makes the first Update of that key fail at once.
type slowKV struct {
	jetstream.KeyValue
	delay    time.Duration
	mu       sync.Mutex
	failOnce map[string]bool
}

func (s *slowKV) wait(ctx context.Context) error {
	select {
	case <-time.After(s.delay):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (s *slowKV) Put(ctx context.Context, key string, _ []byte) (uint64, error) {
	return 1, s.wait(ctx)
}
func (s *slowKV) Update(ctx context.Context, key string, _ []byte, rev uint64) (uint64, error) {
	s.mu.Lock()
	f := s.failOnce[key]
	delete(s.failOnce, key)
	s.mu.Unlock()
	if f {
		return 0, errors.New("nats: timeout")
	}
	if err := s.wait(ctx); err != nil {
		return 0, err
	}
	return rev + 1, nil
}

// TestOneMissedRenewalStopsThatActorAlone: on a NATS server slow to answer (every call 8 s,
// a round 16 s of its 18 s bound), a lease whose renewal failed once has its actor stopped
// when due (3/5 TTL after its last renewal), and no other: cutting the whole round short to
// that stop once cut the other leases' renewals short too, which then missed theirs, until
// every actor of the node stopped.
func TestOneMissedRenewalStopsThatActorAlone(t *testing.T) {
	nc := testNATS(t)
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		stops := map[Key]time.Duration{}
		start := time.Now()
		a := Key{Topic: "orders", Subscription: "a"}
		b := Key{Topic: "orders", Subscription: "b"}
		n := stalledNode(nc, &slowKV{delay: 8 * time.Second}, &slowKV{delay: 8 * time.Second, failOnce: map[string]bool{a.leaseKey(): true}}, Hooks{
			Start: func(Key) error { return nil },
			Stop: func(k Key) {
				mu.Lock()
				stops[k] = time.Since(start)
				mu.Unlock()
			},
		})
		close(n.viewDone)
		for _, k := range []Key{a, b} {
			n.want[k] = 1
			n.held[k] = &lease{rev: 1, renewed: start.Add(-12 * time.Second), running: true, gen: 1}
		}
		go n.loop()
		<-time.After(2 * time.Minute)
		synctest.Wait()
		mu.Lock()
		got := stops
		mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		n.Close(ctx)
		if want := map[Key]time.Duration{a: 24 * time.Second}; !maps.Equal(got, want) {
			t.Errorf("actors stopped (time since the start): %v; want %v: a's at its due time, b's never", got, want)
		}
	})
}
