package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/testkit"
)

const (
	pullTopic = "orders"
	pullSub   = "workers"
)

// pulledIDs returns the CloudEvent ids of received events, in order.
func pulledIDs(t *testing.T, evs []router.ReceivedEvent) []string {
	t.Helper()
	ids := make([]string, len(evs))
	for i, e := range evs {
		var ce struct {
			ID          string `json:"id"`
			SpecVersion string `json:"specversion"`
		}
		if err := json.Unmarshal(e.Event, &ce); err != nil || ce.SpecVersion != "1.0" {
			t.Fatalf("received event %d is not a structured CloudEvent (%v): %s", i, err, e.Event)
		}
		ids[i] = ce.ID
	}
	return ids
}

func counts(evs []router.ReceivedEvent) []int {
	out := make([]int, len(evs))
	for i, e := range evs {
		out[i] = e.DeliveryCount
	}
	return out
}

func TestPullReceiveAcknowledge(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.SubscribeQueue(pullTopic, pullSub, router.QueueInfo{})
		h.Publish(pullTopic, h.CloudEvent(testkit.ID("a")), h.CloudEvent(testkit.ID("b")), h.CloudEvent(testkit.ID("c")))
		evs := h.Receive(pullTopic, pullSub, 10)
		if got := pulledIDs(t, evs); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("received %v, want [a b c]", got)
		}
		if got := counts(evs); !slices.Equal(got, []int{1, 1, 1}) {
			t.Fatalf("delivery counts %v, want [1 1 1]", got)
		}
		res := h.Acknowledge(pullTopic, pullSub, testkit.LockTokens(evs)...)
		if len(res.Succeeded) != 3 || len(res.Failed) != 0 {
			t.Fatalf("acknowledge = %+v, want 3 succeeded", res)
		}
		// Acknowledged events are gone: not even a lock expiry brings them back.
		h.Advance(5 * time.Minute)
		if evs := h.Receive(pullTopic, pullSub, 10); len(evs) != 0 {
			t.Fatalf("received %v after acknowledging everything, want nothing", pulledIDs(t, evs))
		}
		m := h.Metrics()
		scope := metrics.SubscriptionScope(pullTopic, pullSub)
		if got := m[metrics.Key{Name: metrics.SuccessfulReceivedEvents, Scope: scope}]; got != 3 {
			t.Errorf("SuccessfulReceivedEvents = %d, want 3", got)
		}
		if got := m[metrics.Key{Name: metrics.SuccessfulAcknowledgedEvents, Scope: scope}]; got != 3 {
			t.Errorf("SuccessfulAcknowledgedEvents = %d, want 3", got)
		}
		h.DeadLetters(pullSub).RequireNone(t)
	})
}

func TestPullLongPollAnswersWhenAnEventArrives(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.SubscribeQueue(pullTopic, pullSub, router.QueueInfo{})
		type result struct {
			evs []router.ReceivedEvent
			at  time.Duration
		}
		done := make(chan result, 1)
		go func() {
			evs, err := h.Router().Receive(context.Background(), pullTopic, pullSub, router.ReceiveOptions{MaxEvents: 5, MaxWait: 2 * time.Minute})
			if err != nil {
				t.Errorf("receive: %v", err)
			}
			done <- result{evs, h.Elapsed()}
		}()
		h.Advance(30 * time.Second)
		select {
		case r := <-done:
			t.Fatalf("receive answered %d events before anything was published", len(r.evs))
		default:
		}
		h.Publish(pullTopic, h.CloudEvent(testkit.ID("late")))
		h.Settle()
		r := <-done
		if got := pulledIDs(t, r.evs); !slices.Equal(got, []string{"late"}) || r.at != 30*time.Second {
			t.Fatalf("receive answered %v at +%v, want [late] at +30s", got, r.at)
		}
	})
}

