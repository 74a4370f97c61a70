package router

import (
	"context"
	"strings"
	"sync"

	"github.com/google/uuid"

	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks/webhook"
)

// deletionNotices runs the SubscriptionDeletion notifications (eventgrid-behaviour.md §5.4):
// best effort, one attempt each, off the deleting caller's path. Close cancels the ones in
// flight and waits for them, so it stays bounded.
type deletionNotices struct {
	wg     sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc
}

func (d *deletionNotices) init() { d.ctx, d.cancel = context.WithCancel(context.Background()) }

// close cancels the notifications in flight and waits for them to return.
func (d *deletionNotices) close() {
	d.cancel()
	d.wg.Wait()
}

// notifyDeletion sends a deleted WebHook subscription's endpoint the SubscriptionDeletion
// notification Event Grid sends (aeg-event-type: SubscriptionDeletion, eventType
// Microsoft.EventGrid.SubscriptionDeletedEvent, data.eventSubscriptionId the subscription's
// ARM id; eventgrid-behaviour.md §5.4), in the subscription's delivery schema, in a goroutine
// bounded by the subscription's response timeout. Only a subscription that was delivering
// (provisioningState Succeeded) is notified, and none whose http:// endpoint the router refuses
// ([Router.refusesHTTP]): it gets no request at all, as its deliveries get none. A failure is
// logged and changes nothing. Called
// with r.mu held, before the subscription's provisioning record is forgotten.
func (r *Router) notifyDeletion(t *topicRuntime, name string, spec *SubscriptionSpec) {
	prov := r.life.get(subKey{t.name, name})
	if r.closed || !strings.EqualFold(spec.Destination.EndpointType, EndpointWebHook) || prov.state() != StateSucceeded {
		return
	}
	if r.refusesHTTP(spec) {
		// The notification would carry the endpoint's query string (often its auth code)
		// and the subscription's static delivery headers, secret ones too, in cleartext.
		r.log.Info("the SubscriptionDeletion notification was not sent: the endpoint is http:// and this router requires https", logattr.Topic, t.name, logattr.Subscription, name)
		return
	}
	res, err := spec.validate(&t.load().spec, r.cfg.TimeScale)
	if err != nil {
		return
	}
	dr := webhook.DeletionRequest{
		URL: spec.Destination.Properties.EndpointURL, Subscription: name,
		SubscriptionID: t.id + "/providers/Microsoft.EventGrid/eventSubscriptions/" + name,
		TopicID:        t.id, EventID: uuid.NewString(), Time: r.deps.Now(),
		CloudEvents: res.deliverySchema == schemas.CloudEvents, Origin: prov.origin(),
		Headers: res.headers, Timeout: res.timeout,
	}
	client, log := r.deps.HTTPClient, r.log
	r.notices.wg.Go(func() {
		if err := webhook.NotifyDeletion(r.notices.ctx, client, dr); err != nil {
			log.Warn("the SubscriptionDeletion notification was not accepted", logattr.Topic, t.name, logattr.Subscription, name, "err", err)
		}
	})
}

// subscriptionGone drops what the router keeps in memory of a deleted subscription once its
// actor here has stopped: its counters and histograms ([metrics.Set.ForgetSubscription]), and
// what Deps.OnSubscriptionDeleted's owner kept of its attempts. Neither happens while an actor
// of the name runs here again (created anew since), which the metrics set's guard sees.
func (r *Router) subscriptionGone(topic, sub string) {
	if r.metrics.ForgetSubscription(topic, sub) && r.deps.OnSubscriptionDeleted != nil {
		r.deps.OnSubscriptionDeleted(topic, sub)
	}
}

// topicGone is [Router.subscriptionGone] of a deleted topic, once its actors have stopped:
// its own counters and those of its subscriptions subs.
func (r *Router) topicGone(topic string, subs []string) {
	if r.metrics.ForgetTopic(topic) && r.deps.OnSubscriptionDeleted != nil {
		for _, sub := range subs {
			r.deps.OnSubscriptionDeleted(topic, sub)
		}
	}
}
