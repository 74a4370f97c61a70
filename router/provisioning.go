package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/schemas/clip"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/webhook"
)

// Provisioning states of an event subscription: the values of ARM's provisioningState that
// egrid uses (eventgrid-behaviour.md §3.1).
const (
	// StateSucceeded: the subscription is active and delivers.
	StateSucceeded = "Succeeded"
	// StateAwaitingManualAction: the endpoint must still GET its validationUrl; nothing is
	// delivered until it does (SPEC §2.5).
	StateAwaitingManualAction = "AwaitingManualAction"
	// StateFailed: the manual validation window passed; nothing is delivered and no event is
	// kept for it. Update the subscription to validate again — it then starts afresh, like a
	// new subscription, with the events published from then on — or delete it.
	StateFailed = "Failed"
)

// Provisioning is an event subscription's provisioning state with egrid's explanation.
type Provisioning struct {
	// State is StateSucceeded, StateAwaitingManualAction or StateFailed.
	State string
	// Message says why the state is not Succeeded and what to do; empty when Succeeded.
	Message string
}

// record is what the store keeps for a subscription: its spec and, under "egrid", its
// provisioning record. Readers that know only SubscriptionSpec ignore the latter.
type record struct {
	SubscriptionSpec
	Egrid *provisioned `json:"egrid,omitempty"`
}

// provisioned is a subscription's provisioning record. nil means Succeeded without a
// handshake (a subscription stored before egrid kept records, or a non-WebHook one).
type provisioned struct {
	// State is "" (Succeeded), AwaitingManualAction or Failed.
	State   string `json:"provisioningState,omitempty"`
	Message string `json:"message,omitempty"`
	// Handshake is the handshake the endpoint passed (or is passing): SubscriptionValidation,
	// AbuseProtection, or "" when none was needed.
	Handshake string `json:"handshake,omitempty"`
	// DeliveryRate is the WebHook-Allowed-Rate a CloudEvents endpoint answered, in requests
	// per minute; 0 means no cap.
	DeliveryRate int `json:"deliveryRate,omitempty"`
	// TokenHash (sha256, hex) and Deadline describe the validationUrl of a subscription
	// AwaitingManualAction. The token itself is never stored.
	TokenHash string    `json:"tokenHash,omitempty"`
	Deadline  time.Time `json:"deadline,omitzero"`
	// Revalidating marks, in the store, a Failed subscription an update is validating again
	// (commitSubscription, cluster mode): its delivery state is being reset (startFresh), so
	// the trimmers of every node count its cursor again (trim.go). The record the update
	// writes next has no mark; one left by an update that failed half-way keeps the cursor
	// counted until the next update or the deletion.
	Revalidating bool `json:"revalidating,omitempty"`
	// keepsEvents marks a Failed subscription that holds its events for when it is fixed (a
	// stored one the running egrid refuses: restoreSubscription); one whose validation
	// failed holds none, and the journal is trimmed past it (trim.go). Never stored.
	keepsEvents bool
}

// empty reports whether p records nothing: a Succeeded subscription that needed no handshake
// (nil too). Such records are not kept.
func (p *provisioned) empty() bool { return p == nil || *p == provisioned{} }

func (p *provisioned) state() string {
	if p == nil || p.State == "" {
		return StateSucceeded
	}
	return p.State
}

// origin is the Origin header deliveries carry: the WebHook-Request-Origin of the CloudEvents
// abuse-protection handshake the endpoint consented to, or "" when it passed none.
func (p *provisioned) origin() string {
	if p == nil || p.Handshake != handshakeAbuseProtection {
		return ""
	}
	return webhook.DefaultRequestOrigin
}

func (p *provisioned) deliveryRate() int {
	if p == nil {
		return 0
	}
	return p.DeliveryRate
}

// Provisioning returns a subscription's provisioning state.
func (r *Router) Provisioning(topic, name string) (Provisioning, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, _, name, err := r.lookupLocked(topic, name)
	if err != nil {
		return Provisioning{}, err
	}
	p := r.life.get(subKey{t.name, name})
	msg := ""
	if p != nil {
		msg = p.Message
	}
	return Provisioning{State: p.state(), Message: msg}, nil
}

// PutSubscription is [Router.CreateSubscription] with baseURL, the router's own address at
// which the endpoint can reach the validationUrl of a manual validation (the admin API passes
// [Config.PublicURL] or the address the request came to; "" offers none). It returns the
// subscription's provisioning state.
func (r *Router) PutSubscription(ctx context.Context, topic, name string, spec SubscriptionSpec, baseURL string) (Provisioning, error) {
	return r.applySubscription(ctx, topic, name, spec, baseURL, false)
}

