package router_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/testkit"
)

// steps returns the pull steps of an explanation with their delivery counts, as "Received 1".
func steps(e *router.Explanation) []string {
	out := make([]string, len(e.Attempts))
	for i, a := range e.Attempts {
		out[i] = fmt.Sprintf("%s %d", a.Step, a.Attempt)
	}
	return out
}

func explain(t *testing.T, h *testkit.Harness, topic, sub, id string) *router.Explanation {
	t.Helper()
	e, err := h.Router().Explain(context.Background(), topic, sub, id)
	if err != nil {
		t.Fatalf("Explain %s: %v", id, err)
	}
	return e
}

// An event received and released twice on a queue subscription with maxDeliveryCount 2 and
// no dead-letter destination is dropped as its second release comes: its history shows both
// receipts with their locks, both releases, and the drop with its reason.
func TestExplainPullReleasedUntilDropped(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.CreateTopic("ns1", router.TopicSpec{Kind: router.KindNamespace})
		spec := testkit.QueueSubscription(router.QueueInfo{MaxDeliveryCount: 2})
		spec.DeadLetterDestination = nil
		h.Subscribe("ns1", "que3", spec)
		published := time.Now()
		h.Publish("ns1", h.CloudEvent(testkit.ID("e400")))
		var receipts []time.Time
		for range 2 {
			evs := h.Receive("ns1", "que3", 1)
			if len(evs) != 1 {
				t.Fatalf("received %d events, want e400", len(evs))
			}
			receipts = append(receipts, time.Now())
			h.Advance(time.Second)
			if res := h.Release("ns1", "que3", 0, evs[0].LockToken); len(res.Succeeded) != 1 {
				t.Fatalf("release = %+v", res)
			}
		}
		e := explain(t, h, "ns1", "que3", "e400")
		if e.State != router.EventDropped || e.Reason != schemas.MaxDeliveryAttemptsExceeded || e.AttemptsMade != 2 || e.MaxDeliveryAttempts != 2 {
			t.Fatalf("state %s (%s) after %d of %d deliveries: want Dropped (MaxDeliveryAttemptsExceeded) after 2 of 2", e.State, e.Reason, e.AttemptsMade, e.MaxDeliveryAttempts)
		}
		if !e.PublishTime.Equal(published) {
			t.Fatalf("published %s, want %s", e.PublishTime, published)
		}
		if got, want := steps(e), []string{"Received 1", "Released 1", "Received 2", "Released 2"}; !slices.Equal(got, want) {
			t.Fatalf("steps %q, want %q (%+v)", got, want, e.Attempts)
		}
		for i, r := range []int{0, 2} {
			a := e.Attempts[r]
			if !a.Time.Equal(receipts[i]) || !a.LockedUntil.Equal(receipts[i].Add(time.Minute)) || a.Decision != "" {
				t.Fatalf("receipt %d: %+v; want at %s, locked until a minute later, no decision", i+1, a, receipts[i])
			}
			if want := fmt.Sprintf("received (delivery %d of 2), locked until ", i+1); !strings.HasPrefix(a.Explanation, want) {
				t.Fatalf("receipt %d explained %q, want it to begin %q", i+1, a.Explanation, want)
			}
		}
		if a := e.Attempts[1]; a.Decision != "" || a.Explanation != "released" {
			t.Fatalf("first release %+v: want released, no decision", a)
		}
		last := e.Attempts[3]
		if last.Decision != "Drop" || last.Rule != "MaxAttempts" || last.Explanation != "released: attempt 2 of maxDeliveryAttempts 2 → Drop (MaxDeliveryAttemptsExceeded)" {
			t.Fatalf("second release %+v: want the drop by the MaxAttempts rule", last)
		}
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`"state":"Dropped"`, `"step":"Received"`, `"lockedUntil":`, `"step":"Released"`, `"reason":"MaxDeliveryAttemptsExceeded"`} {
			if !strings.Contains(string(b), want) {
				t.Fatalf("JSON %s lacks %s", b, want)
			}
		}
	})
}

