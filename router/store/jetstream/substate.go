package jetstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/store"
)

// A subscription's state: this store's view of its record (subEntry: the revision it last read
// or wrote, under a semaphore), read by Cursors, LoadSubscription and ParkedEvents and written
// by UpdateSubscription with a compare-and-set. The parked events' copies of their events are
// in parked.go, delivery histories in history.go.

// subEntry is this store's view of one subscription record: the revision it last read or
// wrote and the decoded record. sem (capacity 1) serialises this store's writes of the key;
// rev and rec belong to whoever holds it.
type subEntry struct {
	sem chan struct{}
	rev uint64
	rec *subRecord // nil when not loaded
	// seen is the highest revision of the record this store read or wrote, readable without
	// sem: PutHistory marks the histories it writes with it (see history.go).
	seen atomic.Uint64
}

// setRev sets the revision e holds; sem is held.
func (e *subEntry) setRev(rev uint64) {
	e.rev = rev
	if rev > e.seen.Load() {
		e.seen.Store(rev)
	}
}

// entry returns this store's view of a subscription record, holding its semaphore; call
// release when done.
func (s *Store) entry(ctx context.Context, key string) (*subEntry, error) {
	s.mu.Lock()
	e, ok := s.subs[key]
	if !ok {
		e = &subEntry{sem: make(chan struct{}, 1)}
		s.subs[key] = e
	}
	s.mu.Unlock()
	select {
	case e.sem <- struct{}{}:
		return e, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (e *subEntry) release() { <-e.sem }

// load reads a subscription record into e (not found: store.ErrNotFound). A record that does
// not decode is a damaged definition (an error wrapping store.ErrDamaged) or a lost state,
// written again afresh (see damagedRecord).
func (s *Store) load(ctx context.Context, e *subEntry, topic, sub string) error {
	kv, err := s.meta.Get(ctx, subKey(topic, sub))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		e.rec = nil
		return subNotFound(topic, sub)
	case err != nil:
		return fmt.Errorf("jetstream store: reading subscription %q of topic %q: %w", sub, topic, err)
	}
	rec, err := decodeSubRecord(kv.Value())
	if err != nil {
		return s.damagedRecord(ctx, e, topic, sub, kv, err)
	}
	e.setRev(kv.Revision())
	e.rec = &rec
	return nil
}

// write stores rec on top of the revision e holds (compare-and-set); it loses against any
// other write since with store.ErrFenced.
func (s *Store) write(ctx context.Context, e *subEntry, topic, sub string, rec *subRecord) error {
	rev, err := s.meta.Update(ctx, subKey(topic, sub), appendSubRecord(nil, rec), e.rev)
	if err != nil {
		e.rec = nil // read again next time
		if isWrongLastSeq(err) {
			return fenced(fmt.Sprintf("subscription %q of topic %q", sub, topic), err)
		}
		return fmt.Errorf("jetstream store: writing subscription %q of topic %q: %w", sub, topic, err)
	}
	e.setRev(rev)
	e.rec = stripped(rec)
	return nil
}

// stripped drops the events of rec's parked events (in place: rec is the store's own), which
// the cache does not need: only LoadSubscription returns them, and it reads them.
func stripped(rec *subRecord) *subRecord {
	for i := range rec.parked {
		rec.parked[i].Event = nil
	}
	return rec
}

// Cursors implements [store.Store]. Unlike the memory and disk stores it reads the bucket
// (one watch of the topic's subscription keys), so every node sees every cursor. A
// subscription whose definition does not decode is left out, as Subscriptions leaves it out.
func (s *Store) Cursors(ctx context.Context, topic string) (map[string]uint64, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if err := s.topicExists(ctx, topic); err != nil {
		return nil, err
	}
	cursors := make(map[string]uint64)
	err = s.scanSubs(ctx, topic, func(name string, val []byte) error {
		c, _, _, err := decodeSubHead(val)
		if err != nil {
			s.defDamage(subKey(topic, name), val, topic, name, err) // not served: see metadamage.go
			return nil
		}
		cursors[name] = c
		return nil
	})
	if err != nil {
		return nil, err
	}
	return cursors, nil
}

// LoadSubscription implements [store.Store]. It always reads the bucket and takes the
// revision it read as the base of this store's next write of the subscription: a node taking
// a subscription over loads it first. A parked event whose copy cannot be read is left out of the
// state, as [Store.ParkedEvents] leaves it out: one damaged copy does not stop the
// subscription from loading. A record whose state does not decode (its definition does)
// loads as a fresh state written back — its cursor just before the oldest event the topic's
// journal holds, nothing parked, no probation, a new epoch — logged once and counted
// ([DamageEntry]); one whose definition does not decode fails with [store.ErrDamaged] (see
// metadamage.go).
func (s *Store) LoadSubscription(ctx context.Context, topic, sub string) (store.SubscriptionState, error) {
	return s.loadSubscription(ctx, topic, sub, true)
}

// LoadSubscriptionIndex implements [store.Store]: LoadSubscription without reading the
// parked events' messages.
func (s *Store) LoadSubscriptionIndex(ctx context.Context, topic, sub string) (store.SubscriptionState, error) {
	return s.loadSubscription(ctx, topic, sub, false)
}

func (s *Store) loadSubscription(ctx context.Context, topic, sub string, bodies bool) (store.SubscriptionState, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return store.SubscriptionState{}, err
	}
	defer cancel()
	st, err := s.loadState(ctx, topic, sub)
	if err != nil {
		return store.SubscriptionState{}, err
	}
	if bodies {
		if st.Parked, err = s.readParked(ctx, topic, sub, st.Epoch, st.Parked); err != nil {
			return store.SubscriptionState{}, err
		}
	}
	return st, nil
}

