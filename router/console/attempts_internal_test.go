package console

import (
	"fmt"
	"testing"

	"github.com/egridio/egrid/router"
)

// What Attempts keeps stays within its bound in all: past it, the oldest attempts of the
// subscriptions that recorded least recently go first, and the cost it counts is the cost of
// what it holds. Its rings kept every attempt's every event id for every subscription ever seen.
func TestAttemptsStayWithinTheirBound(t *testing.T) {
	a := NewAttempts(0)
	a.maxBytes = 64 << 10
	ids := make([]string, 5000)
	for i := range ids {
		ids[i] = fmt.Sprintf("%036d", i) // uuid-sized
	}
	for s := range 100 {
		for range 5 {
			a.Record(&router.AttemptRecord{Topic: "orders", Subscription: fmt.Sprint("sub", s), EventIDs: ids})
		}
		a.mu.Lock()
		kept, held := a.bytes, 0
		for _, r := range a.by {
			for _, at := range r.attempts {
				held += attemptCost(&at)
				if len(at.Events) > EventsPerAttempt {
					t.Fatalf("an attempt keeps %d events, want at most %d", len(at.Events), EventsPerAttempt)
				}
			}
		}
		n := len(a.by)
		a.mu.Unlock()
		if kept != held || kept > a.maxBytes {
			t.Fatalf("after %d subscriptions: counted %d bytes, holding %d; want them equal and at most %d", s+1, kept, held, a.maxBytes)
		}
		if s == 99 && (n == 100 || len(a.Recent("orders", "sub99")) != 5) {
			t.Errorf("%d subscriptions kept, the newest with %d attempts; want the least recent ones dropped, the newest whole", n, len(a.Recent("orders", "sub99")))
		}
	}
}
