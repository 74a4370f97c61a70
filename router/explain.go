package router

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/cluster"
	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/schemas/clip"
	"github.com/egridio/egrid/sinks"
)

// Explain: every attempt and decision is recorded per event, so an operator can ask why an
// event went where it did ([Router.Explain], GET .../events/{id}, `egrid explain`).
//
// The subscription actors report each finished attempt (actors.AttemptRecord, which carries the
// retry policy's structured [retry.Explanation] of each decision); the router hands it to the
// history writer — one goroutine per router — and returns at once: nothing is written inside
// an actor's Receive. The writer merges what has queued into one [store.Store.PutHistory] per
// subscription (unsynced, like subscription state), keeping an event's latest
// HistoryConfig.Attempts attempts, and expires histories HistoryConfig.Retention after the
// event's latest step. A history is advisory: when the queue is full, or the store refuses a
// write, records are dropped and logged, never delivery. A record carries the epoch of the
// subscription its actor loaded, and the write hands it to the store, which writes nothing
// for a subscription since deleted and created again under the name (store.ErrStaleEpoch,
// dropped unlogged as a deleted subscription's write is): no late write of a deleted
// subscription shows up in the explanations of its successor. A replay's records carry no
// epoch; a delete waits for the writer instead (stopReplaysForDelete). In cluster mode that
// holds only on the node the delete reached: a replay runs on the node running the
// subscription, which stops it when it learns of the delete (a notice, or its next poll), and
// histories it wrote until then are not checked. Only if the name is created again within
// that moment can one of them show up under the new subscription — for an event id the new
// one never delivered, since the JetStream store refuses a write over a history the new
// subscription's node wrote (its mark is newer).

// HistoryConfig configures the delivery histories behind [Router.Explain].
type HistoryConfig struct {
	// Attempts is how many of an event's latest attempts its history keeps (default 10);
	// older ones are counted in [Explanation.EarlierAttempts].
	Attempts int `json:"attempts,omitempty" yaml:"attempts,omitempty"`
	// Retention is how long a history is kept after the event's latest step: after it ended,
	// or after the due time of its next attempt while it is being retried (default 24h).
	Retention time.Duration `json:"retention,omitempty" yaml:"retention,omitempty"`
}

// Defaults of a [HistoryConfig].
const (
	DefaultHistoryAttempts  = 10
	DefaultHistoryRetention = 24 * time.Hour
)

func (c HistoryConfig) withDefaults() HistoryConfig {
	if c.Attempts <= 0 {
		c.Attempts = DefaultHistoryAttempts
	}
	if c.Retention <= 0 {
		c.Retention = DefaultHistoryRetention
	}
	return c
}

// Validate reports every problem of the config at once.
func (c HistoryConfig) Validate() error {
	var errs []error
	if c.Attempts < 0 || c.Attempts > 1000 {
		errs = append(errs, fmt.Errorf("history.attempts %d is invalid: use 1 to 1000 (0 for the default, %d)", c.Attempts, DefaultHistoryAttempts))
	}
	if c.Retention < 0 {
		errs = append(errs, fmt.Errorf("history.retention %v is invalid: use a positive duration such as 24h (0 for the default)", c.Retention))
	}
	return errors.Join(errs...)
}

// EventState is where an event's delivery stands, as [Router.Explain] tells it.
type EventState string

// Event states.
const (
	// EventRetrying: the event failed and waits for its next attempt.
	EventRetrying EventState = "Retrying"
	// EventDelivered: the destination accepted the event.
	EventDelivered EventState = "Delivered"
	// EventDeadLettered: the delivery ended and the event went to the dead-letter destination.
	EventDeadLettered EventState = "DeadLettered"
	// EventDropped: the delivery ended without a dead-letter destination, or the event was
	// dead-lettered and its record dropped unwritten ([StepDeadLetterDropped]); the event was
	// counted in DroppedEventCount.
	EventDropped EventState = "Dropped"
	// EventLocked: a consumer received the event from a queue subscription and holds its
	// lock: the latest step's lockedUntil says until when.
	EventLocked EventState = "Locked"
	// EventPending: the subscription holds the event and has made no attempt of it yet: it
	// waits behind other events, the subscription's in-flight limit or the endpoint's
	// probation.
	EventPending EventState = "Pending"
	// EventInFlight: an attempt of the event runs (since AttemptStarted): the destination has
	// not answered yet.
	EventInFlight EventState = "InFlight"
	// EventAvailable: the event waits on a queue subscription for its next receipt: released,
	// or its lock expired. NextAttempt, when set, is when a release's delay ends.
	EventAvailable EventState = "Available"
)