// loadState reads a subscription's record into this store's view, the base of its next
// write, and returns a copy of it without the parked events' bodies. It holds the
// subscription's semaphore for the record's read only: the bodies are read after.
func (s *Store) loadState(ctx context.Context, topic, sub string) (store.SubscriptionState, error) {
	e, err := s.entry(ctx, subKey(topic, sub))
	if err != nil {
		return store.SubscriptionState{}, err
	}
	defer e.release()
	if err := s.load(ctx, e, topic, sub); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			if terr := s.topicExists(ctx, topic); terr != nil {
				return store.SubscriptionState{}, terr
			}
		}
		return store.SubscriptionState{}, err
	}
	return store.SubscriptionState{
		Epoch:     e.rec.epoch,
		Cursor:    e.rec.cursor,
		Parked:    slices.Clone(e.rec.parked),
		Probation: slices.Clone(e.rec.probation),
	}, nil
}

// ParkedEvents implements [store.Store]. It reads the subscription's record when this store
// holds none (as UpdateSubscription does), then one message per parked event asked for,
// after letting the record go: an update of the subscription meanwhile is not held up.
// A parked event whose copy does not decode, or is missing, although the record names it is
// left out, lost, logged and counted (see readParked): the subscription forgets it and goes
// on with its other events.
func (s *Store) ParkedEvents(ctx context.Context, topic, sub string, seqs []uint64) ([]store.Parked, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	epoch, out, err := s.parkedIndex(ctx, topic, sub, seqs)
	if err != nil {
		return nil, err
	}
	return s.readParked(ctx, topic, sub, epoch, out)
}

// parkedIndex returns the subscription's epoch and a copy of its parked events among seqs,
// without their bodies, holding the subscription's semaphore only while it reads the record.
func (s *Store) parkedIndex(ctx context.Context, topic, sub string, seqs []uint64) (uint64, []store.Parked, error) {
	e, err := s.entry(ctx, subKey(topic, sub))
	if err != nil {
		return 0, nil, err
	}
	defer e.release()
	if e.rec == nil {
		if err := s.load(ctx, e, topic, sub); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				if terr := s.topicExists(ctx, topic); terr != nil {
					return 0, nil, terr
				}
			}
			return 0, nil, err
		}
	}
	want := make(map[uint64]bool, len(seqs))
	for _, seq := range seqs {
		want[seq] = true
	}
	var out []store.Parked
	for _, p := range e.rec.parked { // ordered by Seq; copies, Event nil (stripped)
		if want[p.Seq] {
			out = append(out, p)
		}
	}
	return e.rec.epoch, out, nil
}

// UpdateSubscription implements [store.Store]: one compare-and-set of the subscription's
// record on the revision this store last read or wrote. A record another store wrote since
// makes it fail with [store.ErrFenced], and nothing of u's state is applied. An update of
// another epoch than the record's (as this store last read or wrote it) fails with
// [store.ErrStaleEpoch] before anything is written, its dead letters included.
//
// JetStream has no transaction across the record and the dead-letter bucket, so
// [store.Update.DeadLetters] are written first, each acknowledged, and the record second: a
// failure between the two (an outage, or a fenced record) leaves dead letters in the outbox
// whose events are still unsettled. Those events end again later, so an ending is never lost
// but may be dead-lettered twice (at least once, as every delivery). The copies of the events
// it settles are purged after the write, without holding the subscription (dropBodies); the
// copies of the events it parks are stored before it, and deleted again when the write is
// fenced (dropCopies).
func (s *Store) UpdateSubscription(ctx context.Context, topic, sub string, u store.Update) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	gone, done, err := s.updateRecord(ctx, topic, sub, u)
	if err != nil {
		return err
	}
	s.dropBodies(ctx, topic, sub, gone, done)
	return nil
}

