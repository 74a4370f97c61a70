package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/sas"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/schemas/clip"
)

// topicRuntime is a running topic. Its identity (name, actor, committer) is fixed; its
// definition is a [topicState] replaced whole, so a publish reads one consistent spec without
// a lock while an update rotates the keys.
type topicRuntime struct {
	name   string
	id     string
	pid    *actor.PID
	commit *committer
	writer *actors.StateWriter // subscription state writes, off the actors' mailboxes
	state  atomic.Pointer[topicState]
	// subs and subNames are keyed by folded subscription name (names.go); subNames keeps the
	// name as created when it differs from the key (see displayName). Guarded by Router.mu.
	subs     map[string]*SubscriptionSpec
	subNames map[string]string
	// lives holds, by folded subscription name, the life ([store.Definition.Life]) of the
	// stored subscription its runtime here was built from, when known (restored from the
	// store), or the life its actor here loaded, which the sync takes: a cluster node's sync
	// restarts a subscription whose stored life is another (deleted and created again
	// unseen). Guarded by Router.mu; nil until the first one.
	lives map[string]uint64
	// publishLatency is the topic's PublishSuccessLatencyInMs histogram, looked up once.
	publishLatency *metrics.Histogram
	// shared is the part of its subscriptions' actor configs they have in common (see
	// sharedConfig); nil until the first one is built.
	shared atomic.Pointer[actors.SubscriptionShared]
}

// sharedConfig returns the part of an actor config that the topic's subscriptions share, for
// the topic state st: one value per topic and input schema, not one per subscription.
func (r *Router) sharedConfig(t *topicRuntime, st *topicState) *actors.SubscriptionShared {
	if sh := t.shared.Load(); sh != nil && sh.InputSchema == st.schema {
		return sh
	}
	sh := &actors.SubscriptionShared{
		Topic: t.name, TopicID: t.id, InputSchema: st.schema,
		Encode:      schemas.EncodeOptions{OmitConvertedDataSchema: r.cfg.OmitConvertedDataSchema},
		MaxInFlight: r.cfg.MaxInFlight,
		Store:       r.store, LoadSlots: r.loadSlots, Writer: t.writer, Stops: &r.stops, Metrics: r.metrics, Logger: r.log,
		AnswerBudget: r.answers,
	}
	t.shared.Store(sh) // two racing builds store equal values
	return sh
}

// topicState is a topic's definition as publishes see it. It is immutable: an update stores
// a new one.
type topicState struct {
	spec   TopicSpec
	schema schemas.Schema
}

func newTopicState(spec TopicSpec) *topicState {
	return &topicState{spec: spec, schema: spec.schema()}
}

// load returns the topic's current definition.
func (t *topicRuntime) load() *topicState { return t.state.Load() }

func (r *Router) newTopicRuntime(name string, spec TopicSpec) *topicRuntime {
	t := &topicRuntime{
		name: name, id: r.cfg.ResourceIDPrefix + "/" + name,
		subs: make(map[string]*SubscriptionSpec), subNames: make(map[string]string),
		writer:         actors.NewStateWriter(r.store, name),
		publishLatency: r.metrics.Histogram(metrics.Key{Name: metrics.PublishSuccessLatencyInMs, Scope: name}),
	}
	t.state.Store(newTopicState(spec))
	return t
}

// startTopic spawns a topic's actor and committer and adds it to the router; a closed router
// refuses it (and stops what was started).
func (r *Router) startTopic(t *topicRuntime, subs []*actors.SubscriptionConfig) error {
	initial := subs
	if r.cl != nil {
		initial = nil // the placement starts those this node runs
	}
	t.pid = r.system.Root.Spawn(actors.TopicProps(&actors.TopicConfig{
		Name: t.name, Metrics: r.metrics, Logger: r.log, Subscriptions: initial,
	}))
	t.commit = newCommitter(r, t)
	r.mu.Lock()
	if !r.closed {
		r.topics[fold(t.name)] = t
		r.mu.Unlock()
		if r.cl != nil {
			for _, sc := range subs {
				r.cl.want(sc)
			}
		}
		return nil
	}
	r.mu.Unlock()
	t.commit.close()
	r.stopActor(t.pid, "topic actor "+t.name)
	_ = t.writer.Close()
	return ErrClosed
}

// TopicID returns the ARM-style resource ID of a topic (its `topic` field and CloudEvents
// source), with the topic's name as created when it exists.
func (r *Router) TopicID(name string) string {
	if display, err := r.TopicName(name); err == nil {
		name = display
	}
	return r.cfg.ResourceIDPrefix + "/" + name
}

