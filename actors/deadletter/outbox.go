package deadletter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// StoreOutbox is an [Outbox] kept in the router's [store.Store]: its records
// survive a restart of the process, so the next dead-letter actor writes them at their
// original due time. Every Put and Delete is synced by the store. Records are stored as JSON
// under their ID as a zero-padded decimal, so the store lists them in ID order.
//
// Subscriptions put their dead letters in it themselves, in the update that settles them
// ([StoreOutbox.Handoff]).
type StoreOutbox struct {
	store store.Store
	log   *slog.Logger
	last  atomic.Uint64
}

// NewStoreOutbox returns an outbox on st. It reads the records st holds, so that new ids
// follow theirs. Records that no longer decode are logged on log (nil discards) and skipped by
// Load, left in the store for an operator to look at.
func NewStoreOutbox(ctx context.Context, st store.Store, log *slog.Logger) (*StoreOutbox, error) {
	return NewStoreOutboxFrom(ctx, st, log, 0)
}

// IDSpan is how many ids a [NewStoreOutboxFrom] base numbers.
const IDSpan = 1 << 40

// NewStoreOutboxFrom is [NewStoreOutbox] numbering its records from base+1 up (base a
// multiple of [IDSpan]; 0 for a router of its own), after the stored ids in
// [base, base+IDSpan): routers sharing one store (cluster nodes) each number from a base of
// their own and never give two records one id.
func NewStoreOutboxFrom(ctx context.Context, st store.Store, log *slog.Logger, base uint64) (*StoreOutbox, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	o := &StoreOutbox{store: st, log: log}
	o.last.Store(base)
	stored, err := st.DeadLetters(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the dead-letter outbox: %w", err)
	}
	for _, r := range stored {
		if n, err := strconv.ParseUint(r.ID, 10, 64); err == nil && (base == 0 || n > base && n-base < IDSpan) {
			o.last.Store(max(o.last.Load(), n))
		}
	}
	return o, nil
}

// Adopt reads the outbox and hands the dead-letter actor pid the records keep selects (by
// topic and subscription): in cluster mode, those of a subscription that just moved to this
// node, written by the node that had it before, and those of a subscription deleted before
// its records were written, which the node holding the cluster's duty writes. keep is called
// once the outbox is read (what it reads, such as the definitions, is no older than the
// records) and before any record is handed; an error of keep ends the adoption, handing
// nothing, and Adopt returns it. Records the actor knows are not taken twice. It reads the
// store: call it off any actor's mailbox.
func (o *StoreOutbox) Adopt(ctx context.Context, root *actor.RootContext, pid *actor.PID, keep func(topic, subscription string) (bool, error)) error {
	recs, err := o.Load(ctx)
	if err != nil {
		return err
	}
	m := &deadLettersHanded{}
	for _, r := range recs {
		ok, err := keep(r.Letter.Topic, r.Letter.Subscription)
		if err != nil {
			return err
		}
		if ok {
			m.recs = append(m.recs, r)
		}
	}
	if len(m.recs) > 0 {
		root.Send(pid, m)
	}
	return nil
}

// NewID implements [Outbox].
func (o *StoreOutbox) NewID() uint64 { return o.last.Add(1) }

// storedOutboxRecord is the stored form of a [Record].
type storedOutboxRecord struct {
	Version           int            `json:"v"`
	Letter            storedLetter   `json:"letter"`
	Target            storedTarget   `json:"target"`
	Due               time.Time      `json:"due"`
	FirstWriteAttempt time.Time      `json:"firstWriteAttempt,omitzero"`
	WriteAttempts     int            `json:"writeAttempts,omitempty"`
	Object            string         `json:"object,omitempty"`
	Event             *schemas.Event `json:"event"`
}