func TestPullLongPollEmptyAfterMaxWaitAndCancel(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.SubscribeQueue(pullTopic, pullSub, router.QueueInfo{})
		start := h.Elapsed()
		if evs := h.ReceiveWait(pullTopic, pullSub, 1, 20*time.Second); len(evs) != 0 {
			t.Fatalf("received %d events from an empty queue", len(evs))
		}
		if waited := h.Elapsed() - start; waited != 20*time.Second {
			t.Fatalf("an empty receive answered after %v, want its maxWait 20s", waited)
		}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := h.Router().Receive(ctx, pullTopic, pullSub, router.ReceiveOptions{MaxWait: time.Minute})
			errc <- err
		}()
		h.Advance(5 * time.Second)
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled receive = %v, want context.Canceled", err)
		}
		// The cancelled receiver took nothing: the next event goes to the next receiver.
		h.Publish(pullTopic, h.CloudEvent(testkit.ID("x")))
		if got := pulledIDs(t, h.Receive(pullTopic, pullSub, 1)); !slices.Equal(got, []string{"x"}) {
			t.Fatalf("received %v, want [x]", got)
		}
	})
}

func TestPullLockExpiryRedeliversWithDeliveryCountPlusOne(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.SubscribeQueue(pullTopic, pullSub, router.QueueInfo{ReceiveLockDurationInSeconds: 120})
		h.Publish(pullTopic, h.CloudEvent(testkit.ID("e1")))
		first := h.Receive(pullTopic, pullSub, 1)
		if got := counts(first); !slices.Equal(got, []int{1}) {
			t.Fatalf("first receipt counts %v, want [1]", got)
		}
		// Locked: invisible until the lock expires (the receive waits out its 10 s).
		h.Advance(100 * time.Second)
		if evs := h.Receive(pullTopic, pullSub, 1); len(evs) != 0 {
			t.Fatalf("a locked event was received again after %v", h.Elapsed())
		}
		h.Advance(11 * time.Second) // lock (120 s) expired
		again := h.Receive(pullTopic, pullSub, 1)
		if got := counts(again); !slices.Equal(got, []int{2}) || pulledIDs(t, again)[0] != "e1" {
			t.Fatalf("after lock expiry received counts %v, want e1 with deliveryCount 2", got)
		}
		if again[0].LockToken == first[0].LockToken {
			t.Fatal("the new lock has the expired lock's token")
		}
		res := h.Acknowledge(pullTopic, pullSub, first[0].LockToken)
		if len(res.Succeeded) != 0 || len(res.Failed) != 1 || res.Failed[0].Code != router.CodeTokenLost || res.Failed[0].Message != "Token has expired." {
			t.Fatalf("acknowledging with the expired token = %+v, want TokenLost \"Token has expired.\"", res)
		}
		if res := h.Acknowledge(pullTopic, pullSub, again[0].LockToken); len(res.Succeeded) != 1 {
			t.Fatalf("acknowledging with the live token = %+v", res)
		}
	})
}

func TestPullMaxDeliveryCountDeadLetters(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.SubscribeQueue(pullTopic, pullSub, router.QueueInfo{MaxDeliveryCount: 2})
		h.Publish(pullTopic, h.CloudEvent(testkit.ID("poison")))
		for want := 1; want <= 2; want++ {
			evs := h.Receive(pullTopic, pullSub, 1)
			if got := counts(evs); !slices.Equal(got, []int{want}) {
				t.Fatalf("receipt %d: counts %v", want, got)
			}
			h.Advance(61 * time.Second) // let the 60 s lock expire
		}
		if evs := h.Receive(pullTopic, pullSub, 1); len(evs) != 0 {
			t.Fatalf("received the event a third time with maxDeliveryCount 2 (count %v)", counts(evs))
		}
		recs := h.DeadLetters(pullSub).Records()
		if len(recs) != 1 || recs[0].Event.ID != "poison" || recs[0].Reason != schemas.MaxDeliveryAttemptsExceeded || recs[0].DeliveryAttempts != 2 {
			t.Fatalf("dead letters %+v, want poison with MaxDeliveryAttemptsExceeded after 2 deliveries", recs)
		}
	})
}