// CreateTopic creates a topic, or updates the keys of an existing one (its schema is fixed at
// creation, as in Event Grid). Missing keys are generated. It returns the stored spec. Names
// are case-insensitive: an existing topic keeps the case it was created with. A new topic's
// name may not begin with Azure's reserved words Microsoft-, EventGrid- or System-. A key
// given that the topic does not have already must be MinTopicKeyLength to
// MaxTopicKeyLength printable ASCII characters without spaces.
func (r *Router) CreateTopic(ctx context.Context, name string, spec TopicSpec) (TopicSpec, error) {
	return r.createTopic(ctx, name, spec, false)
}

// createTopic is CreateTopic; own says the topic is egrid's own (the dead-letter notification
// topic, deadLetters.systemTopic), which may take a reserved name: "System-" is what such a
// topic is, and a configuration that named it so before names were checked keeps starting.
func (r *Router) createTopic(ctx context.Context, name string, spec TopicSpec, own bool) (TopicSpec, error) {
	var errs []error
	if err := ValidateTopicName(name); err != nil {
		errs = append(errs, err)
	}
	if err := spec.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return TopicSpec{}, err
	}
	release, err := r.turns.acquire(ctx, name)
	if err != nil {
		return TopicSpec{}, fmt.Errorf("saving topic %q: %w", name, err)
	}
	defer release()
	r.mu.RLock()
	closed, t := r.closed, r.topics[fold(name)]
	r.mu.RUnlock()
	if closed {
		return TopicSpec{}, ErrClosed
	}
	var have TopicSpec
	if t != nil {
		have = t.load().spec
	} else if err := checkTopicNameFree(name); err != nil && !own {
		errs = append(errs, err)
	}
	for i, k := range []string{spec.Key1, spec.Key2} {
		// A key the topic has already is not checked: one an earlier egrid stored, or a
		// config file declares again at each start, keeps working.
		if k != "" && k != have.Key1 && k != have.Key2 {
			if err := checkTopicKey(k); err != nil {
				errs = append(errs, fmt.Errorf("key%d %w (a key a topic has already, stored by an earlier egrid, is kept)", i+1, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return TopicSpec{}, err
	}
	if t != nil {
		name = t.name
		cur := t.load()
		if cur.schema != spec.schema() || cur.spec.Kind != spec.Kind {
			return TopicSpec{}, fmt.Errorf("topic %q exists with input schema %s and kind %q; delete it first to change them", name, cur.schema, cur.spec.Kind)
		}
		if spec.Key1 == "" {
			spec.Key1 = cur.spec.Key1
		}
		if spec.Key2 == "" {
			spec.Key2 = cur.spec.Key2
		}
	}
	given := spec // the keys the request gave, before the missing ones are generated
	for i, k := range []*string{&spec.Key1, &spec.Key2} {
		if *k != "" {
			if err := sas.ValidateKey(*k); err != nil {
				// Taken as it is (configurations in use hold such keys): it works as an
				// aeg-sas-key, but no SAS token can be signed or verified with it.
				r.log.Warn(fmt.Sprintf("topic key%d is not standard base64: publishers can send it as aeg-sas-key, but no SAS token (aeg-sas-token) can be made with it; give a key of standard base64 (as openssl rand -base64 32 prints), or leave it out to have one generated", i+1),
					logattr.Topic, name, "err", err)
			}
			continue
		}
		key, err := sas.NewKey()
		if err != nil {
			return TopicSpec{}, fmt.Errorf("generating a topic key: %w", err)
		}
		*k = key
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return TopicSpec{}, err
	}
	// A topic this node does not know is created with the store's create-if-absent, so a
	// create of the name on another node (cluster mode) is never written over: this one
	// then lost (lostTopicCreate).
	write := r.store.PutTopic
	if t == nil {
		write = r.store.CreateTopic
	}
	if err := write(ctx, name, raw); errors.Is(err, store.ErrExists) {
		// The topic stored stands; when it is the one asked for, this node runs it as
		// stored (below), as it would once its next sync read it.
		if name, spec, err = r.lostTopicCreate(ctx, name, &given, err); err != nil {
			return TopicSpec{}, err
		}
	} else if errors.Is(err, store.ErrDamaged) {
		return TopicSpec{}, fmt.Errorf("saving topic %q: %w", clip.String(name), err)
	} else if err != nil {
		return TopicSpec{}, fmt.Errorf("saving topic %q: %w: %w", name, ErrUnavailable, err)
	}
	if r.cl != nil {
		r.cl.node.Changed(name, "")
	}
	if t != nil {
		t.state.Store(newTopicState(spec)) // publishes see the old keys or the new ones, whole
		return spec, nil
	}
	if err := r.startTopic(r.newTopicRuntime(name, spec), nil); err != nil {
		return TopicSpec{}, err
	}
	r.log.Info("topic created", logattr.Topic, name, "inputSchema", spec.schema().String())
	return spec, nil
}

// lostTopicCreate answers a create of topic name, for a definition of spec as the request
// gave it, that the store refused (err, wrapping [store.ErrExists]): another node created the
// name since this node found it unknown, and that create, answered already, stands. When the
// topic stored is the one this request asks for (the same schema, kind and mapping, and
// each key the request gave) the create succeeds with the stored topic — its name as
// created, its spec —, as a PUT is idempotent (a client's retry through another node, nodes
// starting together declaring one topic); otherwise it fails wrapping
// [ErrDefinitionChanged] (409) and changes nothing, and this node reads the topic from the
// store at its next sync. Called in the topic's turn.
func (r *Router) lostTopicCreate(ctx context.Context, name string, spec *TopicSpec, err error) (string, TopicSpec, error) {
	defs, rerr := r.store.Topics(ctx)
	if rerr != nil {
		return "", TopicSpec{}, fmt.Errorf("saving topic %q: %w: %w", name, ErrUnavailable, err)
	}
	for _, d := range defs {
		if fold(d.Name) != fold(name) {
			continue
		}
		var cur TopicSpec
		if json.Unmarshal(d.Spec, &cur) == nil && sameTopic(spec, &cur) {
			return d.Name, cur, nil
		}
		break
	}
	if r.cl != nil {
		r.cl.requestSync(name)
	}
	return "", TopicSpec{}, fmt.Errorf("topic %q was created by another request while this request was being saved (%w, as an overlapping operation on one resource is in Azure): this request changed nothing, and that request's topic is in force; read it (GET) and PUT again to update its keys", clip.String(name), ErrDefinitionChanged)
}

// sameTopic reports whether the stored topic cur is what a create of spec (the keys it was
// given, "" for one to generate) asks for.
func sameTopic(spec, cur *TopicSpec) bool {
	if spec.schema() != cur.schema() || spec.Kind != cur.Kind || (spec.Key1 != "" && spec.Key1 != cur.Key1) || (spec.Key2 != "" && spec.Key2 != cur.Key2) {
		return false
	}
	a, _ := json.Marshal(spec.InputSchemaMapping)
	b, _ := json.Marshal(cur.InputSchemaMapping)
	return bytes.Equal(a, b)
}

// Bounds of a topic key a client chooses (an egrid extension: Azure generates its keys, 44
// characters of base64). The floor keeps out keys a publisher could guess; the ceiling is far
// above any real key and well under what an HTTP server takes in one header.
const (
	MinTopicKeyLength = 16
	MaxTopicKeyLength = 1024
)

// checkTopicKey checks a topic key a client chose: publishers send it in a header
// (aeg-sas-key) or a query parameter, so it is MinTopicKeyLength to MaxTopicKeyLength
// printable ASCII characters without spaces. The error never shows the key.
func checkTopicKey(key string) error {
	const use = "use %d to %d printable ASCII characters without spaces, such as standard base64 (openssl rand -base64 32 prints one), or leave it out to have one generated"
	if strings.TrimSpace(key) == "" {
		return fmt.Errorf("is blank: a key is sent in the aeg-sas-key header; "+use, MinTopicKeyLength, MaxTopicKeyLength)
	}
	for i := 0; i < len(key); i++ {
		switch c := key[i]; {
		case c < 0x20 || c == 0x7f:
			return fmt.Errorf("holds a control character (byte %d), which no HTTP header can carry; "+use, i, MinTopicKeyLength, MaxTopicKeyLength)
		case c == ' ':
			return fmt.Errorf("holds a space (byte %d), which a header trims or splits at; "+use, i, MinTopicKeyLength, MaxTopicKeyLength)
		case c > 0x7e:
			return fmt.Errorf("holds a character that is not ASCII (byte %d), which HTTP clients encode differently in a header; "+use, i, MinTopicKeyLength, MaxTopicKeyLength)
		}
	}
	if len(key) < MinTopicKeyLength || len(key) > MaxTopicKeyLength {
		return fmt.Errorf("has %d characters; "+use, len(key), MinTopicKeyLength, MaxTopicKeyLength)
	}
	return nil
}

// Topic returns a topic's spec.
func (r *Router) Topic(name string) (TopicSpec, error) {
	t, _, _, err := r.lookup(name, "")
	if err != nil && r.cl != nil {
		switch ft, ferr := r.topicFresh(context.Background(), name); {
		case ferr == nil: // created on another node a moment ago
			t, err = ft, nil
		case errors.Is(ferr, ErrUnavailable):
			err = ferr
		}
	}
	if err != nil {
		return TopicSpec{}, err
	}
	return t.load().spec, nil
}

// Topics lists the topic names, as created, in order.
func (r *Router) Topics() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.topics))
	for _, t := range r.topics {
		names = append(names, t.name)
	}
	slices.Sort(names)
	return names
}