type storedLetter struct {
	Topic            string    `json:"topic"`
	Subscription     string    `json:"subscription"`
	TopicID          string    `json:"topicId,omitempty"`
	InputSchema      uint8     `json:"inputSchema"`
	DeliverySchema   uint8     `json:"deliverySchema"`
	Reason           string    `json:"reason"`
	DeliveryAttempts int       `json:"deliveryAttempts"`
	LastOutcome      uint8     `json:"lastOutcome,omitempty"`
	LastHTTPStatus   int       `json:"lastHttpStatus,omitempty"`
	PublishTime      time.Time `json:"publishTime"`
	LastAttemptTime  time.Time `json:"lastAttemptTime,omitzero"`
}

type storedTarget struct {
	Bucket    string `json:"bucket"`
	Prefix    string `json:"prefix"`
	Input     uint8  `json:"input"`
	Delivery  uint8  `json:"delivery"`
	Namespace bool   `json:"namespace,omitempty"`
	TopicID   string `json:"topicId,omitempty"`
	Notify    bool   `json:"notify,omitempty"`
}

const storedOutboxVersion = 1

func outboxID(id uint64) string { return fmt.Sprintf("%020d", id) }

func encodeOutboxRecord(r *Record) ([]byte, error) {
	if r.Letter == nil {
		return nil, fmt.Errorf("dead letter %d has no letter", r.ID)
	}
	l, t := r.Letter, r.Target
	return json.Marshal(storedOutboxRecord{
		Version: storedOutboxVersion,
		Letter: storedLetter{
			Topic: l.Topic, Subscription: l.Subscription, TopicID: l.TopicID,
			InputSchema: uint8(l.InputSchema), DeliverySchema: uint8(l.DeliverySchema), Reason: string(l.Reason),
			DeliveryAttempts: l.DeliveryAttempts, LastOutcome: uint8(l.LastOutcome), LastHTTPStatus: l.LastHTTPStatus,
			PublishTime: l.PublishTime, LastAttemptTime: l.LastAttemptTime,
		},
		Target: storedTarget{
			Bucket: t.Bucket, Prefix: t.Prefix, Input: uint8(t.Format.Input), Delivery: uint8(t.Format.Delivery),
			Namespace: t.Format.Namespace, TopicID: t.Format.TopicID, Notify: t.Notify,
		},
		Due: r.Due, FirstWriteAttempt: r.FirstWriteAttempt, WriteAttempts: r.WriteAttempts, Object: r.ObjectKey, Event: l.Event,
	})
}

func decodeOutboxRecord(id string, b []byte) (Record, error) {
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		return Record{}, fmt.Errorf("dead letter id %q is not a number", id)
	}
	var s storedOutboxRecord
	if err := json.Unmarshal(b, &s); err != nil {
		return Record{}, fmt.Errorf("dead letter %s: %w", id, err)
	}
	if s.Version != storedOutboxVersion {
		return Record{}, fmt.Errorf("dead letter %s: unknown version %d (this build reads %d)", id, s.Version, storedOutboxVersion)
	}
	if s.Event == nil {
		return Record{}, fmt.Errorf("dead letter %s has no event", id)
	}
	l := s.Letter
	return Record{
		ID: n,
		Letter: &actors.DeadLetter{
			Topic: l.Topic, Subscription: l.Subscription, TopicID: l.TopicID,
			InputSchema: schemas.Schema(l.InputSchema), DeliverySchema: schemas.Schema(l.DeliverySchema),
			Event: s.Event, Reason: schemas.Reason(l.Reason), DeliveryAttempts: l.DeliveryAttempts,
			LastOutcome: schemas.Outcome(l.LastOutcome), LastHTTPStatus: l.LastHTTPStatus,
			PublishTime: l.PublishTime, LastAttemptTime: l.LastAttemptTime,
		},
		Target: Target{
			Bucket: s.Target.Bucket, Prefix: s.Target.Prefix, Notify: s.Target.Notify,
			Format: schemas.DeadLetterFormat{
				Input: schemas.Schema(s.Target.Input), Delivery: schemas.Schema(s.Target.Delivery),
				Namespace: s.Target.Namespace, TopicID: s.Target.TopicID,
			},
		},
		Due: s.Due, FirstWriteAttempt: s.FirstWriteAttempt, WriteAttempts: s.WriteAttempts, ObjectKey: s.Object,
	}, nil
}

