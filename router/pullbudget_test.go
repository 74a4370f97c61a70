package router_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/testkit"
)

// A receive whose receipt's synced write finishes after the receive stopped waiting for the
// answer (MaxWait plus its 30 s margin) gives the answer's bytes back to the bound on receive
// answers held at once. The late answer went to protoactor's dead letters with its share of
// the bound, held for good: enough of them and no queue subscription of the router handed
// out anything more. The same held for a receive whose caller went away meanwhile.
func TestReceiveAnswerOutlastingTheWaitGivesItsBytesBack(t *testing.T) {
	for _, tt := range []struct {
		name   string
		cancel bool // the caller goes away while the receipt is written
	}{
		{name: "the wait times out"},
		{name: "the caller goes away", cancel: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := &stateGatedStore{Store: store.NewMemory()}
			testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
				h.SubscribeQueue(pullTopic, pullSub, router.QueueInfo{})
				h.Publish(pullTopic, h.CloudEvent(testkit.ID("a")))
				h.Settle()
				open := st.closeGate() // the receipt's write hangs
				defer open()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				done := make(chan error, 1)
				go func() {
					_, err := h.Router().Receive(ctx, pullTopic, pullSub, router.ReceiveOptions{MaxWait: 10 * time.Second})
					done <- err
				}()
				h.Settle()
				if held, _ := h.Router().ReceiveAnswerBytes(); held == 0 {
					t.Fatal("no answer bytes held while the receipt is written; the test checks nothing")
				}
				if tt.cancel {
					cancel()
					if err := <-done; !errors.Is(err, context.Canceled) {
						t.Fatalf("Receive after cancel = %v, want Canceled", err)
					}
				}
				h.Advance(time.Minute) // past MaxWait and the margin
				if !tt.cancel {
					if err := <-done; !errors.Is(err, router.ErrUnavailable) {
						t.Fatalf("Receive whose answer outlasted the wait = %v, want ErrUnavailable", err)
					}
				}
				open()
				h.Settle()
				h.Advance(time.Minute) // protoactor's dead-letter throttle ends its period
				if held, _ := h.Router().ReceiveAnswerBytes(); held != 0 {
					t.Errorf("%d answer bytes held after the late answer; want 0", held)
				}
			}, testkit.WithStore(st))
		})
	}
}