// applySubscription creates or replaces a subscription (SPEC §1.2, §2.5): it checks the spec
// (every problem at once), keeps the hidden values a read-back definition leaves out,
// validates a WebHook endpoint on every create and update — without holding the router's
// lock, since a handshake takes up to a minute —, then stores the
// subscription and starts its delivery, or leaves it AwaitingManualAction. baseURL is the
// router's own address for the validationUrl ("" offers none). declared leaves a validated
// subscription whose definition is spec as it is ([Router.EnsureSubscription]). The
// definition it starts from is recorded (putBase): should another write replace or delete it
// while the handshake runs (or while the call waits for the topic's turn), nothing is stored
// and the call fails wrapping [ErrDefinitionChanged] — unless the definition in force is
// spec itself, when it succeeds with that definition's provisioning state (settlePut).
func (r *Router) applySubscription(ctx context.Context, topic, name string, spec SubscriptionSpec, baseURL string, declared bool) (Provisioning, error) {
	nameErr := ValidateSubscriptionName(name)
	// In cluster mode the definition this PUT replaces is the stored one: another node may
	// have written it a moment ago, its notice not arrived yet. It is read before the checks,
	// so the hidden values a read-back definition leaves out are taken from it (keepHidden),
	// not from this node's copy, which may be older: a PUT must not bring back the endpoint
	// of a definition another node's answered write replaced.
	var (
		stored    *record
		storedFor *topicRuntime
	)
	if r.cl != nil {
		// A topic created on another node a moment ago (topiclookup.go).
		if ft, err := r.topicFresh(ctx, topic); err == nil && nameErr == nil {
			defs, err := r.store.Subscriptions(ctx, ft.name)
			if errors.Is(err, store.ErrNotFound) {
				return Provisioning{}, fmt.Errorf("topic %q: %w", ft.name, ErrTopicNotFound)
			} else if err != nil {
				return Provisioning{}, storeFailure(fmt.Sprintf("saving event subscription %q: reading its stored definition", name), err)
			}
			if _, _, stored, err = findDefinition(defs, subKey{ft.name, name}); err != nil {
				return Provisioning{}, storeFailure(fmt.Sprintf("saving event subscription %q", name), err)
			}
			storedFor = ft
		}
	}
	r.mu.RLock()
	if r.closed {
		r.mu.RUnlock()
		return Provisioning{}, ErrClosed
	}
	t, ok := r.topics[fold(topic)]
	if !ok {
		r.mu.RUnlock()
		return Provisioning{}, errors.Join(fmt.Errorf("topic %q: %w", clip.String(topic), ErrTopicNotFound), nameErr)
	}
	topic = t.name
	var prev *SubscriptionSpec
	if ps, display, exists := t.sub(name); exists {
		name = display // names are case-insensitive; the first case stays (names.go)
		prev = ps
	} else if len(t.subs) >= r.cfg.MaxSubscriptionsPerTopic {
		r.mu.RUnlock()
		return Provisioning{}, fmt.Errorf("topic %q has %d event subscriptions, the limit: delete one or raise maxSubscriptionsPerTopic", topic, len(t.subs))
	}
	if r.cl != nil && nameErr == nil && storedFor != t {
		// The topic was deleted or created again since the read: what was read is not this
		// topic's.
		r.mu.RUnlock()
		return Provisioning{}, fmt.Errorf("topic %q was deleted or created again while event subscription %q was being checked (%w): this request changed nothing; PUT it again", topic, clip.String(name), ErrDefinitionChanged)
	}
	// hidden is the definition the hidden values come from: in cluster mode the stored one.
	hidden := prev
	if r.cl != nil {
		hidden = nil
		if stored != nil {
			hidden = &stored.SubscriptionSpec
		}
	}
	var problems []error
	if hidden != nil {
		if err := keepHidden(&spec, hidden); err != nil {
			problems = append(problems, err)
		}
	}
	spec.Destination.Properties.EndpointBaseURL = "" // read-only; reads compute it
	if exp := spec.ExpirationTimeUTC; !exp.IsZero() && !exp.After(r.deps.Now()) {
		problems = append(problems, fmt.Errorf("expirationTimeUtc %s is not in the future (invalid expiration time): use a later time, or leave it out for a subscription that does not expire", exp.UTC().Format(time.RFC3339)))
	}
	st := t.load()
	res, err := spec.validate(&st.spec, r.cfg.TimeScale)
	if err != nil {
		problems = append(problems, err)
	}
	// The size bounds refuse what a write would add (size.go): restoreSubscription does not
	// check them, and neither is a stored definition applied again unchanged — the YAML config
	// at every start of egrid serve, a template deployed again — refused for a bound added
	// after it was accepted, nor is an update for the stored endpointUrl it keeps (reads hide
	// its query string, and keepHidden filled it in above).
	if err := spec.checkSize(hidden); err != nil && (hidden == nil || !sameDefinition(&spec, hidden)) {
		problems = append(problems, err)
	}
	problems = append(problems, r.httpEndpointProblem(&spec)) // Config.RequireHTTPS (egress.go)
	var specErr error
	if err := errors.Join(problems...); err != nil {
		specErr = fmt.Errorf("event subscription %q: %w", clip.String(name), err) // nameErr may have refused it
	}
	if err := errors.Join(nameErr, specErr, r.checkDeadLetterDestination(name, &spec)); err != nil {
		r.mu.RUnlock()
		return Provisioning{}, err
	}
	if declared && prev != nil && sameDefinition(&spec, prev) {
		if p := r.life.get(subKey{topic, name}); p.state() == StateSucceeded {
			r.mu.RUnlock()
			return Provisioning{State: StateSucceeded}, nil // as it is: no handshake, no write
		}
	}
	// Building the config here reports a sink that is not registered; commitSubscription uses
	// it unless the topic changed or the handshake set a rate or origin meanwhile.
	sc, err := r.buildSubscriptionConfig(t, st, name, &spec, res, nil)
	if err != nil {
		r.mu.RUnlock()
		return Provisioning{}, err
	}
	pre := &builtConfig{st: st, name: name, sc: sc}
	topicID := t.id
	base := &putBase{spec: prev, stored: storedSpec(stored)}
	r.mu.RUnlock()
	if err := r.checkEgress(ctx, name, &spec); err != nil { // before any connection (egress.go)
		return Provisioning{}, err
	}
	k := subKey{topic, name}
	// The checks above ran under the read lock only (no I/O); the store write and the actor
	// calls below run in the topic's turn without it.

	// Event Grid validates the endpoint on every create and update of a WebHook subscription
	// (eventgrid-behaviour.md §5.2, "triggered at subscription creation and update";
	// learn.microsoft.com/azure/event-grid/end-point-validation-event-grid-events-schema). An
	// update whose handshake fails returns here, before anything is stored: the previous
	// definition stays in place and keeps delivering.
	kind := r.handshakeKind(&spec, res.deliverySchema)
	prov := &provisioned{}
	if kind != "" {
		if prov, err = r.handshake(ctx, k, kind, &spec, res, topicID, baseURL); err != nil {
			return Provisioning{}, err
		}
		base.validated = true
	}
	inForce, err := r.commitSubscription(ctx, t, k, &spec, prov, pre, base)
	if (err != nil || inForce != nil) && prov.TokenHash != "" {
		r.life.drop(prov.TokenHash)
	}
	if err != nil {
		return Provisioning{}, err
	}
	if inForce != nil {
		return *inForce, nil
	}
	return Provisioning{State: prov.state(), Message: prov.Message}, nil
}

