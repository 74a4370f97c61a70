package router

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/schemas/clip"
	"github.com/egridio/egrid/sinks/webhook"
)

// Timing of endpoint validation (SPEC §2.5, eventgrid-behaviour.md §5.2). Neither is divided
// by [Config.TimeScale]: they bound a conversation with an endpoint or a person, not a
// delivery policy, exactly as HTTP timeouts are not scaled.
const (
	// ValidationRetryDelay is the wait before the one retry of a validation handshake that got
	// no answer, or a 408, 429 or 5xx answer. Each try is bounded by the subscription's
	// response timeout (30 s by default).
	ValidationRetryDelay = 5 * time.Second
	// ManualValidationWindow is how long a subscription stays AwaitingManualAction: its
	// endpoint answered the validation event with 200 but no validationResponse, and must GET
	// the validationUrl within this window, or the subscription becomes Failed. Event Grid's
	// current documentation says 10 minutes (an older page said 5).
	ManualValidationWindow = 10 * time.Minute
)

// ErrValidationURLUnknown is returned by [Router.CompleteValidation] for a validationUrl that
// is unknown, was used already or has expired.
var ErrValidationURLUnknown = errors.New("validation URL unknown, used or expired")

// ErrValidationFailed is wrapped by the error of a create or update whose endpoint refused the
// validation handshake or did not answer it (SPEC §2.5).
var ErrValidationFailed = errors.New("endpoint validation failed")

// Handshakes a WebHook subscription can pass.
const (
	handshakeValidationEvent = "SubscriptionValidation" // Event Grid and custom delivery schema
	handshakeAbuseProtection = "AbuseProtection"        // CloudEvents delivery schema
)

// handshakeKind names the handshake a subscription needs, or "" when it needs none: it is not
// a WebHook, it opted out with skipValidation, or the router skips validation.
func (r *Router) handshakeKind(spec *SubscriptionSpec, out schemas.Schema) string {
	if !strings.EqualFold(spec.Destination.EndpointType, EndpointWebHook) || spec.Destination.Properties.SkipValidation || r.cfg.SkipEndpointValidation {
		return ""
	}
	if out == schemas.CloudEvents {
		return handshakeAbuseProtection
	}
	return handshakeValidationEvent
}

// handshake validates a WebHook endpoint and returns the resulting provisioning record: one
// try, and one more after [ValidationRetryDelay] when the first failure may pass by itself. An
// endpoint that answers the validation event with 200 but no code leaves the subscription
// AwaitingManualAction with a registered validation (committed by the caller) — unless it
// fetched its validationUrl already. Errors wrap [ErrValidationFailed] and never show the
// endpoint's query string.
func (r *Router) handshake(ctx context.Context, k subKey, kind string, spec *SubscriptionSpec, res *resolved, topicID, baseURL string) (*provisioned, error) {
	p := spec.Destination.Properties
	try := func(attempt func() error) error {
		err := attempt()
		var he *webhook.HandshakeError
		if err == nil || !errors.As(err, &he) || !he.Transient() {
			return err
		}
		t := time.NewTimer(ValidationRetryDelay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return err
		}
		return attempt()
	}
	fail := func(err error) error {
		advice := "make the endpoint answer the handshake, or set destination.properties.skipValidation: true for a trusted internal endpoint"
		return fmt.Errorf("event subscription %q: %w: %v; %s", k.name, ErrValidationFailed, err, advice)
	}

	if kind == handshakeAbuseProtection {
		var rate int
		err := try(func() (err error) {
			rate, err = webhook.RequestDelivery(ctx, r.deps.HTTPClient, webhook.AbuseProtectionRequest{URL: p.EndpointURL, Headers: res.headers, Timeout: res.timeout})
			return err
		})
		if err != nil {
			return nil, fail(err)
		}
		return &provisioned{Handshake: kind, DeliveryRate: rate}, nil
	}

	code := uuid.NewString()
	token, hash, err := newValidationToken()
	if err != nil {
		return nil, err
	}
	now := r.deps.Now().UTC()
	var validationURL string
	if baseURL != "" {
		q := url.Values{"id": {code}, "t": {now.Format(time.RFC3339Nano)}, "apiVersion": {"2018-05-01-preview"}, "token": {token}}
		validationURL = strings.TrimRight(baseURL, "/") + "/eventsubscriptions/" + url.PathEscape(k.name) + "/validate?" + q.Encode()
	}
	r.life.begin(k, hash)
	var v webhook.Validation
	err = try(func() (err error) {
		v, err = webhook.ValidateSubscription(ctx, r.deps.HTTPClient, webhook.ValidationRequest{
			URL: p.EndpointURL, Subscription: k.name, TopicID: topicID, EventID: uuid.NewString(), Code: code,
			ValidationURL: validationURL, Time: now, Headers: res.headers, Timeout: res.timeout,
		})
		return err
	})
	switch {
	case err != nil:
		r.life.drop(hash)
		return nil, fail(err)
	case v == webhook.Validated || r.life.fetchedEarly(hash):
		r.life.drop(hash)
		return &provisioned{Handshake: kind}, nil
	case validationURL == "":
		r.life.drop(hash)
		return nil, fail(errors.New("the endpoint answered the SubscriptionValidation event with 200 but no validationResponse, and no validationUrl could be offered " +
			"(the router has no PublicURL: set router.Config.PublicURL, or server.publicUrl / --public-url for egrid serve, or create the subscription through the admin API)"))
	}
	return &provisioned{
		State: StateAwaitingManualAction, Handshake: kind, TokenHash: hash, Deadline: now.Add(ManualValidationWindow),
		Message: fmt.Sprintf("the endpoint answered the SubscriptionValidation event without validationResponse: it must GET the validationUrl it was sent before %s, or the subscription fails", now.Add(ManualValidationWindow).Format(time.RFC3339)),
	}, nil
}