// DeleteTopic deletes a topic with its subscriptions and everything stored for them. It waits
// for the topic's actors to terminate however long a turn of one of them holds its mailbox
// (stopActor), then for their last writes, before it closes the topic's state writer and
// deletes the topic from the store: once it has begun stopping the actors it goes through to
// the end, so a topic is never left half deleted.
func (r *Router) DeleteTopic(ctx context.Context, name string) error {
	release, err := r.turns.acquire(ctx, name)
	if err != nil {
		return fmt.Errorf("deleting topic %q: %w", clip.String(name), err)
	}
	defer release()
	r.mu.Lock()
	t, ok := r.topics[fold(name)]
	if !ok {
		r.mu.Unlock()
		return r.deleteDamagedTopic(ctx, name)
	}
	delete(r.topics, fold(name))
	subNames := make([]string, 0, len(t.subs))
	for k := range t.subs { // subNames holds only names with capitals
		subNames = append(subNames, t.displayName(k))
	}
	r.mu.Unlock()
	name = t.name
	if r.cl != nil {
		for _, n := range subNames {
			r.cl.unwant(name, n)
		}
	}
	r.stopReplaysForDelete(ctx, name, "")
	t.commit.close()
	r.stopActor(t.pid, "topic actor "+name) // its children's stop work has begun then
	_ = r.stops.WaitTopic(ctx, name)        // their sink calls and last writes, off their mailboxes
	_ = t.writer.Close()                    // after the actors: they flush on stop
	r.topicGone(name, subNames)             // its actors stopped; a topic of the name waits for the turn
	if err := r.store.DeleteTopic(ctx, name); err != nil {
		return fmt.Errorf("deleting topic %q: %w: %w", name, ErrUnavailable, err)
	}
	if r.cl != nil {
		r.cl.node.Changed(name, "")
	}
	r.log.Info("topic deleted", logattr.Topic, name)
	return nil
}