// builtConfig is an actor config built while a create was checked: the topic state and the
// name it was built for, and the config.
type builtConfig struct {
	st   *topicState
	name string
	sc   *actors.SubscriptionConfig
}

// putBase is the definition a create or update started from, before its endpoint's
// handshake: the handshake runs outside the topic's turn and the endpoint sets its length (up
// to about a minute), so other writes of the subscription may be answered meanwhile.
// commitSubscription stores the new definition only while the subscription's definition is
// still this one (compare-and-swap); otherwise the PUT fails wrapping [ErrDefinitionChanged]
// and changes nothing, so writes take effect in the order they were answered: a DELETE that
// answered stays deleted, and a PUT that answered is not replaced by an older one.
type putBase struct {
	// spec is the definition in force on this router when the PUT was checked (nil: none).
	// Outside cluster mode every write of a definition goes through this router in the
	// topic's turn and puts a new value (putSub) or deletes it, so the identity of the value
	// tells whether another write came in between.
	spec *SubscriptionSpec
	// stored is, in cluster mode, the stored definition (its spec, without the provisioning
	// record: a validation ended or a window closed meanwhile is no conflicting write) read
	// before the checks, the hidden values it keeps taken from it; nil: none. Other nodes
	// write the store too.
	stored []byte
	// validated tells whether the PUT ran a handshake (its conflict's message says so).
	validated bool
}

// existed tells whether the subscription existed when the PUT started.
func (b *putBase) existed(cluster bool) bool {
	if cluster {
		return b.stored != nil
	}
	return b.spec != nil
}

// storedSpec is the spec of a stored record as putBase compares it: nil for none.
func storedSpec(rec *record) []byte {
	if rec == nil {
		return nil
	}
	b, _ := json.Marshal(&rec.SubscriptionSpec)
	return b
}

// putConflict is the error of a PUT whose base (putBase) is no longer the subscription's
// definition, and whose own definition is not the one in force (that PUT succeeds:
// settlePut): existed tells whether the subscription existed when the PUT started, now
// whether one exists now, validated whether the PUT validated its endpoint meanwhile.
func putConflict(name string, existed, now, validated bool) error {
	lost := "while this request waited to be stored"
	if validated {
		lost = "while this request validated its endpoint"
	}
	lost += " (%w, as an overlapping operation on one resource is in Azure): this request changed nothing"
	switch {
	case existed && !now:
		return fmt.Errorf("event subscription %q was deleted by another request "+lost+", and the subscription stays deleted; PUT it again to create it anew", clip.String(name), ErrDefinitionChanged)
	case !existed && now:
		return fmt.Errorf("event subscription %q was created by another request "+lost+", and that request's definition is in force; read it (GET) and PUT again if this definition is to replace it", clip.String(name), ErrDefinitionChanged)
	default:
		return fmt.Errorf("event subscription %q was updated by another request "+lost+", and that request's definition is in force; read it (GET) and PUT again if this definition is to replace it", clip.String(name), ErrDefinitionChanged)
	}
}