func TestPullReleaseDelay(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.SubscribeQueue(pullTopic, pullSub, router.QueueInfo{ReceiveLockDurationInSeconds: 300})
		h.Publish(pullTopic, h.CloudEvent(testkit.ID("now")), h.CloudEvent(testkit.ID("later")))
		evs := h.Receive(pullTopic, pullSub, 2)
		if res := h.Release(pullTopic, pullSub, 0, evs[0].LockToken); len(res.Succeeded) != 1 {
			t.Fatalf("release = %+v", res)
		}
		if res := h.Release(pullTopic, pullSub, time.Minute, evs[1].LockToken); len(res.Succeeded) != 1 {
			t.Fatalf("release = %+v", res)
		}
		got := h.Receive(pullTopic, pullSub, 2)
		if ids := pulledIDs(t, got); !slices.Equal(ids, []string{"now"}) || got[0].DeliveryCount != 2 {
			t.Fatalf("after releases received %v counts %v, want [now] with count 2", ids, counts(got))
		}
		h.Advance(45 * time.Second) // 10 s receive + 45 s: the minute is not over
		if evs := h.Receive(pullTopic, pullSub, 1); len(evs) != 0 {
			t.Fatalf("an event released for 1 minute came back after %v", h.Elapsed())
		}
		got = h.Receive(pullTopic, pullSub, 1)
		if ids := pulledIDs(t, got); !slices.Equal(ids, []string{"later"}) || got[0].DeliveryCount != 2 {
			t.Fatalf("after the release delay received %v counts %v, want [later] with count 2", ids, counts(got))
		}
		if _, err := h.Router().Release(context.Background(), pullTopic, pullSub, []string{got[0].LockToken}, 30*time.Second); err == nil || !strings.Contains(err.Error(), "0, 10, 60, 600 or 3600") {
			t.Fatalf("release with a 30 s delay = %v, want an error listing the allowed delays", err)
		}
	})
}

func TestPullRenewLockLimit(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.SubscribeQueue(pullTopic, pullSub, router.QueueInfo{ReceiveLockDurationInSeconds: 300})
		h.Publish(pullTopic, h.CloudEvent(testkit.ID("long")))
		evs := h.Receive(pullTopic, pullSub, 1)
		tok := evs[0].LockToken
		// Renewing every 4 minutes keeps the lock for the whole hour.
		for h.Elapsed() < 56*time.Minute {
			h.Advance(4 * time.Minute)
			if res := h.RenewLock(pullTopic, pullSub, tok); len(res.Succeeded) != 1 {
				t.Fatalf("renewal at +%v = %+v, want success", h.Elapsed(), res)
			}
		}
		if evs := h.Receive(pullTopic, pullSub, 1); len(evs) != 0 {
			t.Fatal("a renewed lock's event was received by someone else")
		}
		h.Advance(4 * time.Minute) // past an hour since the receipt
		res := h.RenewLock(pullTopic, pullSub, tok)
		if len(res.Failed) != 1 || res.Failed[0].Code != router.CodeTokenLost || !strings.Contains(res.Failed[0].Message, "1 hour") {
			t.Fatalf("renewal more than an hour after receipt = %+v, want TokenLost naming the hour", res)
		}
		// The last renewal's lock still runs out, then the event comes back.
		h.Advance(5 * time.Minute)
		if got := counts(h.Receive(pullTopic, pullSub, 1)); !slices.Equal(got, []int{2}) {
			t.Fatalf("after the lock ran out received counts %v, want [2]", got)
		}
	})
}

func TestPullReject(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.SubscribeQueue(pullTopic, pullSub, router.QueueInfo{})
		h.Publish(pullTopic, h.CloudEvent(testkit.ID("bad")))
		evs := h.Receive(pullTopic, pullSub, 1)
		if res := h.Reject(pullTopic, pullSub, evs[0].LockToken); len(res.Succeeded) != 1 {
			t.Fatalf("reject = %+v", res)
		}
		recs := h.DeadLetters(pullSub).Records()
		if len(recs) != 1 || recs[0].Reason != schemas.RejectedBySubscriber || recs[0].DeliveryAttempts != 1 {
			t.Fatalf("dead letters %+v, want bad rejected after 1 delivery", recs)
		}
		h.Advance(2 * time.Minute)
		if evs := h.Receive(pullTopic, pullSub, 1); len(evs) != 0 {
			t.Fatal("a rejected event was received again")
		}
	})
}

