package router

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/store"
)

// An owner's error reaches the asking node wrapping the same sentinel, through the JSON of
// the answer; an owner shutting down, or not yet running the subscription its placement
// names it for, answers ErrNotPlaced, which callers retry; an owner still loading the
// subscription's state refuses an endProbation with ErrSubscriptionLoading, which the admin API
// answers 503 on whichever node got the call.
func TestClusterAnswerCarriesTheOwnersError(t *testing.T) {
	for _, c := range []struct {
		owner error
		want  []error
	}{
		{fmt.Errorf("subscription %q of topic %q: %w", "workers", "jobs", actors.ErrNotRunning), []error{ErrNotPlaced, ErrUnavailable, ErrSubscriptionNotRunning}},
		// A receive or settle whose state write failed, or was fenced, on the owner: the
		// asking node answers as the owner would (the HTTP API: 503, "not running here",
		// or "moved to another node").
		{fmt.Errorf("event subscription %q: saving its state failed: %w (%w)", "workers", actors.ErrNotRunning, errors.New("input/output error")), []error{ErrSubscriptionNotRunning, ErrNotPlaced}},
		{fmt.Errorf("event subscription %q: taken over elsewhere: %w (%w)", "workers", actors.ErrNotRunning, store.ErrFenced), []error{ErrSubscriptionNotRunning, ErrSubscriptionMoved, ErrNotPlaced}},
		{fmt.Errorf("receiving: %w: %w", ErrUnavailable, fmt.Errorf("subscription: %w", actors.ErrNotRunning)), []error{ErrNotPlaced}},
		{ErrClosed, []error{ErrNotPlaced}},
		{fmt.Errorf("event subscription %q: %w", "workers", ErrNotQueueSubscription), []error{ErrNotQueueSubscription}},
		{ErrInsufficientStorage, []error{ErrInsufficientStorage}},
		{fmt.Errorf("saving topic %q: %w: %w", "orders", ErrUnavailable, fmt.Errorf("disk store: a write failed: %w: no space left on device", store.ErrDiskFull)),
			[]error{store.ErrDiskFull, ErrInsufficientStorage, ErrUnavailable, store.ErrUnavailable}},
		{fmt.Errorf("ending the probation of event subscription %q: %w", "billing", actors.ErrLoading), []error{ErrSubscriptionLoading}},
	} {
		var a clusterAnswer
		a.setErr(c.owner)
		raw, err := json.Marshal(&a)
		if err != nil {
			t.Fatal(err)
		}
		var got clusterAnswer
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		err = got.err("b")
		for _, w := range c.want {
			if !errors.Is(err, w) {
				t.Errorf("owner's %q reached the asking node as %q, not wrapping %q", c.owner, err, w)
			}
		}
	}
}
