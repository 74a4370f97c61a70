package router

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/cluster"
	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas/clip"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/webhook"
)

// CreateSubscription creates or replaces an event subscription. The spec is checked against
// its topic first, with every problem reported at once, and against the size bounds of a
// definition ([MaxLabels], [MaxEndpointURLBytes] and the others, the filter's too) unless
// it leaves a stored definition as it is. A new subscription receives the events published
// after it was created.
//
// A WebHook endpoint is validated first (SPEC §2.5) unless the subscription sets
// destination.properties.skipValidation or the router [Config.SkipEndpointValidation]: an
// endpoint that refuses fails the call with an error wrapping [ErrValidationFailed], and
// nothing changes. An endpoint that answers the validation event with 200 but without the code
// leaves the subscription AwaitingManualAction (see [Router.Provisioning]) and CreateSubscription
// returns nil: it delivers once the endpoint GETs the validationUrl, which points at
// [Config.PublicURL] (without it, this answer fails the call). Every update validates again,
// as in Event Grid; an update the endpoint refuses leaves the previous definition in place.
//
// The handshake runs before anything is stored, for as long as the endpoint takes. Should
// another call update, delete or create the subscription meanwhile (on any node of a
// cluster), this one stores nothing and fails wrapping [ErrDefinitionChanged], saying which:
// writes take effect in the order they return, so a delete that returned stays deleted and an
// update that returned is not replaced by an older one. When the definition in force is then
// spec itself (a retry of this call, say), it returns nil: PUTs are idempotent. Should its
// topic be deleted meanwhile (even if created again), it fails wrapping [ErrTopicNotFound].
//
// Values that admin reads hide are kept from the stored subscription when spec leaves them
// empty: the endpoint URL, and the value of a secret static header of the same name (in
// cluster mode from the stored definition, which may be newer than this node's copy).
func (r *Router) CreateSubscription(ctx context.Context, topic, name string, spec SubscriptionSpec) error {
	_, err := r.applySubscription(ctx, topic, name, spec, r.cfg.PublicURL, false)
	return err
}

// EnsureSubscription is [Router.CreateSubscription] for a definition declared rather than
// asked for: the YAML config `egrid serve` applies at every start, on every node of a
// cluster. A subscription that exists with the same definition, its endpoint validated
// (provisioning Succeeded), is left as it is: no handshake, no store write, its delivery
// untouched. Validating it again at each start made a restart fail while its endpoint was
// down, put a manually validated one back to AwaitingManualAction (whose window, unanswered,
// dropped its parked events), and in cluster mode moved its actor at every node's start.
// Anything else — a new subscription, a changed definition, one whose validation failed or
// is awaited — is created or updated as CreateSubscription does.
func (r *Router) EnsureSubscription(ctx context.Context, topic, name string, spec SubscriptionSpec) error {
	_, err := r.applySubscription(ctx, topic, name, spec, r.cfg.PublicURL, true)
	return err
}

// subscriptionConfig validates spec and builds the actor's config.
func (r *Router) subscriptionConfig(t *topicRuntime, name string, spec *SubscriptionSpec) (*actors.SubscriptionConfig, error) {
	return r.subscriptionConfigWith(t, name, spec, r.life.get(subKey{t.name, name}))
}

// subscriptionConfigWith is subscriptionConfig for the provisioning record prov (nil: none),
// whose WebHook-Allowed-Rate caps the webhook's request rate.
func (r *Router) subscriptionConfigWith(t *topicRuntime, name string, spec *SubscriptionSpec, prov *provisioned) (*actors.SubscriptionConfig, error) {
	st := t.load()
	res, err := spec.validate(&st.spec, r.cfg.TimeScale)
	if err != nil {
		return nil, fmt.Errorf("event subscription %q: %w", name, err)
	}
	return r.buildSubscriptionConfig(t, st, name, spec, res, prov)
}