func TestPullTimeToLiveEndsWaitingEvents(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.SubscribeQueue(pullTopic, pullSub, router.QueueInfo{EventTimeToLive: "PT5M"})
		h.Publish(pullTopic, h.CloudEvent(testkit.ID("stale")))
		h.Advance(5 * time.Minute)
		if evs := h.Receive(pullTopic, pullSub, 1); len(evs) != 0 {
			t.Fatal("an event past its time to live was received")
		}
		recs := h.DeadLetters(pullSub).Records()
		if len(recs) != 1 || recs[0].Reason != schemas.TimeToLiveExceeded || recs[0].DeliveryAttempts != 0 {
			t.Fatalf("dead letters %+v, want stale with TimeToLiveExceeded and no delivery", recs)
		}
	})
}

func TestPullPerTokenFailures(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.SubscribeQueue(pullTopic, pullSub, router.QueueInfo{})
		h.SubscribeQueue(pullTopic, "others", router.QueueInfo{})
		h.Publish(pullTopic, h.CloudEvent(testkit.ID("a")), h.CloudEvent(testkit.ID("b")))
		mine := h.Receive(pullTopic, pullSub, 2)
		theirs := h.Receive(pullTopic, "others", 1)
		done := mine[1].LockToken
		h.Acknowledge(pullTopic, pullSub, done)
		res := h.Acknowledge(pullTopic, pullSub, mine[0].LockToken, "not-a-token", theirs[0].LockToken, done)
		if !slices.Equal(res.Succeeded, []string{mine[0].LockToken}) {
			t.Fatalf("succeeded %v, want only the live token", res.Succeeded)
		}
		want := []struct{ tok, code string }{
			{"not-a-token", router.CodeBadToken}, {theirs[0].LockToken, router.CodeBadToken}, {done, router.CodeTokenLost},
		}
		if len(res.Failed) != len(want) {
			t.Fatalf("failed %+v, want %d", res.Failed, len(want))
		}
		for i, w := range want {
			if f := res.Failed[i]; f.LockToken != w.tok || f.Code != w.code || f.Message == "" {
				t.Errorf("failed[%d] = %+v, want %s for %q", i, f, w.code, w.tok)
			}
		}
		// The foreign token still works where it belongs.
		if res := h.Acknowledge(pullTopic, "others", theirs[0].LockToken); len(res.Succeeded) != 1 {
			t.Fatalf("acknowledging on its own subscription = %+v", res)
		}
		m := h.Metrics()
		if got := m[metrics.Key{Name: metrics.FailedAcknowledgedEvents, Scope: metrics.SubscriptionScope(pullTopic, pullSub), Dim: router.CodeBadToken}]; got != 2 {
			t.Errorf("FailedAcknowledgedEvents{BadToken} = %d, want 2", got)
		}
	})
}

// TestPullOverlongTokenIsBadToken: a lock token longer than any egrid makes is answered
// BadToken, and the queue keeps the locks it holds. Decoding such a token into the token's
// fixed buffer panicked in the queue actor: it restarted, every lock of the queue was lost
// (their tokens answered TokenLost, the events came back with their delivery count raised),
// and the call waited 30 s for an answer that never came and was answered 503.
func TestPullOverlongTokenIsBadToken(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.SubscribeQueue(pullTopic, pullSub, router.QueueInfo{})
		h.Publish(pullTopic, h.CloudEvent(testkit.ID("a")))
		evs := h.Receive(pullTopic, pullSub, 1)
		if len(evs) != 1 {
			t.Fatalf("received %d events, want 1", len(evs))
		}
		long := []string{evs[0].LockToken + "AAAA", strings.Repeat("A", 100), strings.Repeat("A", 64<<10)}
		for _, op := range []string{"acknowledge", "release", "reject", "renewLock"} {
			var res router.SettleResult
			var err error
			ctx := context.Background()
			switch op {
			case "acknowledge":
				res, err = h.Router().Acknowledge(ctx, pullTopic, pullSub, long)
			case "release":
				res, err = h.Router().Release(ctx, pullTopic, pullSub, long, 0)
			case "reject":
				res, err = h.Router().Reject(ctx, pullTopic, pullSub, long)
			case "renewLock":
				res, err = h.Router().RenewLock(ctx, pullTopic, pullSub, long)
			}
			if err != nil {
				t.Fatalf("%s with over-long tokens: %v, want a BadToken answer per token", op, err)
			}
			if len(res.Succeeded) != 0 || len(res.Failed) != len(long) {
				t.Fatalf("%s with over-long tokens = %+v, want %d failures", op, res, len(long))
			}
			for i, f := range res.Failed {
				if f.Code != router.CodeBadToken {
					t.Errorf("%s: failed[%d] code %s, want %s", op, i, f.Code, router.CodeBadToken)
				}
			}
		}
		if res := h.Acknowledge(pullTopic, pullSub, evs[0].LockToken); len(res.Succeeded) != 1 {
			t.Fatalf("acknowledging the event's own token afterwards = %+v, want it to succeed: the lock must outlive the bad tokens", res)
		}
	})
}