// updateRecord is UpdateSubscription but for dropping the messages of the events it settled,
// whose Seqs it returns with what ends their purges (registered while it holds the
// subscription's semaphore, which the purges, one call per event, need not: see dropBodies).
func (s *Store) updateRecord(ctx context.Context, topic, sub string, u store.Update) ([]uint64, func(), error) {
	e, err := s.entry(ctx, subKey(topic, sub))
	if err != nil {
		return nil, nil, err
	}
	defer e.release()
	if e.rec == nil {
		if err := s.load(ctx, e, topic, sub); err != nil {
			return nil, nil, err
		}
	}
	if u.Epoch != 0 && u.Epoch != e.rec.epoch {
		return nil, nil, fmt.Errorf("subscription %q of topic %q: %w", sub, topic, store.ErrStaleEpoch)
	}
	if len(u.DeadLetters) > 0 {
		if err := s.putDeadLetters(ctx, u.DeadLetters); err != nil {
			return nil, nil, err
		}
	}
	old := e.rec
	rec := applyUpdate(old, u)
	had := make(map[uint64]bool, len(old.parked))
	for _, p := range old.parked {
		had[p.Seq] = true
	}
	var fresh []store.Parked
	has := make(map[uint64]bool, len(rec.parked))
	for _, p := range rec.parked {
		has[p.Seq] = true
		if !had[p.Seq] {
			fresh = append(fresh, p)
		}
	}
	if err := s.awaitPurges(ctx, topic, sub, fresh); err != nil {
		return nil, nil, err
	}
	copies, err := s.putBodies(ctx, topic, sub, fresh)
	if err != nil {
		s.dropCopies(ctx, copies)
		return nil, nil, err
	}
	if err := s.write(ctx, e, topic, sub, rec); err != nil {
		if errors.Is(err, store.ErrFenced) { // nothing of it applied: no record names them
			s.dropCopies(ctx, copies)
		}
		return nil, nil, err
	}
	var gone []uint64
	for _, p := range old.parked {
		if !has[p.Seq] {
			gone = append(gone, p.Seq)
		}
	}
	return gone, s.markPurging(topic, sub, gone), nil
}

// newEpoch returns a new subscription's epoch: random, so that nodes creating subscriptions
// need no shared counter, and above legacyEpoch. Two lives of one name share an epoch with a
// chance of 2⁻⁶⁴.
func newEpoch() uint64 {
	for {
		if e := rand.Uint64(); e > legacyEpoch {
			return e
		}
	}
}

// applyUpdate returns a new record: cur with u applied (Delete before Put).
func applyUpdate(cur *subRecord, u store.Update) *subRecord {
	rec := &subRecord{epoch: cur.epoch, spec: cur.spec, cursor: max(cur.cursor, u.Cursor), probation: cur.probation, life: cur.life}
	switch {
	case u.Probation == nil:
	case len(u.Probation) == 0:
		rec.probation = nil
	default:
		rec.probation = slices.Clone(u.Probation)
	}
	if len(u.Put) == 0 && len(u.Delete) == 0 {
		rec.parked = cur.parked
		return rec
	}
	drop := make(map[uint64]bool, len(u.Delete)+len(u.Put))
	for _, seq := range u.Delete {
		drop[seq] = true
	}
	for _, p := range u.Put {
		drop[p.Seq] = true
	}
	rec.parked = make([]store.Parked, 0, len(cur.parked)+len(u.Put))
	for _, p := range cur.parked {
		if !drop[p.Seq] {
			rec.parked = append(rec.parked, p)
		}
	}
	put := make(map[uint64]store.Parked, len(u.Put))
	for _, p := range u.Put {
		put[p.Seq] = p // the last of equal Seqs wins
	}
	for _, p := range put {
		rec.parked = append(rec.parked, p)
	}
	slices.SortFunc(rec.parked, func(a, b store.Parked) int { return cmp.Compare(a.Seq, b.Seq) })
	return rec
}