// settlePut is the answer of a PUT whose base (putBase) is no longer the subscription's
// definition: cur is the definition in force now (nil: none), curProv its provisioning
// record. When cur is the PUT's own definition spec (the same as sameDefinition compares:
// another request, typically a client's retry of this one, stored it meanwhile), the PUT
// succeeds, as a PUT is idempotent, with nothing written and the provisioning state in force;
// otherwise it fails (putConflict).
func settlePut(name string, spec, cur *SubscriptionSpec, curProv *provisioned, base *putBase, cluster bool) (*Provisioning, error) {
	if cur != nil && sameDefinition(spec, cur) {
		p := &Provisioning{State: curProv.state()}
		if curProv != nil {
			p.Message = curProv.Message
		}
		return p, nil
	}
	return nil, putConflict(name, base.existed(cluster), cur != nil, base.validated)
}

// settleLostWrite is settlePut in cluster mode after a write of subscription k failed (err):
// it reads the stored record to tell what happened meanwhile, and answers the topic's or
// the subscription's deletion, another definition stored (putConflict) or this one
// (success). A record that is still the one the write started from leaves err.
func (r *Router) settleLostWrite(ctx context.Context, k subKey, spec *SubscriptionSpec, base *putBase, old []byte, err error) (*Provisioning, error) {
	r.cl.requestSync(k.topic) // another node's write, perhaps not heard of yet
	defs, rerr := r.store.Subscriptions(ctx, k.topic)
	if errors.Is(rerr, store.ErrNotFound) {
		return nil, fmt.Errorf("topic %q: %w (it was deleted while the event subscription was being saved)", k.topic, ErrTopicNotFound)
	} else if rerr != nil {
		return nil, err
	}
	raw, _, rec, rerr := findDefinition(defs, k)
	if rerr != nil || bytes.Equal(raw, old) {
		return nil, err
	}
	if rec == nil {
		return settlePut(k.name, spec, nil, nil, base, true)
	}
	return settlePut(k.name, spec, &rec.SubscriptionSpec, rec.Egrid, base, true)
}