// TestPullTokenOnlyAsIssued: a lock token settles its event only exactly as receive returned
// it. Its last character carries two bits that are not part of the token; a lenient decode
// ignored them, so three other strings acknowledged the event too.
func TestPullTokenOnlyAsIssued(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.SubscribeQueue(pullTopic, pullSub, router.QueueInfo{})
		h.Publish(pullTopic, h.CloudEvent(testkit.ID("a")))
		evs := h.Receive(pullTopic, pullSub, 1)
		if len(evs) != 1 {
			t.Fatalf("received %d events, want 1", len(evs))
		}
		tok := evs[0].LockToken
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
		last := strings.IndexByte(alphabet, tok[len(tok)-1])
		if last < 0 {
			t.Fatalf("lock token %q does not end in a base64url character", tok)
		}
		var others []string
		for pad := 1; pad < 4; pad++ { // the same decoded bytes, other padding bits
			others = append(others, tok[:len(tok)-1]+string(alphabet[last^pad]))
		}
		res := h.Acknowledge(pullTopic, pullSub, others...)
		if len(res.Succeeded) != 0 || len(res.Failed) != len(others) {
			t.Fatalf("acknowledging %v (token %q with other padding bits) = %+v, want every one BadToken", others, tok, res)
		}
		for i, f := range res.Failed {
			if f.Code != router.CodeBadToken {
				t.Errorf("failed[%d] = %+v, want %s", i, f, router.CodeBadToken)
			}
		}
		if res := h.Acknowledge(pullTopic, pullSub, tok); len(res.Succeeded) != 1 {
			t.Fatalf("acknowledging the token as issued = %+v, want it to succeed", res)
		}
	})
}

func TestPullAcknowledgeHalfBatchLeavesTheRest(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.SubscribeQueue(pullTopic, pullSub, router.QueueInfo{})
		for _, id := range []string{"e1", "e2", "e3", "e4"} {
			h.Publish(pullTopic, h.CloudEvent(testkit.ID(id)))
		}
		evs := h.Receive(pullTopic, pullSub, 4)
		if len(evs) != 4 {
			t.Fatalf("received %d, want 4", len(evs))
		}
		h.Acknowledge(pullTopic, pullSub, evs[0].LockToken, evs[2].LockToken)
		h.Advance(61 * time.Second)
		again := h.Receive(pullTopic, pullSub, 10)
		if ids := pulledIDs(t, again); !slices.Equal(ids, []string{"e2", "e4"}) || !slices.Equal(counts(again), []int{2, 2}) {
			t.Fatalf("after the lock expired received %v counts %v, want [e2 e4] with count 2", ids, counts(again))
		}
	})
}

func TestPullArgumentErrors(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.SubscribeQueue(pullTopic, pullSub, router.QueueInfo{})
		ctx, r := context.Background(), h.Router()
		for _, o := range []router.ReceiveOptions{{MaxEvents: 101}, {MaxEvents: -1}, {MaxWait: 5 * time.Second}, {MaxWait: 121 * time.Second}} {
			if _, err := r.Receive(ctx, pullTopic, pullSub, o); err == nil || !strings.Contains(err.Error(), "use ") {
				t.Errorf("receive %+v = %v, want an error saying what is allowed", o, err)
			}
		}
		if _, err := r.Acknowledge(ctx, pullTopic, pullSub, nil); err == nil || !strings.Contains(err.Error(), "empty") {
			t.Errorf("acknowledge with no tokens = %v", err)
		}
		if _, err := r.Acknowledge(ctx, pullTopic, pullSub, make([]string, 101)); err == nil || !strings.Contains(err.Error(), "at most 100") {
			t.Errorf("acknowledge with 101 tokens = %v", err)
		}
		h.CreateSubscription("pushed", "hook", h.Endpoint("hook"), router.RetryPolicy{})
		if _, err := r.Receive(ctx, "pushed", "hook", router.ReceiveOptions{}); !errors.Is(err, router.ErrNotQueueSubscription) {
			t.Errorf("receive on a push subscription = %v, want ErrNotQueueSubscription", err)
		}
		if _, err := r.Reject(ctx, "pushed", "hook", []string{"x"}); !errors.Is(err, router.ErrNotQueueSubscription) {
			t.Errorf("reject on a push subscription = %v, want ErrNotQueueSubscription", err)
		}
	})
}

