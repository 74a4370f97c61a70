package router

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/schemas/clip"
)

// Publish publishes events to a topic from Go, with the same validation and durability as the
// HTTP data plane: each event is marshalled to JSON (structs, maps or json.RawMessage) and the
// array is decoded as the topic's input schema. It returns once every event is durable, or an
// error and nothing accepted.
func (r *Router) Publish(ctx context.Context, topic string, events ...any) error {
	body, err := json.Marshal(events)
	if err != nil {
		return fmt.Errorf("encoding events: %w", err)
	}
	t, err := r.topicFresh(ctx, topic)
	if err != nil {
		return err
	}
	evs, err := r.decode(t, t.load(), body)
	if err != nil {
		return err
	}
	return r.ingest(ctx, t, evs)
}

// DecodeEvents decodes body, a JSON array (a CloudEvents topic also takes one structured
// event), in the input schema of spec — a topic's definition as [Router.Topic] returned it,
// so that one definition serves a whole request — within lim (schemas.ClassicLimits, or
// NamespaceLimits for a namespace topic or the namespace publish route). The events it
// returns can be given to [Router.PublishEvents].
func (r *Router) DecodeEvents(topic string, spec TopicSpec, body []byte, lim schemas.Limits) ([]*schemas.Event, error) {
	t := &topicRuntime{name: topic, id: r.TopicID(topic)}
	return r.decodeWithin(t, newTopicState(spec), body, lim, false)
}

// PublishEvents makes events decoded for a topic durable, like [Router.Publish]: it returns
// once every event is durable, or an error and nothing accepted (wrapping [ErrUnavailable]
// when the store failed, [ErrStoreDamaged] when it found the topic's journal damaged,
// [ErrClosed] after Close, [ErrTopicNotFound]). The events must come
// from a decoder of package schemas for the topic's input schema ([Router.DecodeEvents], or
// schemas.DecodeCloudEventBinary): PublishEvents does not validate them again.
func (r *Router) PublishEvents(ctx context.Context, topic string, events []*schemas.Event) error {
	t, err := r.topicFresh(ctx, topic)
	if err != nil {
		return err
	}
	return r.ingest(ctx, t, events)
}

func (r *Router) topic(name string) (*topicRuntime, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return nil, ErrClosed
	}
	t, ok := r.topics[fold(name)]
	if !ok {
		return nil, fmt.Errorf("topic %q: %w", clip.String(name), ErrTopicNotFound)
	}
	return t, nil
}

// decode decodes a JSON array body in the input schema of st, the topic's definition loaded
// once for the whole request.
func (r *Router) decode(t *topicRuntime, st *topicState, body []byte) ([]*schemas.Event, error) {
	return r.decodeWithin(t, st, body, topicLimits(st), false)
}

// decodeMessage decodes a source's message in the input schema of st: a JSON array of events
// or, whatever the schema, one event object, measured as itself.
func (r *Router) decodeMessage(t *topicRuntime, st *topicState, body []byte) ([]*schemas.Event, error) {
	return r.decodeWithin(t, st, body, topicLimits(st), true)
}

// topicLimits are the limits of a publish to a topic of definition st.
func topicLimits(st *topicState) schemas.Limits {
	if st.spec.Kind == KindNamespace {
		return schemas.NamespaceLimits
	}
	return schemas.ClassicLimits
}

// decodeWithin decodes body in the input schema of st within lim. With single, a body holding
// one event object is taken in every schema, not only in CloudEvents.
func (r *Router) decodeWithin(t *topicRuntime, st *topicState, body []byte, lim schemas.Limits, single bool) ([]*schemas.Event, error) {
	switch {
	case st.schema == schemas.CloudEvents:
		return schemas.DecodeCloudEvents(body, lim)
	case st.schema == schemas.Custom && single:
		return schemas.DecodeCustomObjectOrArray(body, st.spec.InputSchemaMapping.Properties, t.id, lim, uuid.NewString, r.deps.Now().UTC())
	case st.schema == schemas.Custom:
		return schemas.DecodeCustom(body, st.spec.InputSchemaMapping.Properties, t.id, lim, uuid.NewString, r.deps.Now().UTC())
	case single:
		return schemas.DecodeEventGridObjectOrArray(body, t.id, lim)
	default:
		return schemas.DecodeEventGrid(body, t.id, lim)
	}
}

// ingest makes events durable and hands them to the topic actor.
func (r *Router) ingest(ctx context.Context, t *topicRuntime, evs []*schemas.Event) error {
	start := time.Now()
	err := t.commit.append(ctx, evs)
	if err != nil {
		r.metrics.Add(metrics.Key{Name: metrics.PublishFailCount, Scope: t.name, Dim: "ServiceUnavailable"}, int64(len(evs)))
		return err
	}
	r.metrics.Add(metrics.Key{Name: metrics.PublishSuccessCount, Scope: t.name}, int64(len(evs)))
	t.publishLatency.Observe(time.Since(start)) // request to durable ack
	return nil
}

// CountPublishFailure counts one publish request to topic that was refused before any of its
// events was decoded or stored (PublishFailCount, with errorCode as its Error dimension, such
// as Unauthorized, BadRequest, PayloadTooLarge or TooManyRequests). The HTTP data plane calls
// it for every refusal of a known topic, and never for a topic that does not exist, so the
// series stay bounded by the topics; refusals by the store are counted where the store fails.
// A refused request counts once: its events were never known.
func (r *Router) CountPublishFailure(topic, errorCode string) {
	r.metrics.Add(metrics.Key{Name: metrics.PublishFailCount, Scope: topic, Dim: errorCode}, 1)
}