// Explanation is an event's delivery history on one subscription: when it was published, its
// latest attempts with the rule that decided each next step, and where it stands or ended.
// Durations are nanoseconds in JSON.
//
// On a queue (pull) subscription the attempts are the steps of the event's pull delivery
// ([ExplainedAttempt.Step]): each receipt, settlement, lock renewed or expired, and its end.
// An attempt's number is then the event's delivery count at that step; AttemptsMade the
// receipts so far and MaxDeliveryAttempts the subscription's maxDeliveryCount; the state is
// Locked or Available while the event waits for a settlement or a receipt, and Delivered
// once it is acknowledged.
type Explanation struct {
	Topic        string    `json:"topic"`
	Subscription string    `json:"subscription"`
	EventID      string    `json:"eventId"`
	PublishTime  time.Time `json:"publishTime"`
	// State is where the delivery stands.
	State EventState `json:"state"`
	// Attempts are the latest attempts, oldest first (at most HistoryConfig.Attempts of them);
	// EarlierAttempts counts the older ones no longer kept.
	Attempts        []ExplainedAttempt `json:"attempts"`
	EarlierAttempts int                `json:"earlierAttempts,omitempty"`
	// AttemptsMade is the number of attempts so far; MaxDeliveryAttempts the subscription's
	// limit, and AttemptsLeft what remains of it while the event is retrying (or, on a queue
	// subscription, Locked or Available).
	AttemptsMade        int `json:"attemptsMade"`
	MaxDeliveryAttempts int `json:"maxDeliveryAttempts"`
	AttemptsLeft        int `json:"attemptsLeft,omitempty"`
	// CutAttempts counts the attempts the subscription's stop cut before their answer (rule
	// Stopped: a shutdown past its stop grace, an update, a move to another node). They are
	// not in AttemptsMade and do not count against MaxDeliveryAttempts: the stop, not the
	// endpoint or the event, ended them. A cut attempt has the number of the attempt made
	// after it.
	CutAttempts int `json:"cutAttempts,omitempty"`
	// NextAttempt is when the next attempt is due, while the event is retrying.
	NextAttempt time.Time `json:"nextAttempt,omitzero"`
	// AttemptStarted is when the attempt in flight started, while the state is InFlight.
	AttemptStarted time.Time `json:"attemptStarted,omitzero"`
	// Deadline is the end of the event's time to live; TimeToLiveLeft what remained of it at
	// the time of the request, while the event is retrying (or Locked or Available).
	Deadline       time.Time     `json:"deadline,omitzero"`
	TimeToLiveLeft time.Duration `json:"timeToLiveLeft,omitempty"`
	// Reason is why the delivery ended (DeadLettered or Dropped): the deadLetterReason or the
	// DroppedEventCount reason.
	Reason schemas.Reason `json:"reason,omitempty"`
	// DeadLetterObject is the key of the dead-letter object holding the event once it is
	// written (its bucket is the subscription's blobContainerName); empty while the record
	// waits in the outbox. A record dropped unwritten ends the history instead: the state is
	// then Dropped, reason DeadLetterDestinationUnavailable ([StepDeadLetterDropped]).
	DeadLetterObject string `json:"deadLetterObject,omitempty"`
	// DeadLetterSearch, set when DeadLetterObject is empty because the search for it stopped
	// or could not run, says so: where it stopped and how to look further (the search reads at
	// most [ExplainDeadLetterObjects] objects, and [ExplainDeadLetterBytes] of them, written
	// after the event ended, oldest first), or that the dead-letter store could not be read
	// and why (MinIO down, say): the object may then be written already.
	DeadLetterSearch string `json:"deadLetterSearch,omitempty"`
}