// commitSubscription stores a checked (and validated) subscription and starts or stops its
// delivery according to prov. It runs in the topic's turn, without holding r.mu across the
// store write or the wait for the topic actor. pre (nil: none) is the config built while
// checking, without a provisioning record; it is used when it still fits, so a create
// validates and builds once. base is the definition the PUT started from (putBase): when
// another write replaced or deleted it meanwhile, nothing is stored and the error wraps
// [ErrDefinitionChanged], or, when the definition in force is spec, inForce is its
// provisioning state (settlePut); in cluster mode the write is a swap from the stored record
// read in the turn ([store.Store.SwapSubscription]), or, when it read none, a
// create-if-absent ([store.Store.CreateSubscription]), so another node's write in between —
// its create of the name included — fails it too, and is not written over.
func (r *Router) commitSubscription(ctx context.Context, t *topicRuntime, k subKey, spec *SubscriptionSpec, prov *provisioned, pre *builtConfig, base *putBase) (inForce *Provisioning, err error) {
	release, err := r.turns.acquire(ctx, k.topic)
	if err != nil {
		return nil, fmt.Errorf("saving event subscription %q: %w: %w", k.name, ErrUnavailable, err)
	}
	defer release()
	r.mu.RLock()
	closed := r.closed
	cur, ok := r.topics[fold(k.topic)]
	curSpec, display, existed := t.sub(k.name)
	n := len(t.subs)
	r.mu.RUnlock()
	if existed {
		k.name = display // created meanwhile in another case: that one is updated
	}
	if closed {
		return nil, ErrClosed
	}
	if !ok || cur != t {
		return nil, fmt.Errorf("topic %q: %w (it was deleted while the endpoint was validated)", k.topic, ErrTopicNotFound)
	}
	// The stored record the write replaces: in cluster mode read here, in the turn.
	var (
		stored     *record
		storedRaw  []byte
		storedName string
	)
	if r.cl == nil {
		if curSpec != base.spec {
			return settlePut(k.name, spec, curSpec, r.life.get(k), base, false)
		}
	} else {
		defs, err := r.store.Subscriptions(ctx, k.topic)
		if errors.Is(err, store.ErrNotFound) {
			r.cl.requestSync(k.topic) // deleted on another node: drop it here now
			return nil, fmt.Errorf("topic %q: %w (it was deleted while the endpoint was validated)", k.topic, ErrTopicNotFound)
		} else if err != nil {
			return nil, storeFailure(fmt.Sprintf("saving event subscription %q: reading its stored state", k.name), err)
		}
		if storedRaw, storedName, stored, err = findDefinition(defs, k); err != nil {
			return nil, storeFailure(fmt.Sprintf("saving event subscription %q", k.name), err)
		}
		if !bytes.Equal(storedSpec(stored), base.stored) {
			r.cl.requestSync(k.topic) // another node's write, perhaps not heard of yet
			if stored == nil {
				return settlePut(k.name, spec, nil, nil, base, true)
			}
			return settlePut(k.name, spec, &stored.SubscriptionSpec, stored.Egrid, base, true)
		}
	}
	if !existed && n >= r.cfg.MaxSubscriptionsPerTopic {
		return nil, fmt.Errorf("topic %q has %d event subscriptions, the limit: delete one or raise maxSubscriptionsPerTopic", k.topic, n)
	}
	if prov.state() == StateAwaitingManualAction && !r.life.commit(prov.TokenHash, ManualValidationWindow, func() { r.closeValidationWindow(prov.TokenHash) }) {
		// The endpoint fetched its validationUrl before we got here.
		prov = &provisioned{Handshake: prov.Handshake}
	}
	var sc *actors.SubscriptionConfig
	if prov.state() == StateSucceeded {
		if pre != nil && pre.st == t.load() && pre.name == k.name && prov.empty() {
			sc = pre.sc
		} else {
			var err error
			if sc, err = r.subscriptionConfigWith(t, k.name, spec, prov); err != nil {
				return nil, err
			}
		}
	}
	// A subscription whose validation failed starts afresh (startFresh) before its new record
	// is stored: a failure in between leaves it Failed with nothing to deliver, never
	// validated with the events it missed. Meanwhile the trimmer counts its cursor (held), so
	// no event published once the update read the journal's end is trimmed past it; in
	// cluster mode, where another node's trimmer reads the stored record, the record is marked
	// first (Revalidating).
	prev := r.life.get(k)
	fresh := prev.state() == StateFailed && !prev.keepsEvents
	if r.cl != nil {
		// The window may have closed on another node a moment ago: the stored record tells.
		fresh = stored != nil && stored.Egrid.state() == StateFailed
	}
	if fresh {
		if prev.state() == StateFailed {
			held := *prev
			held.keepsEvents = true
			r.life.set(k, &held)
		}
		if stored != nil && !stored.Egrid.Revalidating {
			marked := *stored.Egrid
			marked.Revalidating = true
			raw, err := encodeRecord(&stored.SubscriptionSpec, &marked)
			if err == nil {
				inForce, err = r.swapSubscription(ctx, k, storedName, storedRaw, raw, spec, base)
			}
			if err != nil || inForce != nil {
				r.life.set(k, prev)
				return inForce, err
			}
			storedRaw = raw
		}
		if err := r.startFresh(ctx, k); err != nil {
			r.life.set(k, prev)
			return nil, storeFailure(fmt.Sprintf("saving event subscription %q: resetting the delivery state of its failed validation", k.name), err)
		}
	}
	if stored != nil {
		raw, err := encodeRecord(spec, prov)
		if err == nil {
			inForce, err = r.swapSubscription(ctx, k, storedName, storedRaw, raw, spec, base)
		}
		if err != nil || inForce != nil {
			r.life.set(k, prev)
			return inForce, err
		}
	} else if err := r.storeSubscription(ctx, k, spec, prov, r.cl != nil || !existed); err != nil {
		r.life.set(k, prev)
		if errors.Is(err, store.ErrExists) {
			// Another node's create of the name landed between the read above and this
			// write: it stands, and this create lost.
			err = putConflict(k.name, false, true, base.validated)
		}
		if r.cl != nil {
			// Answered as a lost create: 409, or success when the definition in force is
			// this one.
			return r.settleLostWrite(ctx, k, spec, base, nil, err)
		}
		return nil, err
	}
	r.mu.RLock()
	life, known := t.lives[fold(k.name)]
	r.mu.RUnlock()
	if r.cl != nil && (!existed || !known) {
		// The life the actor about to start loads: a later sync that lists another one
		// (deleted and created again elsewhere, the notices missed) starts it again. A
		// replaced definition keeps its life. Not known when the read fails: the first sync
		// then takes the stored one.
		life = 0
		if st, err := r.store.LoadSubscriptionIndex(ctx, k.topic, k.name); err == nil {
			life = st.Epoch
		}
	}
	r.mu.Lock()
	t.putSub(k.name, spec)
	t.setLife(k.name, life)
	r.mu.Unlock()
	r.life.set(k, prov)
	r.life.scheduleExpiry(k, spec.ExpirationTimeUTC.Sub(r.deps.Now()), spec.ExpirationTimeUTC, r.expire)
	if err := r.runSubscription(t, k.name, sc); err != nil {
		return nil, err
	}
	r.stopReplays(k.topic, k.name) // a replay runs with the replaced config
	verb := "created"
	if existed {
		verb = "updated"
	}
	r.log.Info("event subscription "+verb, logattr.Topic, k.topic, logattr.Subscription, k.name, "provisioningState", prov.state())
	return nil, nil
}

