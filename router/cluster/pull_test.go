package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/httpserver"
)

// Pull delivery in cluster mode: a queue subscription's actor runs on one node, and every
// node answers its receive and settle calls by asking that node.

// queueSetup creates namespace topic jobs with queue subscription workers on nodes[0] and
// returns the node running it and the others.
func queueSetup(t *testing.T, nodes ...*node) (owner *node, others []*node) {
	t.Helper()
	ctx := t.Context()
	if _, err := nodes[0].r.CreateTopic(ctx, "jobs", router.TopicSpec{Kind: router.KindNamespace}); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	spec := router.SubscriptionSpec{DeliveryConfiguration: &router.DeliveryConfiguration{DeliveryMode: router.DeliveryModeQueue}}
	if err := nodes[0].r.CreateSubscription(ctx, "jobs", "workers", spec); err != nil {
		t.Fatalf("CreateSubscription: %v", err)
	}
	eventually(t, 30*time.Second, "workers known everywhere and placed on one node", func() bool {
		for _, n := range nodes {
			if _, err := n.r.Subscription("jobs", "workers"); err != nil {
				return false
			}
		}
		return len(runners("jobs", "workers", nodes...)) == 1
	})
	run := runners("jobs", "workers", nodes...)[0]
	for _, n := range nodes {
		if n.name == run {
			owner = n
		} else {
			others = append(others, n)
		}
	}
	return owner, others
}

func publishCE(t *testing.T, r *router.Router, ids ...string) {
	t.Helper()
	var evs []any
	for _, id := range ids {
		evs = append(evs, json.RawMessage(fmt.Sprintf(`{"specversion":"1.0","id":%q,"source":"/jobs","type":"Job.Created","data":{"n":1}}`, id)))
	}
	if err := r.Publish(t.Context(), "jobs", evs...); err != nil {
		t.Fatalf("Publish: %v", err)
	}
}

func eventID(t *testing.T, e router.ReceivedEvent) string {
	t.Helper()
	var ce struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(e.Event, &ce); err != nil {
		t.Fatalf("received event %s: %v", e.Event, err)
	}
	return ce.ID
}