// ExplainedAttempt is one attempt of an event, or the step that ended it when it came due
// without an attempt (NoAttempt).
type ExplainedAttempt struct {
	// Attempt is the attempt's number for this event (1 for its first). Only attempts that
	// count against maxDeliveryAttempts are numbered: one cut by the subscription's stop
	// (rule Stopped, [Explanation.CutAttempts]) has the number of the attempt after it.
	Attempt  int           `json:"attempt"`
	Time     time.Time     `json:"time"`
	Duration time.Duration `json:"duration,omitempty"`
	// Outcome is the attempt's outcome (Delivered, Busy, ...); StatusCode the HTTP status, 0
	// when there was none.
	Outcome    string `json:"outcome,omitempty"`
	StatusCode int    `json:"statusCode,omitempty"`
	// Response is an excerpt of what the destination answered (at most 256 bytes; the
	// destination's URL is shown without its query string or user info).
	Response string `json:"response,omitempty"`
	// HeldBack is how long after its due time (or its publish time, for a first attempt) the
	// attempt went out: the endpoint's probation, or the subscription's in-flight limit,
	// held it. Waits under a second are dispatch latency and left out, except for a probe.
	// Probe says it was the probe that ended a probation (SPEC §2.2).
	HeldBack time.Duration `json:"heldBack,omitempty"`
	Probe    bool          `json:"probe,omitempty"`
	// NoAttempt says the event came due and ended without an attempt.
	NoAttempt bool `json:"noAttempt,omitempty"`
	// Step DeadLetterDropped ([StepDeadLetterDropped]), on any subscription, ends the
	// history of a dead-lettered event whose record was dropped unwritten: the dead-letter
	// destination failed, or refused, its writes for four hours; Explanation says how.
	// Otherwise Step, set on a queue subscription's history only, is the pull step: Received,
	// Acknowledged, Released, Rejected, LockRenewed, LockExpired, or Ended (its time to live
	// passed while it waited, or it reached maxDeliveryCount without a consumer's step). A
	// step that ended the event has its Decision (DeadLetter or Drop), and Rule when one
	// applies (MaxAttempts, TimeToLive); a release with a delay has Due, when the event is
	// available again.
	Step string `json:"step,omitempty"`
	// LockedUntil is when the lock of a Received or LockRenewed step expires.
	LockedUntil time.Time `json:"lockedUntil,omitzero"`
	// Decision is what followed: "Retry", "DeadLetter", "Drop", or empty when delivered;
	// Rule the policy rule that decided ([retry.Rule]); Explanation the decision in words
	// ([retry.Decision.Explain]); Due the next attempt's due time for a retry.
	Decision    string    `json:"decision,omitempty"`
	Rule        string    `json:"rule,omitempty"`
	Explanation string    `json:"explanation"`
	Due         time.Time `json:"due,omitzero"`
}

// ErrEventNotFound is returned (wrapped) by [Router.Explain] for an event the subscription
// has no delivery history of.
var ErrEventNotFound = errors.New("event not found")

// ErrHistoryDamaged is wrapped by Explain's error when the event's stored delivery history
// does not decode, or the store finds it damaged ([store.ErrCorrupt]: in a disk block that
// fails its checksum, say): the store holds something egrid did not write there (damage, or a
// record of another version). Retrying does not help: the store has to be restored from a
// backup (egrid store check lists the damage). The event's delivery is not affected; only its
// explanation is lost.
var ErrHistoryDamaged = errors.New("delivery history damaged")

// Explain returns the delivery history of event eventID on a subscription (names in any
// case). It first waits for the history writer to write what was reported before the call,
// so an attempt that finished before Explain — one [Deps.OnAttempt] observed, say — is in its
// answer. An unknown topic or
// subscription is [ErrTopicNotFound] or [ErrSubscriptionNotFound]; an event the subscription
// has no history of (never matched, never attempted yet, or its history has expired)
// [ErrEventNotFound]; a history stored damaged, or that the store finds damaged,
// [ErrHistoryDamaged]; a store that cannot read the history wraps [ErrUnavailable] (retry).
func (r *Router) Explain(ctx context.Context, topic, sub, eventID string) (*Explanation, error) {
	t, spec, name, err := r.lookup(topic, sub)
	if err != nil {
		return nil, err
	}
	if err := r.history.flush(ctx); err != nil {
		return nil, fmt.Errorf("explaining event %q: %w", clip.String(eventID), err)
	}
	now := r.deps.Now()
	rec, err := r.store.History(ctx, t.name, name, eventID, now)
	if errors.Is(err, store.ErrNotFound) {
		// No step of it is written yet, but the subscription may hold it: its first attempt
		// in flight, or none made (behind other events, the in-flight limit or a probation).
		held, herr := r.heldEvent(ctx, t.name, name, eventID)
		if herr != nil {
			return nil, fmt.Errorf("explaining event %q: %w", clip.String(eventID), herr)
		}
		if held != nil {
			return explainHeld(t.name, name, eventID, held, now), nil
		}
		return nil, fmt.Errorf("event %q of event subscription %q of topic %q: %w: it has no delivery history and the subscription does not hold it (not published to this subscription, or its history expired)", clip.String(eventID), name, t.name, ErrEventNotFound)
	}
	if errors.Is(err, store.ErrCorrupt) {
		return nil, fmt.Errorf("explaining event %q: %w: %w", clip.String(eventID), ErrHistoryDamaged, err)
	}
	if err != nil && ctx.Err() == nil {
		return nil, fmt.Errorf("explaining event %q: reading its delivery history: %w: %w", clip.String(eventID), ErrUnavailable, err)
	}
	if err != nil {
		return nil, fmt.Errorf("explaining event %q: %w", clip.String(eventID), err)
	}
	var e Explanation
	if err := decodeExplanation(rec.Payload, rec.EventID, &e); err != nil {
		return nil, fmt.Errorf("explaining event %q: %w: %w", clip.String(eventID), ErrHistoryDamaged, err)
	}
	e.Topic, e.Subscription = t.name, name
	if e.State == EventRetrying || e.State == EventLocked || e.State == EventAvailable {
		e.AttemptsLeft = max(e.MaxDeliveryAttempts-e.AttemptsMade, 0)
		e.TimeToLiveLeft = max(e.Deadline.Sub(now), 0)
	}
	if e.State == EventDeadLettered && spec.DeadLetterDestination != nil && r.dead != nil && len(e.Attempts) > 0 {
		e.DeadLetterObject, e.DeadLetterSearch = r.deadLetterObjectOf(ctx, t.name, name, eventID, e.Attempts[len(e.Attempts)-1].Time)
	}
	return &e, nil
}

