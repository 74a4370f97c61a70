package router

import (
	"context"
	"fmt"
	"strings"

	"github.com/egridio/egrid/schemas/clip"
)

// Names of topics and event subscriptions are case-insensitive, as in Event Grid: "orders"
// and "Orders" name the same topic, and "sub-a" and "SUB-A" the same subscription of a topic.
// Every lookup — the Go API, the admin API, the data plane routes, a restore from the store —
// folds the name, and a create with another case updates the existing one. A name keeps the
// case it was first created with: reads, lists, resource ids, the store and the delivery
// headers show that one.

// fold is the key under which names are compared. Names are ASCII (letters, digits, '-').
func fold(name string) string { return strings.ToLower(name) }

// putSub records a subscription under its folded name; an existing one keeps its case.
// Called with Router.mu held.
func (t *topicRuntime) putSub(name string, spec *SubscriptionSpec) {
	k := fold(name)
	if _, ok := t.subs[k]; !ok && name != k {
		t.subNames[k] = name // only names with capitals: most are kept once, as the key
	}
	t.subs[k] = spec
}

// delSub forgets a subscription. Called with Router.mu held.
func (t *topicRuntime) delSub(name string) {
	delete(t.subs, fold(name))
	delete(t.subNames, fold(name))
	delete(t.lives, fold(name))
}

// setLife records the stored life a subscription's runtime here is built from (0: not
// known). Called with Router.mu held.
func (t *topicRuntime) setLife(name string, life uint64) {
	if life == 0 {
		delete(t.lives, fold(name))
		return
	}
	if t.lives == nil {
		t.lives = make(map[string]uint64)
	}
	t.lives[fold(name)] = life
}

// sub returns a subscription's spec and its name as created. Called with Router.mu held.
func (t *topicRuntime) sub(name string) (*SubscriptionSpec, string, bool) {
	spec, ok := t.subs[fold(name)]
	if !ok {
		return nil, "", false
	}
	return spec, t.displayName(fold(name)), true
}

// displayName is the name as created of the subscription under folded key k. Called with
// Router.mu held.
func (t *topicRuntime) displayName(k string) string {
	if n, ok := t.subNames[k]; ok {
		return n
	}
	return k
}

// lookupLocked finds a topic and, unless name is empty, one of its subscriptions, by names
// in any case; it returns the subscription's name as created. Called with r.mu held.
func (r *Router) lookupLocked(topic, name string) (*topicRuntime, *SubscriptionSpec, string, error) {
	t, ok := r.topics[fold(topic)]
	if !ok {
		return nil, nil, "", fmt.Errorf("topic %q: %w", clip.String(topic), ErrTopicNotFound)
	}
	if name == "" {
		return t, nil, "", nil
	}
	spec, display, ok := t.sub(name)
	if !ok {
		return t, nil, "", fmt.Errorf("event subscription %q of topic %q: %w", clip.String(name), t.name, ErrSubscriptionNotFound)
	}
	return t, spec, display, nil
}

// lookup is lookupLocked taking r.mu's read side.
func (r *Router) lookup(topic, name string) (*topicRuntime, *SubscriptionSpec, string, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.lookupLocked(topic, name)
}

// TopicName returns the name of a topic, given in any case, as it was first created. It
// looks only at the topics this node knows and never waits: in cluster mode a topic created
// on another node is found once that node's notice arrives, a moment later. A request that
// may wait for the store calls [Router.FindTopicName] instead.
func (r *Router) TopicName(name string) (string, error) {
	t, _, _, err := r.lookup(name, "")
	if err != nil {
		return "", err
	}
	return t.name, nil
}

// FindTopicName is [Router.TopicName] for a request that can wait a moment, as the HTTP data
// plane's publish and pull routes do: in cluster mode a topic this node does not know yet —
// created on another node a moment ago, whose notice has not arrived — is looked up in the
// cluster's store first, as [Router.Publish] does, so that it can be used through any node at
// once. Those reads are shared by every name looked up on the node (at most one a second), so
// a name that does not exist waits up to about a second and a read within ctx before it fails.
// It fails wrapping [ErrTopicNotFound] for a topic the store does not hold either;
// [ErrUnavailable] when the store could not be read (nothing is known of the name: retry);
// [ErrClosed] once Close began; ctx's error when ctx ended while it waited. On a single node it
// reads nothing and costs what TopicName does, but answers ErrClosed after Close.
func (r *Router) FindTopicName(ctx context.Context, name string) (string, error) {
	t, err := r.topicFresh(ctx, name)
	if err != nil {
		return "", err
	}
	return t.name, nil
}

// SubscriptionName returns the names of a topic and of its event subscription, given in any
// case, as they were first created. Like [Router.TopicName] it looks only at what this node
// knows; [Router.FindSubscriptionName] may wait for the store.
func (r *Router) SubscriptionName(topic, name string) (topicName, subscriptionName string, err error) {
	t, _, display, err := r.lookup(topic, name)
	if err != nil {
		return "", "", err
	}
	return t.name, display, nil
}

// FindSubscriptionName is [Router.SubscriptionName] for a request that can wait a moment, as
// the HTTP data plane's pull routes do: in cluster mode a subscription created on another
// node a moment ago is looked up in the cluster's store first (see [Router.FindSubscription],
// whose errors it returns).
func (r *Router) FindSubscriptionName(ctx context.Context, topic, name string) (topicName, subscriptionName string, err error) {
	t, _, display, err := r.subscriptionFresh(ctx, topic, name)
	if err != nil {
		return "", "", err
	}
	return t.name, display, nil
}
