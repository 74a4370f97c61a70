package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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
		// Damage the owner's store found is damage on the asking node too, not an outage.
		{storeFailure("receiving", fmt.Errorf("%w: bad record", store.ErrCorrupt)), []error{ErrStoreDamaged}},
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
		if errors.Is(c.owner, ErrStoreDamaged) && errors.Is(err, ErrUnavailable) {
			t.Errorf("owner's %q reached the asking node as %q, wrapping ErrUnavailable", c.owner, err)
		}
		for _, w := range c.want {
			if !errors.Is(err, w) {
				t.Errorf("owner's %q reached the asking node as %q, not wrapping %q", c.owner, err, w)
			}
		}
	}
}

// The answer of a routed receive whose events fill its byte bound exactly, as the queue actor
// counts them (each event's body and lock token plus answerEventBytes), fits in the NATS
// max_payload the bound was made from, whatever the events hold: <, > and & are not written
// as six bytes each (json.Marshal's answer of the same events is three times the bound).
func TestRoutedReceiveAnswerFitsItsBound(t *testing.T) {
	const maxPayload = 64 << 10
	bound := receiveBound{maxBytes: maxPayload - answerBytes, eventBytes: answerEventBytes}
	token := strings.Repeat("A", 39) // the length of a lock token, base64url
	var evs []ReceivedEvent
	for used := 0; used < bound.maxBytes; {
		size := min(5000, bound.maxBytes-used) - len(token) - bound.eventBytes // the last one fills the bound
		body := `{"data":"` + strings.Repeat("<&>", max(size-12, 0)/3)
		body += strings.Repeat(" ", size-len(body)-2) + `"}`
		evs = append(evs, ReceivedEvent{LockToken: token, DeliveryCount: 10, Event: json.RawMessage(body)})
		used += len(body) + len(token) + bound.eventBytes
	}
	got, err := encodeAnswer(&clusterAnswer{Events: evs})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) > maxPayload {
		t.Errorf("the answer of %d events filling the bound of %d bytes is %d bytes, over the max_payload of %d", len(evs), bound.maxBytes, len(got), maxPayload)
	}
	var back clusterAnswer
	if err := json.Unmarshal(got, &back); err != nil || len(back.Events) != len(evs) || !bytes.Equal(back.Events[0].Event, evs[0].Event) {
		t.Errorf("the answer does not decode to its events: %v", err)
	}
	if escaped, _ := json.Marshal(&clusterAnswer{Events: evs}); len(escaped) <= maxPayload {
		t.Errorf("json.Marshal's answer is %d bytes: the test's events do not hold what it escapes", len(escaped))
	}
}