// newValidationToken returns a random token for a validationUrl and its hash, which is all the
// store keeps.
func newValidationToken() (token, hash string, err error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", "", fmt.Errorf("generating a validation token: %w", err)
	}
	token = base64.RawURLEncoding.EncodeToString(b)
	return token, tokenHash(token), nil
}

func tokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// CompleteValidation completes the manual validation whose validationUrl — fetched for the
// subscription name with token — is still open (SPEC §2.5): the subscription becomes
// Succeeded and its delivery starts. A URL fetched while its handshake is still under way
// makes that handshake end Succeeded. It returns [ErrValidationURLUnknown] for a URL that is
// unknown, was used already or has expired — in cluster mode also for one whose window
// another node closed, or whose subscription another node updated, a moment ago, which this
// node had not heard of yet; the URL's token is the credential, no admin token is needed.
//
// In cluster mode the nodes sit behind one public URL, so the GET may reach a node other
// than the one that ran the handshake, before that node's notice of the stored record: a
// URL not pending on this node is looked up in the cluster's store (validationFresh), and
// one whose stored record still awaits that very validation, within its window, is
// completed here, as if the notice had come first. A URL fetched on another node while its
// handshake is still under way — before the record is stored — cannot be known there: it is
// [ErrValidationURLUnknown], and the endpoint must fetch it again once the create or update
// has answered (a limitation of cluster mode). A store that cannot be read makes it an
// error wrapping [ErrUnavailable], to retry; a stored record that is damaged, one wrapping
// [ErrStoreDamaged] (retrying does not help).
func (r *Router) CompleteValidation(ctx context.Context, name, token string) error {
	if token == "" {
		return ErrValidationURLUnknown
	}
	hash := tokenHash(token)
	p, committed := r.life.fetch(hash)
	if p == nil && r.cl != nil {
		var err error
		if p, committed, err = r.validationFresh(ctx, name, hash); err != nil {
			return err
		}
	}
	if p == nil || !strings.EqualFold(p.key.name, name) {
		return ErrValidationURLUnknown
	}
	if !committed {
		return nil
	}
	if err := r.completeValidation(ctx, p); err != nil {
		if errors.Is(err, ErrSubscriptionNotFound) {
			return ErrValidationURLUnknown
		}
		return err
	}
	return nil
}

// validationFresh looks up in the cluster's store, for CompleteValidation, a validation that
// is not pending on this node: another node ran its handshake and stored the subscription
// AwaitingManualAction, and this node has not heard of it yet (its notice is late or lost).
// It reads the subscriptions of the topics this node knows to hold one named name — of every
// topic it knows, up to maxSubscriptionListings, when none does —, and of the topics it does
// not know, through the shared, bounded reads of topiclookup.go (an unauthenticated GET costs
// the store at most what an unknown subscription name does), and applies them here
// (syncTopicDef): a stored record AwaitingManualAction registers its validation as at a
// start (restoreSubscription). It returns that validation when it is now pending and still
// open: its stored token hash is hash (compared in constant time) and its deadline has not
// passed. completeValidation then writes it Succeeded by compare-and-swap (swapValidation),
// so of two nodes fetching it at once one wins, and the node that runs the subscription
// starts it on the notice. Called out of any topic's turn: the reads take the turns of the
// topics they apply.
func (r *Router) validationFresh(ctx context.Context, name, hash string) (*pendingValidation, bool, error) {
	if ValidateSubscriptionName(name) != nil {
		return nil, false, nil
	}
	topics := r.topicsHolding(name)
	errs := make([]error, len(topics))
	var wg sync.WaitGroup
	for i, topic := range topics {
		wg.Go(func() { errs[i] = r.readSubscriptionFresh(ctx, topic, name) })
	}
	wg.Wait()
	p, committed := r.life.fetch(hash)
	if p == nil {
		if err := errors.Join(errs...); err != nil {
			return nil, false, err
		}
		return nil, false, nil
	}
	prov := r.life.get(p.key)
	if prov.state() != StateAwaitingManualAction || subtle.ConstantTimeCompare([]byte(prov.TokenHash), []byte(hash)) != 1 ||
		!r.deps.Now().Before(prov.Deadline) {
		return nil, false, nil // its window closes (closeValidationWindow), or another took its place
	}
	return p, committed, nil
}