// buildSubscriptionConfig builds the actor's config from spec, already validated (res) against
// st, the topic's state. It sets res.policy's per-subscription fields: res is used once.
func (r *Router) buildSubscriptionConfig(t *topicRuntime, st *topicState, name string, spec *SubscriptionSpec, res *resolved, prov *provisioned) (*actors.SubscriptionConfig, error) {
	var err error
	var sink sinks.Sink
	var queue *actors.QueueConfig
	switch res.endpointType {
	case DeliveryModeQueue: // consumers pull its events (pull.go): no sink
		queue = &actors.QueueConfig{LockDuration: res.lockDuration}
	case EndpointWebHook:
		client := r.deps.HTTPClient
		sink, err = webhook.New(webhook.Config{
			URL: spec.Destination.Properties.EndpointURL, Parsed: res.endpoint, Timeout: res.timeout,
			Headers: res.headers, MaxRequestsPerMinute: prov.deliveryRate(), Origin: prov.origin(),
		}, client)
		if err != nil {
			return nil, fmt.Errorf("event subscription %q: destination: %w", name, err)
		}
		if r.refusesHTTP(spec) {
			sink = refusedHTTP // stored before https was required (egress.go)
		}
	case EndpointSink:
		r.sinkMu.RLock()
		s, ok := r.sinks[spec.Destination.Properties.SinkName]
		r.sinkMu.RUnlock()
		if !ok {
			return nil, fmt.Errorf("event subscription %q: destination.properties.sinkName %q: no sink is registered under that name; register it with Router.RegisterSink or Deps.Sinks", name, clip.String(spec.Destination.Properties.SinkName))
		}
		sink = withHeaders(s, res.headers)
	default: // a broker (validate accepts nothing else)
		bs, err := r.brokerSink(res.endpointType, spec.Destination.Properties)
		if err != nil {
			return nil, fmt.Errorf("event subscription %q: %w", name, err)
		}
		sink = withHeaders(bs, res.headers)
	}
	onDeadLetter, handoff := r.deadLetterHandoff(t, name, spec, res.deliverySchema)
	res.policy.JitterSeed = seedFor(t.name, name)
	res.policy.NoJitter = r.cfg.NoJitter
	res.policy.HonorRetryAfter = r.cfg.HonorRetryAfter
	if h := spec.RetryPolicy.HonorRetryAfter; h != nil {
		res.policy.HonorRetryAfter = *h
	}
	// A queue subscription's pull steps go to its events' histories only: Deps.OnAttempt and
	// the debug log tell delivery attempts.
	onAttempt := r.onAttempt
	if queue != nil {
		onAttempt = nil
	}
	return &actors.SubscriptionConfig{
		SubscriptionShared: r.sharedConfig(t, st),
		Name:               name, DeliverySchema: res.deliverySchema,
		Filter: res.filter, Policy: res.policy, Sink: sink,
		MaxEventsPerBatch:   spec.Destination.Properties.MaxEventsPerBatch,
		PreferredBatchBytes: spec.Destination.Properties.PreferredBatchSizeInKilobytes * 1024,
		Timeout:             attemptBudget(res.timeout, prov.deliveryRate(), r.cfg.MaxInFlight),
		OnDeadLetter:        onDeadLetter, Handoff: handoff, OnAttempt: r.observeAttempts(res.policy, onAttempt),
		Queue: queue,
	}, nil
}