func TestPullRestartKeepsDeliveryCountsAndAcknowledgements(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.SubscribeQueue(pullTopic, pullSub, router.QueueInfo{ReceiveLockDurationInSeconds: 300})
		h.Publish(pullTopic, h.CloudEvent(testkit.ID("acked")), h.CloudEvent(testkit.ID("held")), h.CloudEvent(testkit.ID("delayed")))
		evs := h.Receive(pullTopic, pullSub, 3)
		h.Acknowledge(pullTopic, pullSub, evs[0].LockToken)
		h.Release(pullTopic, pullSub, 10*time.Minute, evs[2].LockToken)
		h.Restart()
		// The lock died with the process: the held event is available at once, its count kept.
		got := h.Receive(pullTopic, pullSub, 10)
		if ids := pulledIDs(t, got); !slices.Equal(ids, []string{"held"}) || !slices.Equal(counts(got), []int{2}) {
			t.Fatalf("after a restart received %v counts %v, want [held] with count 2", ids, counts(got))
		}
		if res := h.Acknowledge(pullTopic, pullSub, evs[1].LockToken); len(res.Failed) != 1 || res.Failed[0].Code != router.CodeTokenLost {
			t.Fatalf("a token from before the restart = %+v, want TokenLost", res)
		}
		h.Acknowledge(pullTopic, pullSub, got[0].LockToken)
		h.Advance(10 * time.Minute) // the release delay
		got = h.Receive(pullTopic, pullSub, 10)
		if ids := pulledIDs(t, got); !slices.Equal(ids, []string{"delayed"}) || !slices.Equal(counts(got), []int{2}) {
			t.Fatalf("after the release delay received %v counts %v, want [delayed] with count 2", ids, counts(got))
		}
	})
}

