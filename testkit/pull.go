package testkit

import (
	"context"
	"errors"
	"time"

	"github.com/egridio/egrid/router"
)

// This file is the kit's side of pull delivery: queue subscriptions of namespace topics, whose
// consumers receive events and settle them by lock token (eventgrid-behaviour.md §9). Receive
// long-polls in virtual time, so a test that receives from an empty queue simply sees the
// clock move by the wait.

// QueueSubscription returns the spec of a queue subscription with q's settings and a dead-letter
// destination, so that ended events land in [Harness.DeadLetters].
func QueueSubscription(q router.QueueInfo) router.SubscriptionSpec {
	spec := router.SubscriptionSpec{DeliveryConfiguration: &router.DeliveryConfiguration{
		DeliveryMode: router.DeliveryModeQueue, Queue: &q,
	}}
	spec.DeadLetterDestination = &router.DeadLetterDestination{EndpointType: "StorageBlob"}
	spec.DeadLetterDestination.Properties.BlobContainerName = "deadletters"
	return spec
}

// SubscribeQueue creates a queue subscription with q's settings (zero values take Azure's
// defaults: a 60 s lock, 10 deliveries, a day to live) and a dead-letter destination, creating
// topic as a namespace topic if needed.
func (h *Harness) SubscribeQueue(topic, name string, q router.QueueInfo) {
	h.t.Helper()
	if _, err := h.router.Topic(topic); errors.Is(err, router.ErrTopicNotFound) {
		h.CreateTopic(topic, router.TopicSpec{Kind: router.KindNamespace})
	}
	h.Subscribe(topic, name, QueueSubscription(q))
}

// Receive receives up to n events from a queue subscription, waiting up to the shortest wait
// Event Grid allows (10 s of virtual time) for the first. It fails the test on an error.
func (h *Harness) Receive(topic, sub string, n int) []router.ReceivedEvent {
	h.t.Helper()
	return h.ReceiveWait(topic, sub, n, router.MinReceiveWait)
}

// ReceiveWait is [Harness.Receive] with the long poll's wait (10 s to 120 s).
func (h *Harness) ReceiveWait(topic, sub string, n int, wait time.Duration) []router.ReceivedEvent {
	h.t.Helper()
	evs, err := h.router.Receive(context.Background(), topic, sub, router.ReceiveOptions{MaxEvents: n, MaxWait: wait})
	if err != nil {
		h.t.Fatalf("receiving from %s/%s: %v", topic, sub, err)
	}
	return evs
}

// Acknowledge acknowledges the events locked under tokens and returns the result.
func (h *Harness) Acknowledge(topic, sub string, tokens ...string) router.SettleResult {
	h.t.Helper()
	res, err := h.router.Acknowledge(context.Background(), topic, sub, tokens)
	if err != nil {
		h.t.Fatalf("acknowledging on %s/%s: %v", topic, sub, err)
	}
	return res
}

// Release releases the events locked under tokens, to be received again after delay.
func (h *Harness) Release(topic, sub string, delay time.Duration, tokens ...string) router.SettleResult {
	h.t.Helper()
	res, err := h.router.Release(context.Background(), topic, sub, tokens, delay)
	if err != nil {
		h.t.Fatalf("releasing on %s/%s: %v", topic, sub, err)
	}
	return res
}

// Reject rejects the events locked under tokens: they are dead-lettered.
func (h *Harness) Reject(topic, sub string, tokens ...string) router.SettleResult {
	h.t.Helper()
	res, err := h.router.Reject(context.Background(), topic, sub, tokens)
	if err != nil {
		h.t.Fatalf("rejecting on %s/%s: %v", topic, sub, err)
	}
	return res
}

// RenewLock renews the locks of the events locked under tokens.
func (h *Harness) RenewLock(topic, sub string, tokens ...string) router.SettleResult {
	h.t.Helper()
	res, err := h.router.RenewLock(context.Background(), topic, sub, tokens)
	if err != nil {
		h.t.Fatalf("renewing locks on %s/%s: %v", topic, sub, err)
	}
	return res
}

// LockTokens returns the lock tokens of received events, in order.
func LockTokens(evs []router.ReceivedEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.LockToken
	}
	return out
}