// swapSubscription replaces, in cluster mode, subscription k's stored record old (stored
// under name) with raw, only while it is still old. Another write in between fails it, and
// nothing is written: the answer is settleLostWrite's — the topic's deletion (404), or, for
// a PUT of spec from base, another definition in force (putConflict, wrapping
// [ErrDefinitionChanged]) or spec itself (inForce: success). Called in the topic's turn by
// commitSubscription, which read old there.
func (r *Router) swapSubscription(ctx context.Context, k subKey, name string, old, raw []byte, spec *SubscriptionSpec, base *putBase) (inForce *Provisioning, err error) {
	switch err := r.store.SwapSubscription(ctx, k.topic, name, old, raw); {
	case errors.Is(err, store.ErrChanged), errors.Is(err, store.ErrNotFound):
		return r.settleLostWrite(ctx, k, spec, base, old, putConflict(k.name, true, !errors.Is(err, store.ErrNotFound), base.validated))
	case err != nil:
		return nil, storeFailure(fmt.Sprintf("saving event subscription %q", k.name), err)
	}
	return nil, nil
}

// storedDefinition reads subscription k's record from the store: the bytes stored, the name
// they are stored under and the record they hold, or a nil record when it has none.
func (r *Router) storedDefinition(ctx context.Context, k subKey) (raw []byte, name string, rec *record, err error) {
	defs, err := r.store.Subscriptions(ctx, k.topic)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, "", nil, nil
		}
		return nil, "", nil, err
	}
	return findDefinition(defs, k)
}

// findDefinition is storedDefinition in defs, the stored definitions of k's topic.
func findDefinition(defs []store.Definition, k subKey) (raw []byte, name string, rec *record, err error) {
	for _, d := range defs {
		if fold(d.Name) == fold(k.name) {
			var rec record
			if err := json.Unmarshal(d.Spec, &rec); err != nil {
				return nil, "", nil, recordDamaged(k, err)
			}
			return d.Spec, d.Name, &rec, nil
		}
	}
	return nil, "", nil, nil
}

// recordDamaged is the error of a subscription's stored record that the store reads back
// but that does not decode (err): damage, or a record something other than this release of
// egrid wrote. It wraps [store.ErrCorrupt], so [storeFailure] makes it [ErrStoreDamaged]:
// retrying does not help. No node serves such a record (each logs it as it reads it).
func recordDamaged(k subKey, err error) error {
	return fmt.Errorf("event subscription %q of topic %q: its stored record does not decode (%v), so no node serves it: %w; restore the store from a backup, or remove the record from the store, then create the subscription again",
		clip.String(k.name), k.topic, err, store.ErrCorrupt)
}

// encodeRecord is the record the store keeps for a subscription: spec with prov.
func encodeRecord(spec *SubscriptionSpec, prov *provisioned) ([]byte, error) {
	// The same JSON as a record, without copying the spec (a copy per create).
	rec := struct {
		*SubscriptionSpec
		Egrid *provisioned `json:"egrid,omitempty"`
	}{SubscriptionSpec: spec}
	if !prov.empty() {
		rec.Egrid = prov
	}
	return json.Marshal(&rec)
}

// storeSubscription writes a subscription's record. create says the subscription was found
// absent: it is created with the store's create-if-absent ([store.Store.CreateSubscription]),
// so a record another node created since that read is not written over, and the error then
// wraps [store.ErrExists]. Called in the topic's turn, never with r.mu held.
func (r *Router) storeSubscription(ctx context.Context, k subKey, spec *SubscriptionSpec, prov *provisioned, create bool) error {
	raw, err := encodeRecord(spec, prov)
	if err != nil {
		return err
	}
	write := r.store.PutSubscription
	if create {
		write = r.store.CreateSubscription
	}
	if err := write(ctx, k.topic, k.name, raw); errors.Is(err, store.ErrDamaged) || errors.Is(err, store.ErrExists) {
		return fmt.Errorf("saving event subscription %q: %w", clip.String(k.name), err)
	} else if err != nil {
		return storeFailure(fmt.Sprintf("saving event subscription %q", k.name), err)
	}
	return nil
}