// topicsHolding names the topics this node knows that hold a subscription named name, or,
// when none does, every topic it knows, up to maxSubscriptionListings (in name order).
func (r *Router) topicsHolding(name string) []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var holding, all []string
	for _, t := range r.topics {
		all = append(all, t.name)
		if _, _, ok := t.sub(name); ok {
			holding = append(holding, t.name)
		}
	}
	if len(holding) > 0 {
		return holding
	}
	slices.Sort(all)
	return all[:min(len(all), maxSubscriptionListings)]
}

// readSubscriptionFresh applies here the stored subscriptions of topic, and the topics this
// node does not know, with a read of the store shared with the other lookups
// (clusterRuntime.lookUp); a subscription name it did not find is remembered as missed, so
// the same URL fetched again within lookupInterval costs no read. It returns the error of a
// store that could not be read, or ctx's.
func (r *Router) readSubscriptionFresh(ctx context.Context, topic, name string) error {
	key := fold(topic) + "/" + fold(name) // names hold no '/'
	rd, err := r.cl.lookUp(ctx, key, topic)
	switch {
	case err != nil:
		return fmt.Errorf("event subscription %q: waiting for a read of the cluster's store: %w", clip.String(name), err)
	case rd == nil: // a read a moment ago did not find it
		return nil
	case errors.Is(rd.err, ErrClosed):
		return rd.err
	case rd.err != nil:
		return storeFailure(fmt.Sprintf("event subscription %q: reading the cluster's store", clip.String(name)), rd.err)
	case rd.subsErr[fold(topic)] != nil:
		return storeFailure(fmt.Sprintf("event subscription %q of topic %q: reading it from the cluster's store", clip.String(name), topic), rd.subsErr[fold(topic)])
	}
	if _, _, _, err := r.lookup(topic, name); errors.Is(err, ErrSubscriptionNotFound) {
		r.cl.missed(key, rd.start)
	}
	return nil
}

// completeValidation ends a committed manual validation: the subscription becomes Succeeded and
// its delivery starts. In cluster mode the record is written only while the stored one is
// still AwaitingManualAction with this validation (swapValidation): another node may have
// closed its window, or an update started another validation, a moment ago. The validation
// is then unknown ([ErrValidationURLUnknown]), nothing is written, and this node reads the
// subscription again from the store.
func (r *Router) completeValidation(ctx context.Context, p *pendingValidation) error {
	moved, err := r.completeInTurn(ctx, p)
	if moved {
		r.resyncSubscription(p.key)
		return fmt.Errorf("event subscription %q: %w: its validation window closed, or it was updated, on another node", p.key.name, ErrValidationURLUnknown)
	}
	return err
}

// completeInTurn is completeValidation in the topic's turn; moved reports a stored record
// that is no longer the one the validation belongs to.
func (r *Router) completeInTurn(ctx context.Context, p *pendingValidation) (moved bool, err error) {
	release, err := r.turns.acquire(ctx, p.key.topic)
	if err != nil {
		return false, fmt.Errorf("completing the validation of event subscription %q: %w", p.key.name, err)
	}
	defer release()
	t, spec, prov := r.awaiting(p)
	if spec == nil {
		return false, fmt.Errorf("event subscription %q of topic %q: %w", p.key.name, p.key.topic, ErrSubscriptionNotFound)
	}
	next := &provisioned{Handshake: prov.Handshake}
	sc, err := r.subscriptionConfigWith(t, p.key.name, spec, next)
	if err != nil {
		return false, err
	}
	if moved, err := r.swapValidation(ctx, p, spec, next); err != nil || moved {
		if moved {
			r.life.drop(p.hash)
		}
		return moved, err
	}
	r.life.drop(p.hash)
	r.life.set(p.key, next)
	if err := r.runSubscription(t, p.key.name, sc); err != nil {
		return false, err
	}
	r.log.Info("event subscription validated through its validationUrl", logattr.Topic, p.key.topic, logattr.Subscription, p.key.name)
	return false, nil
}