// receive receives through n, retrying while the subscription moves (ErrNotPlaced).
func receive(t *testing.T, ctx context.Context, n *node, maxEvents int) []router.ReceivedEvent {
	t.Helper()
	for range 100 {
		evs, err := n.r.Receive(ctx, "jobs", "workers", router.ReceiveOptions{MaxEvents: maxEvents, MaxWait: router.MinReceiveWait})
		if errors.Is(err, router.ErrNotPlaced) {
			<-time.After(50 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("Receive through %s: %v", n.name, err)
		}
		return evs
	}
	t.Fatalf("Receive through %s: the subscription stayed unplaced", n.name)
	return nil
}

// receiveID receives through n until event id comes (at most a few long polls) and returns it.
func receiveID(t *testing.T, n *node, id string) router.ReceivedEvent {
	t.Helper()
	for range 5 {
		for _, e := range receive(t, t.Context(), n, 10) {
			if eventID(t, e) == id {
				return e
			}
			t.Fatalf("received %s through %s, want %s", eventID(t, e), n.name, id)
		}
	}
	t.Fatalf("event %s not received through %s", id, n.name)
	return router.ReceivedEvent{}
}

func codes(res router.SettleResult) map[string]string {
	m := map[string]string{}
	for _, s := range res.Succeeded {
		m[s] = "ok"
	}
	for _, f := range res.Failed {
		m[f.LockToken] = f.Code
	}
	return m
}

// A queue subscription running on one node is received from and settled through the others:
// a long poll through one node answers when an event is published on a third; lock tokens
// are settled whichever node the call reaches, bad ones fail per token; a caller that gives
// up (cancel, deadline) stops the owner's wait at once.
func TestPullThroughAnyNode(t *testing.T) {
	c := newCluster(t)
	a, b, d := c.start("a"), c.start("b"), c.start("c")
	owner, others := queueSetup(t, a, b, d)
	x, y := others[0], others[1]
	t.Logf("workers runs on %s; receiving through %s, publishing on %s", owner.name, x.name, y.name)

	// A long poll through x waits for an event published on y.
	got := make(chan []router.ReceivedEvent, 1)
	go func() {
		evs, err := x.r.Receive(t.Context(), "jobs", "workers", router.ReceiveOptions{MaxEvents: 10, MaxWait: router.MaxReceiveWait})
		if err != nil {
			t.Errorf("long poll through %s: %v", x.name, err)
		}
		got <- evs
	}()
	// Publish after a round trip through x, so the poll most likely waits at the owner by
	// then (if not, e1 is there when it arrives); a poll that did not wake up at the publish
	// would answer only after 120 s.
	if _, err := x.r.Status(t.Context(), "jobs", "workers"); err != nil {
		t.Fatalf("Status through %s: %v", x.name, err)
	}
	publishCE(t, y.r, "e1")
	evs := <-got
	if len(evs) != 1 || eventID(t, evs[0]) != "e1" || evs[0].DeliveryCount != 1 {
		t.Fatalf("long poll through %s = %+v, want e1 with deliveryCount 1", x.name, evs)
	}
	tok := evs[0].LockToken

	// Settle through the other non-owner: a good token and bad ones, per token.
	res, err := y.r.Acknowledge(t.Context(), "jobs", "workers", []string{tok, "not-a-token", "AQ"})
	if err != nil {
		t.Fatalf("Acknowledge through %s: %v", y.name, err)
	}
	if m := codes(res); m[tok] != "ok" || m["not-a-token"] != router.CodeBadToken || m["AQ"] != router.CodeBadToken {
		t.Fatalf("Acknowledge through %s = %+v, want %s ok and the others BadToken", y.name, res, tok)
	}
	for _, f := range res.Failed {
		if f.Message == "" {
			t.Errorf("failed token %+v has no message", f)
		}
	}
	// Settled once: again through x, the token is lost.
	res, err = x.r.Acknowledge(t.Context(), "jobs", "workers", []string{tok})
	if err != nil || len(res.Failed) != 1 || res.Failed[0].Code != router.CodeTokenLost {
		t.Fatalf("second Acknowledge through %s = %+v, %v; want TokenLost", x.name, res, err)
	}

	// Renew and release through non-owners; the released event comes back counted.
	publishCE(t, owner.r, "e2")
	e2 := receiveID(t, x, "e2")
	if res, err := y.r.RenewLock(t.Context(), "jobs", "workers", []string{e2.LockToken}); err != nil || len(res.Succeeded) != 1 {
		t.Fatalf("RenewLock through %s = %+v, %v", y.name, res, err)
	}
	if res, err := x.r.Release(t.Context(), "jobs", "workers", []string{e2.LockToken}, 0); err != nil || len(res.Succeeded) != 1 {
		t.Fatalf("Release through %s = %+v, %v", x.name, res, err)
	}
	again := receiveID(t, y, "e2")
	if again.DeliveryCount != 2 {
		t.Fatalf("e2 received again through %s with deliveryCount %d, want 2", y.name, again.DeliveryCount)
	}
	if res, err := owner.r.Reject(t.Context(), "jobs", "workers", []string{again.LockToken}); err != nil || len(res.Succeeded) != 1 {
		t.Fatalf("Reject on the owner of a token received through %s = %+v, %v", y.name, res, err)
	}

	// A caller that gives up, by cancel or by its deadline, stops the owner's wait: the next
	// event goes to the next receiver, untouched (deliveryCount 1), not to the gone one.
	for i, giveUp := range []string{"cancel", "deadline"} {
		ctx, cancel := context.WithCancel(t.Context())
		if giveUp == "deadline" {
			ctx, cancel = context.WithTimeout(t.Context(), 300*time.Millisecond)
		}
		errc := make(chan error, 1)
		go func() {
			_, err := x.r.Receive(ctx, "jobs", "workers", router.ReceiveOptions{MaxWait: router.MaxReceiveWait})
			errc <- err
		}()
		if _, err := x.r.Status(t.Context(), "jobs", "workers"); err != nil { // the poll is at the owner
			t.Fatalf("Status through %s: %v", x.name, err)
		}
		if giveUp == "cancel" {
			cancel()
		}
		if err := <-errc; !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("receive through %s after %s = %v, want the context's error", x.name, giveUp, err)
		}
		cancel()
		// The cancel notice went out on x's connection before this round trip.
		if _, err := x.r.Status(t.Context(), "jobs", "workers"); err != nil {
			t.Fatalf("Status through %s: %v", x.name, err)
		}
		id := fmt.Sprintf("after-%d", i)
		publishCE(t, y.r, id)
		e := receiveID(t, y, id)
		if e.DeliveryCount != 1 {
			t.Fatalf("after a %s through %s, %s came with deliveryCount %d: the owner's wait went on for the gone caller", giveUp, x.name, id, e.DeliveryCount)
		}
		if res, err := x.r.Acknowledge(t.Context(), "jobs", "workers", []string{e.LockToken}); err != nil || len(res.Succeeded) != 1 {
			t.Fatalf("Acknowledge through %s = %+v, %v", x.name, res, err)
		}
	}

	// A push subscription's pull calls through a non-owner are refused as on the owner.
	if err := a.r.CreateSubscription(t.Context(), "jobs", "pushed", router.SubscriptionSpec{Destination: router.SinkDestination("hook")}); err != nil {
		t.Fatalf("CreateSubscription: %v", err)
	}
	for _, n := range []*node{a, b, d} {
		eventually(t, 20*time.Second, "pushed known on "+n.name, func() bool {
			_, err := n.r.Subscription("jobs", "pushed")
			return err == nil
		})
		if _, err := n.r.Acknowledge(t.Context(), "jobs", "pushed", []string{tok}); !errors.Is(err, router.ErrNotQueueSubscription) {
			t.Errorf("Acknowledge on a push subscription through %s = %v, want ErrNotQueueSubscription", n.name, err)
		}
	}
}

