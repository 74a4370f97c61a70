package deadletter

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// Outbox keeps the records the dead-letter actor has not written yet. The actor
// calls Load when it starts and, one call at a time and in order, Put when a record arrives
// or its write state changes and Delete once its object is written or it is dropped. Put and
// Delete are done when they return (durable for a durable outbox). A Put may run while that
// Load does (a record that arrives meanwhile is put at once), and Load may be called a second
// time, while Puts run, when the actor let go of records that arrived during the first
// ([MaxEarlyRecords]). NewID is safe for concurrent use. Returned records are owned by the
// caller.
//
// [MemoryOutbox] is the default; it survives actor restarts but not the process.
// [StoreOutbox] keeps the records in the router's store, so they survive the process too.
type Outbox interface {
	Load(ctx context.Context) ([]Record, error)
	Put(ctx context.Context, recs []Record) error
	Delete(ctx context.Context, ids []uint64) error
	// NewID returns an id for a new record: greater than every id the outbox held when it was
	// made and than every id it returned before.
	NewID() uint64
}

// EventOutbox is an [Outbox] that keeps its records' events itself, out of the dead-letter
// actor's memory ([StoreOutbox]): Load gives records without their events (Letter.Event nil,
// EventID and Size set), a Put of a record without its event changes the record's other
// fields and keeps its stored event, and Events reads the events back. The actor keeps only
// each pending record's metadata, dropping a record's event once the outbox holds it, and
// reads the events of an object's records when it writes the object: its memory grows with
// the pending records' count, by a few hundred bytes each, and with the object writes under
// way ([MaxConcurrentWrites], each at most [Config.MaxObjectBytes]), not with the events the
// outbox holds.
type EventOutbox interface {
	Outbox
	// Events returns the events of the records among ids, by id; a record no longer in the
	// outbox is left out. It is safe for concurrent use with the other methods.
	Events(ctx context.Context, ids []uint64) (map[uint64]*schemas.Event, error)
}

// MemoryOutbox is an [Outbox] in memory. Its records are lost when the process ends:
// the dead-letter actor counts those still unwritten when it stops as dropped. It holds every
// pending record's event (it is no [EventOutbox]): its memory grows with them, which is why a
// router with a dead-letter destination keeps its outbox in its store ([StoreOutbox]), in
// memory too when the store is.
type MemoryOutbox struct {
	mu   sync.Mutex
	recs map[uint64]Record
	last uint64
}

// NewMemoryOutbox returns an empty in-memory outbox.
func NewMemoryOutbox() *MemoryOutbox { return &MemoryOutbox{recs: make(map[uint64]Record)} }

// Load implements [Outbox].
func (m *MemoryOutbox) Load(context.Context) ([]Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := slices.Collect(maps.Values(m.recs))
	slices.SortFunc(out, func(a, b Record) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// Put implements [Outbox].
func (m *MemoryOutbox) Put(_ context.Context, recs []Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range recs {
		m.recs[r.ID] = r
		m.last = max(m.last, r.ID)
	}
	return nil
}

// NewID implements [Outbox].
func (m *MemoryOutbox) NewID() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last++
	return m.last
}

// Delete implements [Outbox].
func (m *MemoryOutbox) Delete(_ context.Context, ids []uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		delete(m.recs, id)
	}
	return nil
}