// swapValidation writes subscription p.key's record (spec with next) in place of its stored
// one, ending the manual validation p. Outside cluster mode this router is the store's only
// writer and the topic's turn makes awaiting's check and the write one step: it writes. In
// cluster mode another node may have written the record since this node read it — the
// endpoint fetched its validationUrl there, the window was closed there, the subscription
// was updated or deleted there —, so it reads the stored record and swaps it
// ([store.Store.SwapSubscription]) only while that is still AwaitingManualAction with p's
// token: moved reports it was not (or is no longer by the swap), and nothing was written.
// Called in the topic's turn.
func (r *Router) swapValidation(ctx context.Context, p *pendingValidation, spec *SubscriptionSpec, next *provisioned) (moved bool, err error) {
	if r.cl == nil {
		return false, r.storeSubscription(ctx, p.key, spec, next, false)
	}
	raw, name, rec, err := r.storedDefinition(ctx, p.key)
	if err != nil {
		return false, storeFailure(fmt.Sprintf("reading the stored record of event subscription %q", p.key.name), err)
	}
	if rec == nil || rec.Egrid.state() != StateAwaitingManualAction || rec.Egrid.TokenHash != p.hash {
		return true, nil
	}
	b, err := encodeRecord(spec, next)
	if err != nil {
		return false, err
	}
	switch err := r.store.SwapSubscription(ctx, p.key.topic, name, raw, b); {
	case errors.Is(err, store.ErrChanged), errors.Is(err, store.ErrNotFound):
		return true, nil
	case err != nil:
		return false, storeFailure(fmt.Sprintf("saving event subscription %q", p.key.name), err)
	}
	return false, nil
}

// resyncSubscription makes this node's view of subscription k the store's, after a write of
// another node it had not heard of made its own write moot (swapValidation), and tells the
// other nodes to read it too: a notice of the write they missed may have been lost for them
// as well. Called out of the topic's turn, in cluster mode.
func (r *Router) resyncSubscription(k subKey) {
	ctx, cancel := context.WithTimeout(r.cl.life, 30*time.Second)
	defer cancel()
	_ = r.syncTopic(ctx, k.topic) // the next full read catches up
	r.cl.node.Changed(k.topic, k.name)
}

// awaiting returns the subscription a manual validation belongs to while it is still
// AwaitingManualAction with that validation, or nils. Called in the topic's turn, so what it
// returns stays true until the turn is given back.
func (r *Router) awaiting(p *pendingValidation) (*topicRuntime, *SubscriptionSpec, *provisioned) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.topics[fold(p.key.topic)]
	if !ok {
		return nil, nil, nil
	}
	spec, _, ok := t.sub(p.key.name)
	prov := r.life.get(p.key)
	if !ok || prov.state() != StateAwaitingManualAction || prov.TokenHash != p.hash {
		return nil, nil, nil
	}
	return t, spec, prov
}

// closeValidationWindow fails a subscription whose validationUrl was not fetched in time. The
// change is one write of its record (the definition with the Failed provisioning record), so
// a failed write loses nothing: the stored record stays AwaitingManualAction with a window
// that has passed, and the next start closes it again. Its delivery state is then reset
// (startFresh), freeing what it had parked; an update that validates it again resets it once
// more and starts it afresh, like a new subscription (commitSubscription).
//
// In cluster mode every node that knows the subscription arms the window's timer from the
// stored deadline, but only the node holding the cluster's duty closes it (closeInCluster).
func (r *Router) closeValidationWindow(hash string) {
	r.life.mu.Lock()
	p := r.life.pending[hash]
	r.life.mu.Unlock()
	if p == nil {
		return
	}
	if r.cl != nil {
		r.closeInCluster(p)
		return
	}
	release, err := r.turns.acquire(context.Background(), p.key.topic)
	if err != nil {
		return
	}
	defer release()
	r.life.drop(hash)
	_, spec, prov := r.awaiting(p)
	if spec == nil {
		return
	}
	next := failedValidation(prov)
	ctx := context.Background()
	if err := r.storeSubscription(ctx, p.key, spec, next, false); err != nil {
		r.log.Error("saving a subscription whose validation failed: it is Failed until the next start, which closes its window again", logattr.Topic, p.key.topic, logattr.Subscription, p.key.name, "err", err)
	} else if err := r.startFresh(ctx, p.key); err != nil {
		r.log.Warn("resetting the delivery state of a subscription whose validation failed; an update that validates it again resets it", logattr.Topic, p.key.topic, logattr.Subscription, p.key.name, "err", err)
	}
	r.life.set(p.key, next)
	r.log.Warn("event subscription validation failed: its validationUrl was not fetched in time", logattr.Topic, p.key.topic, logattr.Subscription, p.key.name, "window", ManualValidationWindow)
}