// When the node running a queue subscription fails, the tokens it handed out fail with
// TokenLost through any node (locks are in its memory), and the events are received again
// from the new owner, their delivery count kept and raised by the new receipt.
func TestPullFailoverLosesLocksKeepsCounts(t *testing.T) {
	c := newCluster(t)
	a, b := c.start("a"), c.start("b")
	owner, others := queueSetup(t, a, b)
	survivor := others[0]
	publishCE(t, survivor.r, "f1", "f2")
	var evs []router.ReceivedEvent
	for len(evs) < 2 {
		evs = append(evs, receive(t, t.Context(), survivor, 2)...)
	}
	var tokens []string
	for _, e := range evs {
		if e.DeliveryCount != 1 {
			t.Fatalf("first receipt %+v, want deliveryCount 1", e)
		}
		tokens = append(tokens, e.LockToken)
	}

	owner.nc.Close() // the owner is cut off: its leases lapse and the survivor takes over
	eventually(t, 30*time.Second, "workers runs on "+survivor.name, func() bool {
		return survivor.r.RunsSubscription("jobs", "workers")
	})
	// The placement can name the survivor a moment before its topic actor has started the
	// subscription's actor, which then answers ErrNotPlaced (try again): the answer the new
	// owner gives once it runs is what this test is about.
	var res router.SettleResult
	var err error
	eventually(t, 30*time.Second, "the new owner answers Acknowledge", func() bool {
		res, err = survivor.r.Acknowledge(t.Context(), "jobs", "workers", tokens)
		return !errors.Is(err, router.ErrNotPlaced)
	})
	if err != nil {
		t.Fatalf("Acknowledge of the old owner's tokens: %v", err)
	}
	if len(res.Succeeded) != 0 || len(res.Failed) != 2 {
		t.Fatalf("Acknowledge of the old owner's tokens = %+v, want both TokenLost", res)
	}
	for _, f := range res.Failed {
		if f.Code != router.CodeTokenLost {
			t.Errorf("old token %s failed with %s, want TokenLost", f.LockToken, f.Code)
		}
	}
	var again []router.ReceivedEvent
	for len(again) < 2 {
		again = append(again, receive(t, t.Context(), survivor, 2)...)
	}
	var ids []string
	for _, e := range again {
		ids = append(ids, eventID(t, e))
		if e.DeliveryCount != 2 {
			t.Errorf("%s received again from the new owner with deliveryCount %d, want 2 (1 kept + this receipt)", eventID(t, e), e.DeliveryCount)
		}
		if slices.Contains(tokens, e.LockToken) {
			t.Errorf("the new owner handed out an old token again: %s", e.LockToken)
		}
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"f1", "f2"}) {
		t.Fatalf("received again %v, want [f1 f2]", ids)
	}
	tokens = tokens[:0]
	for _, e := range again {
		tokens = append(tokens, e.LockToken)
	}
	if res, err := survivor.r.Acknowledge(t.Context(), "jobs", "workers", tokens); err != nil || len(res.Succeeded) != 2 {
		t.Fatalf("Acknowledge of the new owner's tokens = %+v, %v", res, err)
	}
}