func TestQueueSubscriptionSpecValidation(t *testing.T) {
	queue := func(q *router.QueueInfo) router.SubscriptionSpec {
		return router.SubscriptionSpec{DeliveryConfiguration: &router.DeliveryConfiguration{DeliveryMode: "queue", Queue: q}}
	}
	tests := []struct {
		name  string
		topic string // "nstopic" or "custom"
		spec  router.SubscriptionSpec
		want  []string // substrings of the error, each required; none: accepted
	}{
		{name: "defaults", topic: "nstopic", spec: queue(nil)},
		{name: "all set", topic: "nstopic", spec: queue(&router.QueueInfo{ReceiveLockDurationInSeconds: 300, MaxDeliveryCount: 1, EventTimeToLive: "P0DT23H12M"})},
		{name: "seven days", topic: "nstopic", spec: queue(&router.QueueInfo{EventTimeToLive: "P7D"})},
		{name: "out of range, every problem at once", topic: "nstopic",
			spec: queue(&router.QueueInfo{ReceiveLockDurationInSeconds: 59, MaxDeliveryCount: 11, EventTimeToLive: "P8D"}),
			want: []string{"receiveLockDurationInSeconds 59 is out of range: use 60-300", "maxDeliveryCount 11 is out of range: use 1-10", `eventTimeToLive "P8D" is out of range: use PT1M to P7D`}},
		{name: "not ISO 8601", topic: "nstopic", spec: queue(&router.QueueInfo{EventTimeToLive: "1 day"}),
			want: []string{`deliveryConfiguration.queue.eventTimeToLive: "1 day" is not an ISO 8601 duration`}},
		{name: "seconds", topic: "nstopic", spec: queue(&router.QueueInfo{EventTimeToLive: "PT90S"}), want: []string{"not whole minutes"}},
		{name: "a destination", topic: "nstopic",
			spec: func() router.SubscriptionSpec {
				s := queue(nil)
				s.Destination = router.WebHook("https://example.com/")
				return s
			}(),
			want: []string{"a queue subscription (deliveryConfiguration.deliveryMode Queue) has no destination"}},
		{name: "a retry policy", topic: "nstopic",
			spec: func() router.SubscriptionSpec {
				s := queue(nil)
				s.RetryPolicy.MaxDeliveryAttempts = 3
				return s
			}(),
			want: []string{"retryPolicy: a queue subscription has none: use deliveryConfiguration.queue.maxDeliveryCount"}},
		{name: "custom topic", topic: "custom", spec: queue(nil), want: []string{"deliveryConfiguration: applies to namespace topics only"}},
		{name: "unknown mode", topic: "nstopic", spec: router.SubscriptionSpec{Destination: router.WebHook("https://example.com/"),
			DeliveryConfiguration: &router.DeliveryConfiguration{DeliveryMode: "Pull"}}, want: []string{`deliveryMode "Pull" is not supported: use Push or Queue`}},
		{name: "queue settings on push", topic: "nstopic", spec: router.SubscriptionSpec{Destination: router.WebHook("https://example.com/"),
			DeliveryConfiguration: &router.DeliveryConfiguration{DeliveryMode: "Push", Queue: &router.QueueInfo{}}}, want: []string{"deliveryConfiguration.queue: applies to deliveryMode Queue only"}},
		{name: "explicit push", topic: "nstopic", spec: router.SubscriptionSpec{Destination: router.WebHook("https://example.com/"),
			DeliveryConfiguration: &router.DeliveryConfiguration{DeliveryMode: "Push"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
				h.CreateTopic("nstopic", router.TopicSpec{Kind: router.KindNamespace})
				h.CreateTopic("custom")
				err := h.Router().CreateSubscription(context.Background(), tc.topic, "sub", tc.spec)
				if len(tc.want) == 0 {
					if err != nil {
						t.Fatalf("CreateSubscription: %v", err)
					}
					return
				}
				if err == nil {
					t.Fatal("CreateSubscription accepted it")
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
			})
		})
	}
}

// A queue subscription reads and writes Azure's JSON shape.
func TestQueueSubscriptionJSON(t *testing.T) {
	const in = `{"deliveryConfiguration":{"deliveryMode":"Queue","queue":{"receiveLockDurationInSeconds":120,"maxDeliveryCount":5,"eventTimeToLive":"P1D"}}}`
	var spec router.SubscriptionSpec
	if err := json.Unmarshal([]byte(in), &spec); err != nil {
		t.Fatal(err)
	}
	if !spec.IsQueue() || spec.DeliveryConfiguration.Queue.MaxDeliveryCount != 5 || spec.DeliveryConfiguration.Queue.EventTimeToLive != "P1D" {
		t.Fatalf("decoded %+v", spec.DeliveryConfiguration)
	}
	out, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != in {
		t.Fatalf("encoded\n%s\nwant\n%s", out, in)
	}
}

func TestParseISODuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"PT1M": time.Minute, "PT23H12M": 23*time.Hour + 12*time.Minute, "P0DT23H12M": 23*time.Hour + 12*time.Minute,
		"P1D": 24 * time.Hour, "P1DT0H0M0S": 24 * time.Hour, "P1W": 7 * 24 * time.Hour, "pt30m": 30 * time.Minute, "": 0,
	} {
		if got, err := router.ParseISODuration(in); err != nil || got != want {
			t.Errorf("ParseISODuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"P", "PT", "1D", "P1M", "P1Y", "PT1D", "P1H", "PTM", "P1DT", "P1DT1H1X", "P99999999999D", "PT1M1M", "PT1S1M", "P1DT1M1H", "P1D1W"} {
		if _, err := router.ParseISODuration(in); err == nil || !strings.Contains(err.Error(), "ISO 8601") {
			t.Errorf("ParseISODuration(%q) = %v, want an ISO 8601 error", in, err)
		}
	}
}

// A rejected event is written to the dead-letter bucket in the namespace record shape, with
// its delivery count and the reason's text.
func TestPullRejectWritesNamespaceDeadLetter(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.SubscribeQueue(pullTopic, pullSub, router.QueueInfo{})
		h.Publish(pullTopic, h.CloudEvent(testkit.ID("bad")))
		first := h.Receive(pullTopic, pullSub, 1)
		h.Release(pullTopic, pullSub, 0, first[0].LockToken)
		again := h.Receive(pullTopic, pullSub, 1)
		h.Reject(pullTopic, pullSub, again[0].LockToken)
		h.Advance(6 * time.Minute) // the dead-letter delay
		objs := h.DeadLetterObjects().Objects("deadletters")
		if len(objs) != 1 {
			t.Fatalf("%d dead-letter objects, want 1", len(objs))
		}
		body, _, err := h.DeadLetterObjects().Get(context.Background(), "deadletters", objs[0].Key, 0)
		if err != nil {
			t.Fatal(err)
		}
		var recs []struct {
			Props struct {
				Reason   string `json:"deadletterreason"`
				Attempts int    `json:"deliveryattempts"`
			} `json:"deadLetterProperties"`
			Event struct{ ID string } `json:"event"`
		}
		if err := json.Unmarshal(body, &recs); err != nil {
			t.Fatalf("dead-letter object %s: %v", body, err)
		}
		if len(recs) != 1 || recs[0].Event.ID != "bad" || recs[0].Props.Attempts != 2 || recs[0].Props.Reason != "Event was rejected by the subscriber." {
			t.Fatalf("dead-letter object %s, want bad rejected after 2 deliveries", body)
		}
	})
}

// The subscription's filter decides what reaches the queue.
func TestPullQueueFilters(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.CreateTopic(pullTopic, router.TopicSpec{Kind: router.KindNamespace})
		spec := testkit.QueueSubscription(router.QueueInfo{})
		spec.Filter.IncludedEventTypes = []string{"Order.Created"}
		h.Subscribe(pullTopic, pullSub, spec)
		h.Publish(pullTopic, h.CloudEvent(testkit.ID("c1"), testkit.Type("Order.Created")), h.CloudEvent(testkit.ID("d1"), testkit.Type("Order.Deleted")))
		if got := pulledIDs(t, h.Receive(pullTopic, pullSub, 10)); !slices.Equal(got, []string{"c1"}) {
			t.Fatalf("received %v, want [c1]", got)
		}
	})
}

// A release delay never outlives the event: released past its time to live, the event ends at
// its deadline.
func TestPullReleaseBoundedByTimeToLive(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.SubscribeQueue(pullTopic, pullSub, router.QueueInfo{EventTimeToLive: "PT5M"})
		h.Publish(pullTopic, h.CloudEvent(testkit.ID("short")))
		evs := h.Receive(pullTopic, pullSub, 1)
		h.Release(pullTopic, pullSub, time.Hour, evs[0].LockToken)
		h.Advance(5*time.Minute - h.Elapsed() - time.Second)
		h.DeadLetters(pullSub).RequireNone(t)
		h.Advance(time.Second)
		recs := h.DeadLetters(pullSub).Records()
		if len(recs) != 1 || recs[0].Reason != schemas.TimeToLiveExceeded || recs[0].DeliveryAttempts != 1 || h.Elapsed() != 5*time.Minute {
			t.Fatalf("at +%v dead letters %+v, want short ended by its time to live at +5m after 1 delivery", h.Elapsed(), recs)
		}
	})
}

// A queue subscription's status counts its locked events as in flight and the rest of its
// backlog.
func TestPullStatus(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.SubscribeQueue(pullTopic, pullSub, router.QueueInfo{})
		h.Publish(pullTopic, h.CloudEvent(), h.CloudEvent(), h.CloudEvent())
		h.Receive(pullTopic, pullSub, 2)
		st, err := h.Router().Status(context.Background(), pullTopic, pullSub)
		if err != nil {
			t.Fatal(err)
		}
		if st.Backlog != 3 || st.InFlight != 2 || st.Cursor != 2 {
			t.Fatalf("status %+v, want backlog 3, 2 in flight, cursor 2", st)
		}
	})
}