// failedValidation is the provisioning record of a subscription whose manual validation
// window closed.
func failedValidation(prov *provisioned) *provisioned {
	return &provisioned{
		State: StateFailed, Handshake: prov.Handshake,
		Message: fmt.Sprintf("endpoint validation failed: the endpoint answered the SubscriptionValidation event without validationResponse and did not GET its validationUrl within %s; update (PUT) the subscription to validate again", ManualValidationWindow),
	}
}

// closeInCluster is closeValidationWindow in cluster mode. A node may not have heard yet of
// the record another node wrote when the endpoint fetched its validationUrl there, so a
// window closed on every node could overwrite a validated subscription with Failed. Only
// the node holding the cluster's duty closes windows; another looks again after the lease
// TTL (the duty may move to it meanwhile) for as long as the subscription is
// AwaitingManualAction here. The duty's node writes the Failed record only while the stored
// one is still AwaitingManualAction with this validation (swapValidation), then tells the
// other nodes; a record that moved on it leaves as it is and reads again from the store. A
// store it cannot read or write makes it try again after the lease TTL.
func (r *Router) closeInCluster(p *pendingValidation) {
	again := r.cl.node.Options().LeaseTTL
	rearm := func() { r.life.rearm(p.hash, again, func() { r.closeValidationWindow(p.hash) }) }
	ctx, cancel := context.WithTimeout(r.cl.life, 30*time.Second)
	defer cancel()
	release, err := r.turns.acquire(ctx, p.key.topic)
	if err != nil {
		rearm() // closing: the lifecycle arms nothing any more
		return
	}
	_, spec, prov := r.awaiting(p)
	if spec == nil {
		release()
		r.life.drop(p.hash)
		return
	}
	if !r.cl.node.Duty() {
		release()
		rearm()
		return
	}
	next := failedValidation(prov)
	moved, err := r.swapValidation(ctx, p, spec, next)
	switch {
	case err != nil:
		release()
		r.log.Warn("closing the validation window of an event subscription: the store failed; trying again later", logattr.Topic, p.key.topic, logattr.Subscription, p.key.name, "retryIn", again, "err", err)
		rearm()
		return
	case moved:
		r.life.drop(p.hash)
		release()
		r.log.Info("the validation window of an event subscription passed, but its stored record had moved on (validated, updated or failed on another node): nothing written; reading it again from the store", logattr.Topic, p.key.topic, logattr.Subscription, p.key.name)
		r.resyncSubscription(p.key)
		return
	}
	if err := r.startFresh(ctx, p.key); err != nil {
		r.log.Warn("resetting the delivery state of a subscription whose validation failed; an update that validates it again resets it", logattr.Topic, p.key.topic, logattr.Subscription, p.key.name, "err", err)
	}
	r.life.drop(p.hash)
	r.life.set(p.key, next)
	release()
	r.cl.node.Changed(p.key.topic, p.key.name)
	r.log.Warn("event subscription validation failed: its validationUrl was not fetched in time", logattr.Topic, p.key.topic, logattr.Subscription, p.key.name, "window", ManualValidationWindow)
}

// startFresh moves a subscription's delivery state to where a new subscription starts
// ([store.Store.PutSubscription]): its cursor to the journal's end, no parked events, no
// probation. A subscription whose validation failed gets it when an update validates it
// again, as Event Grid starts it afresh: it gets only events published from then on, not
// those the journal still holds from while it was Failed (for other subscriptions), nor the
// retries it had parked before. Called in the topic's turn while no actor of the
// subscription runs.
func (r *Router) startFresh(ctx context.Context, k subKey) error {
	st, err := r.store.LoadSubscriptionIndex(ctx, k.topic, k.name)
	if err != nil {
		return err
	}
	last, err := r.store.LastSeq(ctx, k.topic)
	if err != nil {
		return err
	}
	u := store.Update{Epoch: st.Epoch, Cursor: last, Probation: []byte{}}
	for _, p := range st.Parked {
		u.Delete = append(u.Delete, p.Seq)
	}
	return r.store.UpdateSubscription(ctx, k.topic, k.name, u)
}