// A long poll routed to the node running the queue subscription takes a slot of that node's
// bound on polls, which the polls it serves itself share: only the node the poll reached
// counted it, so consumers reaching the other nodes could hold any number of polls waiting
// on the owner (each a goroutine, a waiter and up to an answer's events in memory). A routed
// poll over the owner's bound is refused at once, answered 429 by the node it reached; one
// that ends frees its slot.
func TestRoutedPollsTakeTheOwnersSlots(t *testing.T) {
	c := newCluster(t)
	a, b := c.start("a"), c.start("b")
	owner, others := queueSetup(t, a, b)
	x := others[0]
	publishCE(t, x.r, "warm") // received once the subscription runs (receive retries until then)
	if e := receiveID(t, x, "warm"); e.DeliveryCount != 1 {
		t.Fatalf("warm came with deliveryCount %d", e.DeliveryCount)
	}

	polls := httpserver.NewPollLimit(2) // one poll per event subscription
	admitted, released := make(chan string, 4), make(chan string, 4)
	owner.r.AdmitRoutedPolls(func(queue string) (func(), error) {
		release, err := polls.Take(queue)
		if err != nil {
			return nil, err
		}
		admitted <- queue
		return func() { release(); released <- queue }, nil
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	waitFor := func(ch chan string, what string) {
		t.Helper()
		select {
		case q := <-ch:
			if q != "jobs/workers" {
				t.Fatalf("%s: queue %q, want jobs/workers", what, q)
			}
		case <-ctx.Done():
			t.Fatalf("%s: not within a minute", what)
		}
	}

	// A long poll through x waits at the owner, in the subscription's one slot there.
	pollCtx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	first := make(chan error, 1)
	go func() {
		_, err := x.r.Receive(pollCtx, "jobs", "workers", router.ReceiveOptions{MaxWait: router.MaxReceiveWait})
		first <- err
	}()
	waitFor(admitted, "the first poll's slot on the owner")

	// Another through x is refused at once: as a call, and over x's HTTP API, 429.
	if _, err := x.r.Receive(ctx, "jobs", "workers", router.ReceiveOptions{MaxWait: router.MinReceiveWait}); !errors.Is(err, router.ErrTooManyPolls) {
		t.Fatalf("a second poll through %s = %v, want ErrTooManyPolls", x.name, err)
	}
	spec, err := x.r.Topic("jobs")
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, "/topics/jobs/eventsubscriptions/workers:receive?maxWaitTime=10", http.NoBody)
	req.Header.Set("aeg-sas-key", spec.Key1)
	rec := httptest.NewRecorder()
	httpapi.New(x.r).ServeHTTP(rec, req)
	if body := rec.Body.String(); rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" ||
		!strings.Contains(body, `"code":"TooManyRequests"`) || !strings.Contains(body, "event subscription jobs/workers has 1 receive long polls waiting already") {
		t.Fatalf("a second poll over HTTP through %s was answered %d (Retry-After %q) %s; want 429 saying the owner's bound was met", x.name, rec.Code, rec.Header().Get("Retry-After"), body)
	}

	// The first poll ends: its slot is free, and the next poll is admitted and answered.
	stopPoll()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("the first poll after its cancel = %v, want context.Canceled", err)
	}
	waitFor(released, "the first poll's slot freed on the owner")
	publishCE(t, owner.r, "next")
	evs, err := x.r.Receive(ctx, "jobs", "workers", router.ReceiveOptions{MaxWait: router.MaxReceiveWait})
	if err != nil || len(evs) != 1 || eventID(t, evs[0]) != "next" {
		t.Fatalf("a poll through %s once the slot was free = %+v, %v; want event next", x.name, evs, err)
	}
}