// heldEvent asks the subscription's actor (on this node) where event id stands if it holds the
// event, nil when it does not. The actor answers from memory, in its turn, without I/O; one
// still reading its stored state does not know yet, and the error wraps
// [ErrSubscriptionLoading] (try again). In cluster mode a subscription another node runs is
// not asked: nil.
func (r *Router) heldEvent(ctx context.Context, topic, name, id string) (*actors.HeldEvent, error) {
	if r.cl != nil && !r.cl.node.Running(cluster.Key{Topic: topic, Subscription: name}) {
		return nil, nil
	}
	t, err := r.topic(topic)
	if err != nil {
		return nil, err
	}
	timeout, err := requestTimeout(ctx, 10*time.Second)
	if err != nil {
		return nil, err
	}
	res, err := r.system.Root.RequestFuture(t.pid, &actors.GetStatus{Subscription: name, EventID: id}, timeout).Result()
	if err != nil {
		return nil, fmt.Errorf("asking event subscription %q: %w", name, err)
	}
	switch v := res.(type) {
	case *actors.Status:
		if v.Loading {
			return nil, fmt.Errorf("event subscription %q: %w: it reads its stored state since %s; ask again", name, ErrSubscriptionLoading, v.LoadingSince.UTC().Format(time.RFC3339))
		}
		return v.Event, nil
	case error:
		if errors.Is(v, actors.ErrNotRunning) {
			if _, _, _, lerr := r.lookup(topic, name); lerr != nil {
				return nil, lerr
			}
			// A subscription that runs no actor (awaiting its validation, failed, expired)
			// holds no event: the event is not found, which asking again does not change.
			return nil, nil
		}
		return nil, v
	}
	return nil, nil
}

// explainHeld is the explanation of an event the subscription holds but has no history step
// of: InFlight while its attempt runs, Pending while it waits for one (Retrying, with its due
// time, while it waits parked).
func explainHeld(topic, sub, id string, h *actors.HeldEvent, now time.Time) *Explanation {
	e := &Explanation{
		Topic: topic, Subscription: sub, EventID: id, PublishTime: h.PublishTime, Attempts: []ExplainedAttempt{},
		AttemptsMade: h.Attempts, MaxDeliveryAttempts: h.MaxAttempts, AttemptsLeft: max(h.MaxAttempts-h.Attempts, 0),
		Deadline: h.Deadline, TimeToLiveLeft: max(h.Deadline.Sub(now), 0),
	}
	switch {
	case h.InFlight:
		e.State, e.AttemptStarted = EventInFlight, h.AttemptStarted
	case !h.Due.IsZero():
		e.State, e.NextAttempt = EventRetrying, h.Due
	default:
		e.State = EventPending
	}
	return e
}