// restoreSubscription loads a stored subscription at startup. It returns the config of the
// actor to start, or nil for a subscription that must not deliver (awaiting validation,
// failed, or expired — its expiry timer deletes it at once). Called by restore, before the
// topic is added to the router.
func (r *Router) restoreSubscription(t *topicRuntime, d store.Definition) (*actors.SubscriptionConfig, error) {
	var rec record
	if err := json.Unmarshal(d.Spec, &rec); err != nil {
		return nil, err
	}
	r.mu.RLock()
	_, _, dup := t.sub(d.Name)
	r.mu.RUnlock()
	if dup {
		// Stored by an egrid that compared names by case: the first one is served, the
		// other is kept in the store untouched for an operator to export or delete.
		r.log.Error("a stored event subscription differs from another only in case and is not served: names are case-insensitive", logattr.Topic, t.name, logattr.Subscription, d.Name)
		return nil, nil
	}
	r.life.hold() // New releases the timers armed here once the router is complete
	k := subKey{t.name, d.Name}
	spec := rec.SubscriptionSpec
	r.mu.Lock() // in cluster mode the topic is served while another node's change is applied
	t.putSub(d.Name, &spec)
	t.setLife(d.Name, d.Life)
	r.mu.Unlock()
	r.life.set(k, rec.Egrid)
	now := r.deps.Now()
	r.life.scheduleExpiry(k, spec.ExpirationTimeUTC.Sub(now), spec.ExpirationTimeUTC, r.expire)
	switch rec.Egrid.state() {
	case StateAwaitingManualAction:
		hash := rec.Egrid.TokenHash
		r.life.begin(k, hash)
		r.life.commit(hash, rec.Egrid.Deadline.Sub(now), func() { r.closeValidationWindow(hash) })
		return nil, nil
	case StateFailed:
		return nil, nil
	}
	if !spec.ExpirationTimeUTC.IsZero() && !spec.ExpirationTimeUTC.After(now) {
		return nil, nil
	}
	st := t.load()
	res, err := spec.validate(&st.spec, r.cfg.TimeScale)
	if err == nil {
		// A dead-letter destination on a router started without a dead-letter store (egrid
		// serve without --minio-endpoint): delivering would drop every event that ends
		// undelivered, which create refuses for the same reason.
		err = r.checkDeadLetterDestination(d.Name, &spec)
	}
	if err != nil {
		// Stored by an egrid that accepted it (a check added since, or a dead-letter store
		// it had): refusing it here would keep the whole router from starting, and the
		// admin API that could fix it with it. It is served as Failed, its stored state
		// untouched — its cursor holds the journal back, so none of its events is trimmed
		// — until a PUT that passes replaces it, or a restart with what it needs.
		r.log.Error("a stored event subscription is not valid and does not deliver: update (PUT) it with a valid definition, or delete it", logattr.Topic, t.name, logattr.Subscription, d.Name, "err", err)
		r.life.set(k, &provisioned{State: StateFailed, keepsEvents: true,
			Message: fmt.Sprintf("the stored definition is not valid (%s): it does not deliver, and its events are kept; update (PUT) it with a valid definition, or delete it", strings.ReplaceAll(err.Error(), "\n", "; "))})
		return nil, nil
	}
	return r.buildSubscriptionConfig(t, st, d.Name, &spec, res, rec.Egrid)
}

// keepHidden fills in what reads leave out — the endpoint URL and the values of secret static
// headers — from the stored spec, so a definition read back and PUT again (or `egrid
// event-subscription update`) keeps them. The endpoint URL is kept only when the PUT names no
// other endpoint (endpointBaseUrl, when given, must match); a secret value only for a static
// secret mapping of the same header name.
func keepHidden(spec, prev *SubscriptionSpec) error {
	np, pp := &spec.Destination.Properties, &prev.Destination.Properties
	webhooks := strings.EqualFold(spec.Destination.EndpointType, EndpointWebHook) && strings.EqualFold(prev.Destination.EndpointType, EndpointWebHook)
	if np.EndpointURL == "" && webhooks && pp.EndpointURL != "" {
		if np.EndpointBaseURL != "" && np.EndpointBaseURL != baseURL(pp.EndpointURL) {
			return errors.New("destination.properties.endpointUrl: required when endpointBaseUrl names another endpoint: set the full endpoint URL")
		}
		np.EndpointURL = pp.EndpointURL
	}
	if len(np.DeliveryAttributeMappings) > 0 {
		np.DeliveryAttributeMappings = slices.Clone(np.DeliveryAttributeMappings)
	}
	for i := range np.DeliveryAttributeMappings {
		m := &np.DeliveryAttributeMappings[i]
		if !strings.EqualFold(m.Type, MappingStatic) || !m.Properties.IsSecret || m.Properties.Value != "" {
			continue
		}
		for _, old := range pp.DeliveryAttributeMappings {
			if strings.EqualFold(old.Name, m.Name) && strings.EqualFold(old.Type, MappingStatic) && old.Properties.IsSecret {
				m.Properties.Value = old.Properties.Value
			}
		}
	}
	return nil
}

// Redacted returns the spec as reads show it: endpointBaseUrl filled in, endpointUrl left out
// when it has a query string or user info, and secret static header values left out.
func (s SubscriptionSpec) Redacted() SubscriptionSpec {
	p := &s.Destination.Properties
	if p.EndpointURL != "" {
		p.EndpointBaseURL = baseURL(p.EndpointURL)
		if p.EndpointBaseURL != p.EndpointURL {
			p.EndpointURL = ""
		}
	}
	if len(p.DeliveryAttributeMappings) > 0 {
		ms := slices.Clone(p.DeliveryAttributeMappings)
		for i := range ms {
			if ms[i].Properties.IsSecret {
				ms[i].Properties.Value = ""
			}
		}
		p.DeliveryAttributeMappings = ms
	}
	return s
}

// baseURL is an endpoint URL without query string, fragment and user info ("" when it does
// not parse).
func baseURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}).String()
}