// StoreOutbox is an [Outbox] kept in the router's [store.Store]: its records
// survive a restart of the process, so the next dead-letter actor writes them at their
// original due time. Every Put and Delete is synced by the store. Records are stored as JSON
// under their ID as a zero-padded decimal, so the store lists them in ID order.
//
// It is an [EventOutbox]: the events stay in the store. Load and Adopt read the outbox a
// record at a time ([store.Store.ScanDeadLetters]) and give records without their events, so
// the dead-letter actor holds a few hundred bytes per pending record whatever its events'
// size; an object write reads its records' events back ([StoreOutbox.Events]).
//
// Subscriptions put their dead letters in it themselves, in the update that settles them
// ([StoreOutbox.Handoff]).
type StoreOutbox struct {
	store store.Store
	log   *slog.Logger
	last  atomic.Uint64

	mu sync.Mutex
	// first is the outbox as NewStoreOutboxFrom read it, for the first Load while fresh: no
	// Put, Delete or Load since.
	first []Record
	fresh bool
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
//
// It reads the outbox once, a record at a time, keeping each record's metadata (not its
// event), and the first Load gives what it read unless a Put or Delete came first: the
// dead-letter actor started on it reads the outbox no second time. Records put in the store
// meanwhile by others (a subscription's hand-off, another node) are not in that Load; the
// actor learns of a hand-off from the hand-off itself, and of another node's records by
// [StoreOutbox.Adopt].
func NewStoreOutboxFrom(ctx context.Context, st store.Store, log *slog.Logger, base uint64) (*StoreOutbox, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	o := &StoreOutbox{store: st, log: log}
	o.last.Store(base)
	recs, err := o.index(ctx, func(n uint64) {
		if base == 0 || n > base && n-base < IDSpan {
			o.last.Store(max(o.last.Load(), n))
		}
	})
	if err != nil {
		return nil, fmt.Errorf("reading the dead-letter outbox: %w", err)
	}
	o.first, o.fresh = recs, true
	return o, nil
}

// index reads the outbox a record at a time and returns its records, in ID order, without
// their events ([EventOutbox]); seen, when set, is called with every numeric id stored,
// decodable or not. Records that do not decode are logged and left out.
func (o *StoreOutbox) index(ctx context.Context, seen func(n uint64)) ([]Record, error) {
	var recs []Record
	in := interner{}
	err := o.store.ScanDeadLetters(ctx, func(s store.DeadLetterRecord) error {
		if n, err := strconv.ParseUint(s.ID, 10, 64); err == nil && seen != nil {
			seen(n)
		}
		r, err := decodeOutboxIndex(s.ID, s.Payload, in)
		if err != nil {
			o.log.Error("skipping a dead letter of the outbox that does not decode", "err", err)
			return nil
		}
		recs = append(recs, r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	// A record replaced during the scan may come twice, the newer last: keep that one.
	slices.SortStableFunc(recs, func(a, b Record) int { return cmp.Compare(a.ID, b.ID) })
	out := recs[:0]
	for i, r := range recs {
		if i+1 < len(recs) && recs[i+1].ID == r.ID {
			continue
		}
		out = append(out, r)
	}
	clear(recs[len(out):])
	return slices.Clip(out), nil
}

// Adopt reads the outbox and hands the dead-letter actor pid the records keep selects (by
// topic and subscription): in cluster mode, those of a subscription that just moved to this
// node, written by the node that had it before, and those of a subscription deleted before
// its records were written, which the node holding the cluster's duty writes. keep is called
// once the outbox is read (what it reads, such as the definitions, is no older than the
// records) and before any record is handed; an error of keep ends the adoption, handing
// nothing, and Adopt returns it. Records the actor knows are not taken twice. It reads the
// store, a record at a time, keeping the records' metadata only: call it off any actor's
// mailbox.
func (o *StoreOutbox) Adopt(ctx context.Context, root *actor.RootContext, pid *actor.PID, keep func(topic, subscription string) (bool, error)) error {
	recs, err := o.index(ctx, nil)
	if err != nil {
		return fmt.Errorf("loading the dead-letter outbox: %w", err)
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

// storedOutboxRecord is the stored form of a [Record]. Event is kept as it was encoded, so a
// change of the other fields writes it back as it is without decoding it.
type storedOutboxRecord struct {
	Version           int             `json:"v"`
	Letter            storedLetter    `json:"letter"`
	Target            storedTarget    `json:"target"`
	Due               time.Time       `json:"due"`
	FirstWriteAttempt time.Time       `json:"firstWriteAttempt,omitzero"`
	WriteAttempts     int             `json:"writeAttempts,omitempty"`
	Object            string          `json:"object,omitempty"`
	Event             json.RawMessage `json:"event,omitempty"` // encodeStored appends it
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

// encodeOutboxRecord encodes a record with its event.
func encodeOutboxRecord(r *Record) ([]byte, error) {
	if r.Letter == nil {
		return nil, fmt.Errorf("dead letter %d has no letter", r.ID)
	}
	if r.Letter.Event == nil {
		return nil, fmt.Errorf("dead letter %d has no event", r.ID)
	}
	ev, err := json.Marshal(r.Letter.Event)
	if err != nil {
		return nil, fmt.Errorf("dead letter %d: %w", r.ID, err)
	}
	return encodeStored(r, ev)
}

// encodeStored encodes r's fields, but for its event, which is event (JSON, valid: encoded by
// encoding/json or read back from the store). The event is appended as it is, not given to
// json.Marshal, which would check and compact it again each time a write state changes.
func encodeStored(r *Record, event json.RawMessage) ([]byte, error) {
	l, t := r.Letter, r.Target
	b, err := json.Marshal(storedOutboxRecord{
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
		Due: r.Due, FirstWriteAttempt: r.FirstWriteAttempt, WriteAttempts: r.WriteAttempts, Object: r.ObjectKey,
	})
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(b)+len(`,"event":`)+len(event))
	out = append(out, b[:len(b)-1]...) // without its closing brace
	out = append(out, `,"event":`...)
	out = append(out, event...)
	return append(out, '}'), nil
}

// decodeStored decodes the stored record id, leaving its event encoded.
func decodeStored(id string, b []byte) (uint64, *storedOutboxRecord, error) {
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		return 0, nil, fmt.Errorf("dead letter id %q is not a number", id)
	}
	var s storedOutboxRecord
	if err := json.Unmarshal(b, &s); err != nil {
		return 0, nil, fmt.Errorf("dead letter %s: %w", id, err)
	}
	if s.Version != storedOutboxVersion {
		return 0, nil, fmt.Errorf("dead letter %s: unknown version %d (this build reads %d)", id, s.Version, storedOutboxVersion)
	}
	if len(s.Event) == 0 || string(s.Event) == "null" {
		return 0, nil, fmt.Errorf("dead letter %s has no event", id)
	}
	return n, &s, nil
}

// event decodes the stored record's event.
func (s *storedOutboxRecord) event(id string) (*schemas.Event, error) {
	var ev schemas.Event
	if err := json.Unmarshal(s.Event, &ev); err != nil {
		return nil, fmt.Errorf("dead letter %s: event: %w", id, err)
	}
	return &ev, nil
}

// record returns the stored record as a [Record] whose letter's event is ev; in interns its
// strings.
func (s *storedOutboxRecord) record(n uint64, ev *schemas.Event, in interner) Record {
	l := s.Letter
	return Record{
		ID: n,
		Letter: &actors.DeadLetter{
			Topic: in.of(l.Topic), Subscription: in.of(l.Subscription), TopicID: in.of(l.TopicID),
			InputSchema: schemas.Schema(l.InputSchema), DeliverySchema: schemas.Schema(l.DeliverySchema),
			Event: ev, Reason: schemas.Reason(in.of(l.Reason)), DeliveryAttempts: l.DeliveryAttempts,
			LastOutcome: schemas.Outcome(l.LastOutcome), LastHTTPStatus: l.LastHTTPStatus,
			PublishTime: l.PublishTime, LastAttemptTime: l.LastAttemptTime,
		},
		Target: Target{
			Bucket: in.of(s.Target.Bucket), Prefix: in.of(s.Target.Prefix), Notify: s.Target.Notify,
			Format: schemas.DeadLetterFormat{
				Input: schemas.Schema(s.Target.Input), Delivery: schemas.Schema(s.Target.Delivery),
				Namespace: s.Target.Namespace, TopicID: in.of(s.Target.TopicID),
			},
		},
		Due: s.Due, FirstWriteAttempt: s.FirstWriteAttempt, WriteAttempts: s.WriteAttempts, ObjectKey: in.of(s.Object),
	}
}

// decodeOutboxRecord decodes a stored record with its event.
func decodeOutboxRecord(id string, b []byte) (Record, error) {
	n, s, err := decodeStored(id, b)
	if err != nil {
		return Record{}, err
	}
	ev, err := s.event(id)
	if err != nil {
		return Record{}, err
	}
	r := s.record(n, ev, nil)
	r.EventID, r.Size = ev.ID, sizeOf(&r)
	return r, nil
}

// decodeOutboxIndex decodes a stored record without its event ([EventOutbox]): the event is
// decoded to check it and to take its id and size, then dropped.
func decodeOutboxIndex(id string, b []byte, in interner) (Record, error) {
	n, s, err := decodeStored(id, b)
	if err != nil {
		return Record{}, err
	}
	ev, err := s.event(id)
	if err != nil {
		return Record{}, err
	}
	r := s.record(n, ev, in)
	lighten(&r)
	return r, nil
}

// interner shares one copy of the strings many records repeat (topic, subscription, bucket,
// prefix, object key) among the records decoded with it; nil shares nothing.
type interner map[string]string

func (in interner) of(s string) string {
	if in == nil {
		return s
	}
	if v, ok := in[s]; ok {
		return v
	}
	in[s] = s
	return s
}

// Load implements [Outbox]. The records have no event ([EventOutbox]).
func (o *StoreOutbox) Load(ctx context.Context) ([]Record, error) {
	o.mu.Lock()
	if o.fresh {
		recs := o.first
		o.first, o.fresh = nil, false
		o.mu.Unlock()
		return recs, nil
	}
	o.mu.Unlock()
	recs, err := o.index(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("loading the dead-letter outbox: %w", err)
	}
	return recs, nil
}

// stale forgets what NewStoreOutboxFrom read: the outbox changes.
func (o *StoreOutbox) stale() {
	o.mu.Lock()
	o.first, o.fresh = nil, false
	o.mu.Unlock()
}

// Put implements [Outbox]. A record without its event ([EventOutbox]) changes the stored
// record's other fields: see [StoreOutbox.putState].
func (o *StoreOutbox) Put(ctx context.Context, recs []Record) error {
	o.stale()
	stored := make([]store.DeadLetterRecord, 0, len(recs))
	var state []Record
	var errs []error
	for i := range recs {
		if recs[i].Letter != nil && recs[i].Letter.Event == nil {
			state = append(state, recs[i])
			continue
		}
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
	if len(stored) > 0 {
		if err := o.store.PutDeadLetters(ctx, stored); err != nil {
			return err
		}
	}
	return o.putState(ctx, state)
}

// The records of one store write of [StoreOutbox.putState]: at most putStateRecords, and
// records of at most putStateBytes (by their Size) unless one alone is larger.
const (
	putStateRecords = 256
	putStateBytes   = 4 << 20
)

// putState saves records given without their event: each stored record is read back and
// written again with the new fields and its stored event, some at a time, so a change of
// many records (an object's, or every object's on a flush) never holds all their events at
// once. A record no longer in the outbox (written and deleted by another node) is left out,
// and one that no longer decodes is left as it is; both are logged.
func (o *StoreOutbox) putState(ctx context.Context, recs []Record) error {
	missing := 0
	for len(recs) > 0 {
		n, size := 0, 0
		for n < len(recs) && n < putStateRecords && (n == 0 || size+recs[n].Size <= putStateBytes) {
			size += recs[n].Size
			n++
		}
		var chunk []Record
		chunk, recs = recs[:n], recs[n:]
		ids := make([]string, n)
		for i := range chunk {
			ids[i] = outboxID(chunk[i].ID)
		}
		got, err := o.store.DeadLettersByID(ctx, ids)
		if err != nil {
			return fmt.Errorf("reading dead letters back to change them: %w", err)
		}
		stored := make(map[string][]byte, len(got))
		for _, s := range got {
			stored[s.ID] = s.Payload
		}
		out := make([]store.DeadLetterRecord, 0, n)
		for i := range chunk {
			id := ids[i]
			b, ok := stored[id]
			if !ok {
				missing++
				continue
			}
			_, s, err := decodeStored(id, b)
			if err != nil {
				o.log.Error("a dead letter of the outbox no longer decodes; leaving it as it is", "err", err)
				continue
			}
			enc, err := encodeStored(&chunk[i], s.Event)
			if err != nil {
				return fmt.Errorf("encoding dead letter %s: %w", id, err)
			}
			out = append(out, store.DeadLetterRecord{ID: id, Payload: enc})
		}
		if len(out) > 0 {
			if err := o.store.PutDeadLetters(ctx, out); err != nil {
				return err
			}
		}
	}
	if missing > 0 {
		o.log.Warn("dead letters whose write state changed are no longer in the outbox; another writer took them", "records", missing)
	}
	return nil
}

// Delete implements [Outbox].
func (o *StoreOutbox) Delete(ctx context.Context, ids []uint64) error {
	o.stale()
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = outboxID(id)
	}
	return o.store.DeleteDeadLetters(ctx, keys)
}

// Events implements [EventOutbox]: it reads the records by id ([store.Store.DeadLettersByID]).
func (o *StoreOutbox) Events(ctx context.Context, ids []uint64) (map[uint64]*schemas.Event, error) {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = outboxID(id)
	}
	got, err := o.store.DeadLettersByID(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("reading dead letters from the outbox: %w", err)
	}
	evs := make(map[uint64]*schemas.Event, len(got))
	for _, g := range got {
		n, s, err := decodeStored(g.ID, g.Payload)
		if err != nil {
			return nil, err
		}
		if evs[n], err = s.event(g.ID); err != nil {
			return nil, err
		}
	}
	return evs, nil
}

var _ EventOutbox = (*StoreOutbox)(nil)

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

// Handed implements [actors.DeadLetterHandoff]. Records in the store already are handed
// without their events ([EventOutbox]); those the actor is to put there come whole.
func (h *storeHandoff) Handed(recs []store.DeadLetterRecord) {
	m := &deadLettersHanded{recs: make([]Record, 0, len(recs)), save: h.save}
	in := interner{}
	for _, s := range recs {
		decode := func(id string, b []byte) (Record, error) { return decodeOutboxIndex(id, b, in) }
		if h.save {
			decode = decodeOutboxRecord
		}
		r, err := decode(s.ID, s.Payload)
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
