package cluster

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
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