// withHeaders gives a Go sink the subscription's custom delivery headers in Batch.Headers,
// resolved like a webhook's (dynamic values from the batch's first event), and, when a
// dynamic one takes its value from the event, each event's own in Batch.EventHeaders: a
// broker sends each event as a message of its own, with its own values. The wrapper of an
// [actors.ReleasingSink] is one too.
func withHeaders(s sinks.Sink, hm sinks.HeaderMappings) sinks.Sink {
	if len(hm) == 0 {
		return s
	}
	perEvent := hm.HasDynamic()
	deliver := sinks.Func(func(ctx context.Context, b *sinks.Batch) error {
		var first *schemas.Event
		if len(b.Events) > 0 {
			first = b.Events[0]
		}
		nb := *b
		in := b.Encoding().In
		nb.Headers = withDefaults(hm.Resolve(first, in), b.Headers)
		if perEvent && len(b.Events) > 1 {
			nb.EventHeaders = make([]map[string]string, len(b.Events))
			nb.EventHeaders[0] = nb.Headers
			for i, ev := range b.Events[1:] {
				nb.EventHeaders[i+1] = withDefaults(hm.Resolve(ev, in), b.Headers)
			}
		}
		err := s.Deliver(ctx, &nb)
		b.StatusCode = nb.StatusCode
		return err
	})
	if r, ok := s.(actors.ReleasingSink); ok {
		return releasingFunc{Func: deliver, release: r.Release}
	}
	return deliver
}

// releasingFunc is a wrapper of a [actors.ReleasingSink] (withHeaders) that releases it: a
// wrapper that hid Release left the broker connection of every subscription with custom
// delivery headers open after the subscription stopped.
type releasingFunc struct {
	sinks.Func
	release func()
}

// Release implements [actors.ReleasingSink].
func (f releasingFunc) Release() { f.release() }

// withDefaults adds to headers those of defaults it does not set, and returns it.
func withDefaults(headers, defaults map[string]string) map[string]string {
	for name, v := range defaults {
		if _, set := headers[name]; !set {
			headers[name] = v
		}
	}
	return headers
}

// attemptBudget is the time a subscription actor gives one attempt: the response timeout,
// plus, under a WebHook-Allowed-Rate cap, the longest wait for a turn when every attempt in
// flight queues for the rate.
func attemptBudget(timeout time.Duration, perMinute, maxInFlight int) time.Duration {
	if timeout <= 0 {
		timeout = sinks.DefaultTimeout
	}
	if perMinute <= 0 {
		return timeout
	}
	if maxInFlight <= 0 {
		maxInFlight = actors.DefaultMaxInFlight
	}
	return timeout + time.Duration(maxInFlight)*(time.Minute/time.Duration(perMinute))
}

// Retries of the deletion of an expired subscription: the first expiryRetryMin after the
// deletion failed, each later one twice as long after, up to expiryRetryMax.
const (
	expiryRetryMin = 5 * time.Second
	expiryRetryMax = 5 * time.Minute
)

// expire deletes a subscription whose expirationTimeUtc has come (eventgrid-behaviour.md
// §3.1), unless it was updated to another expiration meanwhile.
func (r *Router) expire(k subKey, at time.Time) { r.expireTry(k, at, 0) }

// expireTry is the deletion of an expired subscription, tried for the (n+1)th time. A
// deletion that fails — its actor did not stop in time, the store refused the delete — is
// logged and tried again after a bounded back-off (expiryRetryMin doubling to
// expiryRetryMax), until it succeeds, the subscription is updated to another expiration or
// deleted, or the router closes: a subscription must not go on delivering past its
// expiration until the next start.
func (r *Router) expireTry(k subKey, at time.Time, n int) {
	var due bool
	if _, s, _, err := r.lookup(k.topic, k.name); err == nil {
		due = s.ExpirationTimeUTC.Equal(at)
	}
	if !due {
		return
	}
	err := r.DeleteSubscription(context.Background(), k.topic, k.name)
	switch {
	case err == nil:
		r.log.Info("event subscription expired and was deleted", logattr.Topic, k.topic, logattr.Subscription, k.name, "expirationTimeUtc", at.UTC().Format(time.RFC3339))
	case errors.Is(err, ErrSubscriptionNotFound), errors.Is(err, ErrTopicNotFound), errors.Is(err, ErrClosed):
	default:
		wait := min(expiryRetryMin<<min(n, 10), expiryRetryMax)
		if r.life.retryExpiry(k, at, wait, func() { r.expireTry(k, at, n+1) }) {
			r.log.Error("deleting an expired event subscription failed; it may deliver until a retry deletes it", logattr.Topic, k.topic, logattr.Subscription, k.name,
				"expirationTimeUtc", at.UTC().Format(time.RFC3339), "attempt", n+1, "retryIn", wait, "err", err)
		}
	}
}

// CheckPublicURL checks a value for [Config.PublicURL] ("" is fine), and names it in its error
// by setting: the config key, flag or environment variable it was given by ([Config.Validate]
// says publicUrl).
func CheckPublicURL(setting, raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
		return fmt.Errorf("%s %q is invalid: use the absolute http or https URL (without query string) at which endpoints reach this server, e.g. https://egrid.example.com", setting, clip.String(raw))
	}
	return nil
}