// Load implements [Outbox].
func (o *StoreOutbox) Load(ctx context.Context) ([]Record, error) {
	stored, err := o.store.DeadLetters(ctx)
	if err != nil {
		return nil, fmt.Errorf("loading the dead-letter outbox: %w", err)
	}
	recs := make([]Record, 0, len(stored))
	for _, s := range stored {
		r, err := decodeOutboxRecord(s.ID, s.Payload)
		if err != nil {
			o.log.Error("skipping a dead letter of the outbox that does not decode", "err", err)
			continue
		}
		recs = append(recs, r)
	}
	return recs, nil
}

// Put implements [Outbox].
func (o *StoreOutbox) Put(ctx context.Context, recs []Record) error {
	stored := make([]store.DeadLetterRecord, 0, len(recs))
	var errs []error
	for i := range recs {
		b, err := encodeOutboxRecord(&recs[i])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		stored = append(stored, store.DeadLetterRecord{ID: outboxID(recs[i].ID), Payload: b})
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("encoding dead letters: %w", err)
	}
	return o.store.PutDeadLetters(ctx, stored)
}

// Delete implements [Outbox].
func (o *StoreOutbox) Delete(ctx context.Context, ids []uint64) error {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = outboxID(id)
	}
	return o.store.DeleteDeadLetters(ctx, keys)
}

var _ Outbox = (*StoreOutbox)(nil)

// Handoff returns the [actors.DeadLetterHandoff] of one subscription whose dead letters go to target:
// it encodes records for this outbox (due cfg's delay after their last attempt) and tells the
// dead-letter actor pid, whose config cfg is and whose outbox o is, of them once they are in
// the store. The subscription must write its state to o's store.
func (o *StoreOutbox) Handoff(root *actor.RootContext, pid *actor.PID, cfg *Config, target Target) actors.DeadLetterHandoff {
	c := cfg.withDefaults()
	if c.Outbox != Outbox(o) {
		panic("actors: a dead-letter hand-off needs the actor's own StoreOutbox")
	}
	return &storeHandoff{outbox: o, cfg: c, target: target, root: root, pid: pid}
}

// storeHandoff is a [actors.DeadLetterHandoff] into a [StoreOutbox].
type storeHandoff struct {
	outbox *StoreOutbox
	cfg    *Config
	target Target
	root   *actor.RootContext
	pid    *actor.PID
	// save: the records are not in the outbox's store (a replay settles its events in a
	// journal of its own), so the dead-letter actor puts them there.
	save bool
}

// Record implements [actors.DeadLetterHandoff].
func (h *storeHandoff) Record(d *actors.DeadLetter) (store.DeadLetterRecord, error) {
	r := newOutboxRecord(h.cfg, d, h.target)
	b, err := encodeOutboxRecord(r)
	if err != nil {
		return store.DeadLetterRecord{}, err
	}
	return store.DeadLetterRecord{ID: outboxID(r.ID), Payload: b}, nil
}

// Handed implements [actors.DeadLetterHandoff].
func (h *storeHandoff) Handed(recs []store.DeadLetterRecord) {
	m := &deadLettersHanded{recs: make([]Record, 0, len(recs)), save: h.save}
	for _, s := range recs {
		r, err := decodeOutboxRecord(s.ID, s.Payload)
		if err != nil {
			// It was encoded by Record a moment ago; the next actor's Load skips it too.
			h.outbox.log.Error("a handed-off dead letter does not decode", "err", err)
			continue
		}
		m.recs = append(m.recs, r)
	}
	h.root.Send(h.pid, m)
}

// deadLettersHanded tells the dead-letter actor of records a subscription put in the outbox, or,
// with save, that it is to put there.
type deadLettersHanded struct {
	recs []Record
	save bool
}