// Explain's search for a dead-lettered event's object reads at most ExplainDeadLetterObjects
// objects and, beyond the first, ExplainDeadLetterBytes of them, one at a time: the object is
// almost always the first written after the event ended (its record waits out the dead-letter
// delay, then goes out in the next write of the subscription's due records), and reading every
// object since, as the search did before, held the records of all of them in memory at once:
// gigabytes for a subscription that went on dead-lettering for days.
const (
	ExplainDeadLetterObjects = 64
	ExplainDeadLetterBytes   = 256 << 20
)

// deadLetterObjectOf finds the dead-letter object holding event id, written after the event
// ended at ended: its key, or "" when there is none yet (the record waits in the outbox) or the
// store cannot be read. When the search stops at its bounds before it found the object, the
// second result says so and how to look further; when it cannot run (the store does not
// answer), it says that, with the error.
//
// It lists only the keys of the hours from the event's end on (the object is named by the time
// its records are first written, after they ended), one hour at a time, and stops listing with
// the search: not the subscription's whole prefix.
func (r *Router) deadLetterObjectOf(ctx context.Context, topic, sub, id string, ended time.Time) (key, search string) {
	t, spec, prefix, err := r.deadLetterSource(topic, sub)
	if err == nil {
		bucket := spec.DeadLetterDestination.Properties.BlobContainerName
		w := r.walkDeadLettersFrom(t.name, bucket, prefix, ended, r.deps.Now())
		if key, search, err = r.findDeadLetter(ctx, t, bucket, w, sub, id); err == nil {
			return key, search
		}
	}
	r.log.Warn("explain: reading dead letters", logattr.Topic, topic, logattr.Subscription, sub, "err", err)
	return "", "the dead-letter objects could not be searched, so the record may be written already or still wait in the outbox: " +
		clip.N(err.Error(), maxSearchError) + "; check that the dead-letter store (MinIO) answers and ask again"
}

// maxSearchError bounds the error text [Explanation.DeadLetterSearch] repeats.
const maxSearchError = 512

// findDeadLetter reads the objects of w (of subscription sub of topic t, in bucket) oldest
// first, within Explain's bounds, for the record of event id.
func (r *Router) findDeadLetter(ctx context.Context, t *topicRuntime, bucket string, w *dlWalk, sub, id string) (key, search string, err error) {
	var read int
	var bytes int64
	for o, err := range w.all(ctx) {
		if err != nil {
			if errors.Is(err, sinks.ErrBucketNotFound) {
				return "", "", nil
			}
			return "", "", err
		}
		if read == ExplainDeadLetterObjects || (read > 0 && bytes+o.Size > ExplainDeadLetterBytes) {
			return "", fmt.Sprintf("not in the %d dead-letter objects (%d MiB) written first after the event ended; those written since were not read: "+
				"look from %s on with egrid deadletter show --topic %s --subscription %s --since %s",
				read, bytes>>20, o.Key, t.name, sub, o.LastModified.UTC().Format(time.RFC3339Nano)), nil
		}
		obj, err := r.readDeadLetterObject(ctx, t, bucket, o.Key)
		if err != nil {
			return "", "", err
		}
		read++
		bytes += o.Size
		for _, rec := range obj.recs {
			if rec.Event != nil && rec.Event.ID == id {
				return o.Key, "", nil
			}
		}
	}
	return "", "", nil
}

// maxResponseExcerpt bounds [ExplainedAttempt.Response].
const maxResponseExcerpt = 256

var queryRE = regexp.MustCompile(`\?[^\s"']*`)

// excerpt cuts what a sink said to maxResponseExcerpt bytes with [clip.N], with any
// query string removed (a SAS token or code= key is a secret) and control characters escaped
// with [clip.Escape]: the text is partly the destination's, and `egrid explain` prints it on
// a terminal.
func excerpt(s string) string {
	return clip.N(clip.Escape(clip.N(queryRE.ReplaceAllString(s, "?…"), maxResponseExcerpt), ""), maxResponseExcerpt)
}

// observeAttempts returns what a subscription actor calls with each attempt record: queue
// the record for the history writer, then call next (Deps.OnAttempt and the debug log).
// policy is the subscription's, for the time to live and maxDeliveryAttempts. The actor
// hands the record over and never changes it again, so the queue keeps the record itself:
// the callback allocates nothing, and the writer builds each event's step from the record's
// shared fields (see historyWriter.write).
func (r *Router) observeAttempts(policy *retry.Policy, next func(*actors.AttemptRecord)) func(*actors.AttemptRecord) {
	h := r.history
	return func(rec *actors.AttemptRecord) {
		h.enqueue(rec, policy)
		if next != nil {
			next(rec)
		}
	}
}