// A receive routed to the owner gets the events whose answer fits in one NATS message (the
// owner's max_payload, 4 MB here), at least one, and the next receive the rest, each
// delivered once. The owner locked up to maxEvents events of up to 1 MB each and raised their
// delivery counts, but an answer over max_payload could not be sent: the caller waited
// MaxWait and a margin for nothing, and every poll cost each event a delivery until it was
// dead-lettered unseen.
func TestRoutedReceiveAnswerFitsMaxPayload(t *testing.T) {
	c := newCluster(t)
	a, b := c.start("a"), c.start("b")
	owner, others := queueSetup(t, a, b)
	x := others[0]
	pad := strings.Repeat("x", 900<<10)
	want := map[string]bool{}
	for i := range 6 { // 5.4 MB: over max_payload together, under it each
		id := fmt.Sprintf("big-%d", i)
		want[id] = true
		ev := json.RawMessage(fmt.Sprintf(`{"specversion":"1.0","id":%q,"source":"/jobs","type":"Job.Created","data":{"pad":%q}}`, id, pad))
		if err := owner.r.Publish(t.Context(), "jobs", ev); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	eventually(t, 30*time.Second, "the six events in the owner's queue", func() bool {
		st, err := owner.r.Status(t.Context(), "jobs", "workers")
		return err == nil && st.Backlog == 6
	})

	limit := int(owner.nc.MaxPayload())
	got := map[string]bool{}
	var tokens []string
	for poll := 1; len(got) < len(want) && poll <= 6; poll++ {
		// Well within MaxWait and its margin: an answer the owner could not send came never.
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		evs := receive(t, ctx, x, 10)
		cancel()
		size := 0
		for _, e := range evs {
			id := eventID(t, e)
			if !want[id] || got[id] || e.DeliveryCount != 1 {
				t.Errorf("poll %d through %s: event %s with deliveryCount %d (received before: %v); want each event once, as its first delivery", poll, x.name, id, e.DeliveryCount, got[id])
			}
			got[id] = true
			tokens = append(tokens, e.LockToken)
			size += len(e.Event) + len(e.LockToken)
		}
		if len(evs) == 0 || size > limit {
			t.Fatalf("poll %d through %s: %d events of %d bytes in all; want at least one, within the owner's max_payload of %d", poll, x.name, len(evs), size, limit)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("received %v through %s, want all of %v", got, x.name, want)
	}
	res, err := x.r.Acknowledge(t.Context(), "jobs", "workers", tokens)
	if err != nil || len(res.Succeeded) != len(tokens) {
		t.Fatalf("Acknowledge through %s = %+v, %v; want all %d tokens", x.name, res, err, len(tokens))
	}
}