func seedFor(topic, sub string) uint64 {
	var h uint64 = 14695981039346656037
	for _, c := range []byte(topic + "/" + sub) {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

// Subscription returns a subscription's spec. It looks only at the subscriptions this node
// knows and never waits: in cluster mode one created on another node is found once that
// node's notice arrives, a moment later. A request that may wait for the store calls
// [Router.FindSubscription] instead.
func (r *Router) Subscription(topic, name string) (SubscriptionSpec, error) {
	_, s, _, err := r.lookup(topic, name)
	if err != nil {
		return SubscriptionSpec{}, err
	}
	return *s, nil
}

// FindSubscription is [Router.Subscription] for a request that can wait a moment, as the
// admin API's read of one subscription does: in cluster mode a subscription (or its topic)
// this node does not know yet — created on another node a moment ago, whose notice has not
// arrived — is looked up in the cluster's store first, so that it can be read through any
// node at once. The reads are shared with [Router.FindTopicName]'s (at most one a second), so
// a name that does not exist waits up to about a second and a read within ctx before it
// fails. It fails wrapping [ErrSubscriptionNotFound] or [ErrTopicNotFound] for one the store
// does not hold either, [ErrUnavailable] when the store could not be read (retry),
// [ErrClosed] once Close began, ctx's error when ctx ended while it waited. On a single node
// it reads nothing and costs what Subscription does.
func (r *Router) FindSubscription(ctx context.Context, topic, name string) (SubscriptionSpec, error) {
	_, s, _, err := r.subscriptionFresh(ctx, topic, name)
	if err != nil {
		return SubscriptionSpec{}, err
	}
	return *s, nil
}

// Subscriptions lists a topic's subscription names, as created, in order.
func (r *Router) Subscriptions(topic string) ([]string, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, _, _, err := r.lookupLocked(topic, "")
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(t.subs))
	for k := range t.subs {
		names = append(names, t.displayName(k))
	}
	slices.Sort(names)
	return names, nil
}

// DeleteSubscription deletes an event subscription and its delivery state. A delivering WebHook
// subscription's endpoint is then sent Event Grid's SubscriptionDeletion notification, best
// effort and without waiting for it (eventgrid-behaviour.md §5.4).
func (r *Router) DeleteSubscription(ctx context.Context, topic, name string) error {
	if r.cl != nil {
		// One created on another node a moment ago (topiclookup.go), before the turn: the
		// read takes the topic's turn to apply what it finds.
		_, _, _, _ = r.subscriptionFresh(ctx, topic, name)
	}
	release, err := r.turns.acquire(ctx, topic)
	if err != nil {
		return fmt.Errorf("deleting event subscription %q: %w", name, err)
	}
	defer release()
	t, _, display, err := r.lookup(topic, name)
	if errors.Is(err, ErrSubscriptionNotFound) {
		return r.deleteDamagedSubscription(ctx, topic, name, err)
	}
	if err != nil {
		return err
	}
	topic, name = t.name, display
	if err := r.runSubscription(t, name, nil); err != nil {
		return err
	}
	t.writer.Forget(name) // its actor stopped: nothing asks for its write failures any more
	r.stopReplaysForDelete(ctx, topic, name)
	r.mu.Lock()
	r.notifyDeletion(t, name, t.subs[fold(name)]) // under r.mu: it reads closed; it only starts a goroutine
	t.delSub(name)
	r.mu.Unlock()
	r.life.forget(subKey{topic, name})
	if r.cl == nil {
		// Its actor has stopped (runSubscription waited), and a subscription created again
		// under the name waits for this turn: its counters go with it. In cluster mode the
		// node that runs it drops them as its actor stops there (clusterRuntime.stop).
		r.subscriptionGone(topic, name)
	}
	if err := r.store.DeleteSubscription(ctx, topic, name); err != nil {
		return fmt.Errorf("deleting event subscription %q: %w: %w", name, ErrUnavailable, err)
	}
	if r.cl != nil {
		r.cl.node.Changed(topic, name)
	}
	r.trim.kick(topic) // it may have been holding the journal back
	r.log.Info("event subscription deleted", logattr.Topic, topic, logattr.Subscription, name)
	return nil
}

// Status returns a subscription's delivery state: backlog, oldest undelivered event, probation.
// While its actor still reads its stored state it waits for the read up to a second, then
// returns that the actor does ([Status.Loading]).
func (r *Router) Status(ctx context.Context, topic, name string) (*Status, error) {
	return r.askSubscription(ctx, topic, name, func(name string) any { return &actors.GetStatus{Subscription: name} })
}

// EndProbation ends a subscription's probation now (an operator's call, SPEC §2.2) and
// returns its new state. While the subscription's actor still reads its stored state it waits
// for the read up to a second; past that it changes nothing and returns an error wrapping
// [ErrSubscriptionLoading]: try again.
func (r *Router) EndProbation(ctx context.Context, topic, name string) (*Status, error) {
	return r.askSubscription(ctx, topic, name, func(name string) any { return &actors.EndProbation{Subscription: name} })
}

// askSubscription asks a subscription's actor the message msg builds for its name as created;
// in cluster mode, on the node that runs it.
func (r *Router) askSubscription(ctx context.Context, topic, name string, msg func(name string) any) (*Status, error) {
	t, _, name, err := r.subscriptionFresh(ctx, topic, name)
	if err != nil {
		return nil, err
	}
	if r.cl != nil && !r.cl.node.Running(cluster.Key{Topic: t.name, Subscription: name}) {
		op := "status"
		if _, ok := msg(name).(*actors.EndProbation); ok {
			op = "endProbation"
		}
		return r.cl.askOwner(ctx, op, t.name, name)
	}
	return r.askLocal(ctx, t.name, name, msg)
}

// askLocal asks a subscription's actor on this node (topic and name as created).
func (r *Router) askLocal(ctx context.Context, topic, name string, msg func(name string) any) (*Status, error) {
	t, err := r.topic(topic)
	if err != nil {
		return nil, err
	}
	timeout, err := requestTimeout(ctx, 10*time.Second)
	if err != nil {
		return nil, fmt.Errorf("asking event subscription %q: %w", name, err)
	}
	res, err := r.system.Root.RequestFuture(t.pid, msg(name), timeout).Result()
	if err != nil {
		return nil, fmt.Errorf("asking event subscription %q: %w", name, err)
	}
	switch v := res.(type) {
	case *actors.Status:
		return statusOf(v), nil
	case error:
		if errors.Is(v, actors.ErrNotRunning) {
			// The actor stopped as the call reached it: deleted meanwhile, it is not found.
			if _, _, _, lerr := r.lookup(topic, name); lerr != nil {
				return nil, lerr
			}
		}
		return nil, v
	}
	return nil, fmt.Errorf("asking event subscription %q: unexpected answer %T", name, res)
}

// deleteDamagedSubscription is DeleteSubscription of a subscription the router does not run:
// the store may still hold it, with a definition it found damaged and left out at start
// ([store.ErrDamaged]); deleting it there is the operator's way to free the name (in cluster
// mode only when the store finds it damaged, and only the damaged value it found: see
// deleteDamagedTopic). notFound is the
// lookup's error, returned when the store holds nothing either. Called in the topic's turn.
func (r *Router) deleteDamagedSubscription(ctx context.Context, topic, name string, notFound error) error {
	t, _, _, err := r.lookup(topic, "")
	if err != nil {
		return notFound
	}
	if r.cl != nil {
		p, rev, damaged := r.storedDamaged(ctx, t.name, name)
		if !damaged {
			return notFound // maybe one another node created a moment ago: see deleteDamagedTopic
		}
		err = p.DeleteDamaged(ctx, t.name, name, rev)
	} else {
		err = r.store.DeleteSubscription(ctx, t.name, name)
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return notFound
	case errors.Is(err, store.ErrChanged):
		if r.cl != nil {
			r.cl.requestSync(t.name) // the definition written meanwhile: read it now, for the retry
		}
		return fmt.Errorf("deleting event subscription %q: its stored definition, found damaged, was replaced by another node before the delete (%w): nothing was deleted, and the name holds that node's event subscription now; retry the delete in a moment if that one is to go too", clip.String(name), ErrDefinitionChanged)
	case err != nil:
		return fmt.Errorf("deleting event subscription %q: %w: %w", clip.String(name), ErrUnavailable, err)
	}
	if r.cl != nil {
		r.cl.node.Changed(t.name, name)
	}
	r.log.Info("event subscription deleted (its stored definition was damaged)", logattr.Topic, t.name, logattr.Subscription, clip.String(name))
	return nil
}