// While a received event is locked its history says so; once acknowledged, it is delivered.
func TestExplainPullAcknowledged(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.SubscribeQueue(pullTopic, pullSub, router.QueueInfo{})
		h.Publish(pullTopic, h.CloudEvent(testkit.ID("a")))
		evs := h.Receive(pullTopic, pullSub, 1)
		e := explain(t, h, pullTopic, pullSub, "a")
		if e.State != router.EventLocked || e.AttemptsLeft != 9 || e.TimeToLiveLeft != 24*time.Hour || !slices.Equal(steps(e), []string{"Received 1"}) {
			t.Fatalf("received: state %s, %d attempts and %s left, steps %q; want Locked, 9, 24h, [Received 1]", e.State, e.AttemptsLeft, e.TimeToLiveLeft, steps(e))
		}
		h.Advance(5 * time.Second)
		h.Acknowledge(pullTopic, pullSub, evs[0].LockToken)
		e = explain(t, h, pullTopic, pullSub, "a")
		if e.State != router.EventDelivered || e.AttemptsMade != 1 || e.AttemptsLeft != 0 || !slices.Equal(steps(e), []string{"Received 1", "Acknowledged 1"}) {
			t.Fatalf("acknowledged: state %s after %d deliveries (%d left), steps %q; want Delivered after 1, [Received 1 Acknowledged 1]", e.State, e.AttemptsMade, e.AttemptsLeft, steps(e))
		}
		if a := e.Attempts[1]; a.Explanation != "acknowledged" || a.Decision != "" || !a.Time.Equal(e.Attempts[0].Time.Add(5*time.Second)) {
			t.Fatalf("acknowledgement %+v: want acknowledged 5 s after the receipt", a)
		}
	})
}

// A release with a delay, a renewed lock, an expired one and a rejection each show as a step.
func TestExplainPullLockAndReject(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.SubscribeQueue(pullTopic, pullSub, router.QueueInfo{})
		h.Publish(pullTopic, h.CloudEvent(testkit.ID("b")))
		evs := h.Receive(pullTopic, pullSub, 1)
		released := time.Now()
		h.Release(pullTopic, pullSub, time.Minute, evs[0].LockToken)
		e := explain(t, h, pullTopic, pullSub, "b")
		if due := released.Add(time.Minute); e.State != router.EventAvailable || !e.NextAttempt.Equal(due) || !e.Attempts[1].Due.Equal(due) {
			t.Fatalf("released for a minute: state %s, next %s, step %+v; want Available from %s", e.State, e.NextAttempt, e.Attempts[1], due)
		}
		h.Advance(time.Minute)
		evs = h.Receive(pullTopic, pullSub, 1)
		h.Advance(30 * time.Second)
		renewed := time.Now()
		h.RenewLock(pullTopic, pullSub, evs[0].LockToken)
		h.Advance(61 * time.Second) // the renewed lock expires
		evs = h.Receive(pullTopic, pullSub, 1)
		h.Reject(pullTopic, pullSub, evs[0].LockToken)
		e = explain(t, h, pullTopic, pullSub, "b")
		want := []string{"Received 1", "Released 1", "Received 2", "LockRenewed 2", "LockExpired 2", "Received 3", "Rejected 3"}
		if !slices.Equal(steps(e), want) {
			t.Fatalf("steps %q, want %q", steps(e), want)
		}
		if a := e.Attempts[3]; !a.LockedUntil.Equal(renewed.Add(time.Minute)) {
			t.Fatalf("renewal %+v: want locked until %s", a, renewed.Add(time.Minute))
		}
		if e.State != router.EventDeadLettered || e.Reason != schemas.RejectedBySubscriber || e.Attempts[6].Decision != "DeadLetter" {
			t.Fatalf("state %s (%s), last step %+v: want DeadLettered (RejectedBySubscriber)", e.State, e.Reason, e.Attempts[6])
		}
	})
}

// A lock ended by the queue's actor stopping — the subscription updated, or the router
// restarted — is a step of the event's history: "LockLost" between the receipt it ended and
// the next. The history read "Received 1 … locked until …" then "Received 2" with nothing
// between, as if the consumer had held the lock and the event had been handed out again
// under it.
func TestExplainPullLockLostToAStop(t *testing.T) {
	for _, how := range []string{"update", "restart"} {
		t.Run(how, func(t *testing.T) {
			testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
				h.SubscribeQueue("ns1", "que", router.QueueInfo{})
				h.Publish("ns1", h.CloudEvent(testkit.ID("e1")))
				if evs := h.Receive("ns1", "que", 1); len(evs) != 1 {
					t.Fatalf("received %d events, want e1", len(evs))
				}
				h.Advance(time.Second)
				switch how {
				case "update":
					h.Subscribe("ns1", "que", testkit.QueueSubscription(router.QueueInfo{MaxDeliveryCount: 5}))
				case "restart":
					h.Restart()
				}
				h.Settle()
				if evs := h.Receive("ns1", "que", 1); len(evs) != 1 || evs[0].DeliveryCount != 2 {
					t.Fatalf("received %+v after the %s, want e1 again, delivery 2", evs, how)
				}
				h.Settle()
				e := explain(t, h, "ns1", "que", "e1")
				if got, want := steps(e), []string{"Received 1", "LockLost 1", "Received 2"}; !slices.Equal(got, want) {
					t.Fatalf("steps %q, want %q (%+v)", got, want, e.Attempts)
				}
				if a := e.Attempts[1]; !strings.Contains(a.Explanation, "lock lost unsettled") || a.Decision != "" {
					t.Fatalf("lost lock explained %+v: want it to say the lock was lost unsettled, no decision", a)
				}
			})
		})
	}
}
