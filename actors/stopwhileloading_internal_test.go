package actors

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Status requests and EndProbations kept for a subscription's state load ([boot.hold]) are
// answered when the actor stops before the load is in — deleted, changed, moved or shut down
// while its store is slow — with an error wrapping ErrNotRunning that names the subscription,
// at once. Before, the actor stopped without a word, and each caller waited out its own
// timeout (the router's 10 s, here the requests' minute).
func TestRequestsWaitingForTheLoadAreAnsweredWhenTheActorStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		system, pid, release, started := loadingAudit(t)
		var futures []*actor.Future
		for range 10 {
			futures = append(futures,
				system.Root.RequestFuture(pid, &GetStatus{Subscription: "audit"}, time.Minute),
				system.Root.RequestFuture(pid, &EndProbation{Subscription: "audit"}, time.Minute))
		}
		synctest.Wait()                        // kept, waiting for the load
		stopped := system.Root.StopFuture(pid) // the stop itself waits for the load up to StopGrace
		for i, f := range futures {
			res, err := f.Result()
			if err != nil {
				t.Fatalf("request %d kept for the load of a stopped actor: %v; want its answer", i, err)
			}
			e, ok := res.(error)
			if !ok || !errors.Is(e, ErrNotRunning) || !strings.Contains(e.Error(), `"audit"`) || !strings.Contains(e.Error(), "stopped") {
				t.Fatalf("request %d answered %v; want an error wrapping ErrNotRunning that names the subscription and says it stopped", i, res)
			}
		}
		if waited := time.Since(started); waited != 0 {
			t.Errorf("the requests were answered %v after the stop began, want at once", waited)
		}
		release()
		if err := stopped.Wait(); err != nil {
			t.Fatal(err)
		}
		<-time.After(time.Minute) // protoactor's dead-letter throttle, woken by the load's late result, rests
	})
}