// deleteDamagedTopic is DeleteTopic of a topic the router does not run: on a single node, the
// store may still hold it, with a definition it found damaged and left out at start
// ([store.ErrDamaged]); deleting it there is the operator's way to free the name. In cluster
// mode a topic the router does not know may be one another node created a moment ago, so
// it is deleted only when the store finds its definition damaged (store.DamageProber), and
// only while it holds the damaged value it found: a definition another node wrote under the
// name in between is not deleted, and the call fails wrapping [ErrDefinitionChanged]. The
// other nodes are told. Called in the topic's turn.
func (r *Router) deleteDamagedTopic(ctx context.Context, name string) error {
	notFound := fmt.Errorf("topic %q: %w", clip.String(name), ErrTopicNotFound)
	var err error
	if r.cl != nil {
		p, rev, damaged := r.storedDamaged(ctx, name, "")
		if !damaged {
			return notFound
		}
		err = p.DeleteDamaged(ctx, name, "", rev)
	} else {
		err = r.store.DeleteTopic(ctx, name)
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return notFound
	case errors.Is(err, store.ErrChanged):
		if r.cl != nil {
			r.cl.requestSync(name) // the definition written meanwhile: read it now, for the retry
		}
		return fmt.Errorf("deleting topic %q: its stored definition, found damaged, was replaced by another node before the delete (%w): nothing was deleted, and the name holds that node's topic now; retry the delete in a moment if that one is to go too", clip.String(name), ErrDefinitionChanged)
	case err != nil:
		return fmt.Errorf("deleting topic %q: %w: %w", clip.String(name), ErrUnavailable, err)
	}
	if r.cl != nil {
		r.cl.node.Changed(name, "")
	}
	r.log.Info("topic deleted (its stored definition was damaged)", logattr.Topic, clip.String(name))
	return nil
}

// storedDamaged reports whether the store holds a definition of the topic (sub "") or the
// subscription that does not decode (store.DamageProber), with the store to delete it through
// and the revision of the damaged value; false when it cannot tell.
func (r *Router) storedDamaged(ctx context.Context, topic, sub string) (store.DamageProber, uint64, bool) {
	p, ok := r.store.(store.DamageProber)
	if !ok {
		return nil, 0, false
	}
	damaged, rev, err := p.DefinitionDamaged(ctx, topic, sub)
	return p, rev, err == nil && damaged
}
