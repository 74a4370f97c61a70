package jetstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// The parked events' copies of their events: one message each in the parked-events stream,
// stored before the record that names the event and purged after the record that stops
// naming it, read without holding the subscription (readParked); a copy the record names that
// is missing or does not decode is reported once (copyDamage).

// putBodies stores the copies of the events of newly parked events, before the record that
// names them (a copy no record names is never read), and returns the stream sequence
// numbers of the copies JetStream acknowledged, those of a failed call included.
func (s *Store) putBodies(ctx context.Context, topic, sub string, ps []store.Parked) ([]uint64, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	fs := make([]jetstream.PubAckFuture, 0, len(ps))
	var perr error
	for _, p := range ps {
		f, err := s.js.PublishMsgAsync(&nats.Msg{Subject: s.parkedSubject(topic, sub, p.Seq), Data: appendBody(nil, p.Event)})
		if err != nil {
			perr = fmt.Errorf("jetstream store: storing parked event %d of subscription %q of topic %q: %w", p.Seq, sub, topic, err)
			break
		}
		fs = append(fs, f)
	}
	// Every acknowledgement is waited for, after a failure too, so that the caller can
	// delete each copy that was stored.
	var seqs []uint64
	for i, f := range fs {
		select {
		case ack := <-f.Ok():
			seqs = append(seqs, ack.Sequence)
		case err := <-f.Err():
			if perr == nil {
				perr = fmt.Errorf("jetstream store: storing parked event %d of subscription %q of topic %q: %w", ps[i].Seq, sub, topic, err)
			}
		case <-ctx.Done():
			return seqs, fmt.Errorf("jetstream store: storing parked events of subscription %q of topic %q: %w", sub, topic, ctx.Err())
		}
	}
	return seqs, perr
}

// dropCopies deletes the parked events' copies an update stored, by their sequence numbers,
// when the update applied nothing (its record write was fenced, or not every copy was
// stored): no record names them, and they would stay until the subscription is deleted —
// one update's new parks at each change of hands. Deleting by sequence number takes only
// this update's copies: another node that parked the same event meanwhile keeps its own
// (the stream keeps every copy of a subject; see parkedCopies). It is best effort: a copy
// whose delete failed (an outage) is never read, and goes with its subscription.
func (s *Store) dropCopies(ctx context.Context, seqs []uint64) {
	_ = each(ctx, len(seqs), func(ctx context.Context, i int) error {
		_ = s.parked.DeleteMsg(ctx, seqs[i]) // gone already when its event was unparked meanwhile
		return nil                           // the others are deleted all the same
	})
}

// dropBodies deletes the copies of events no longer parked, after the record that stopped
// naming them, up to bodyCalls at once and without the subscription's semaphore: a reader
// that finds a copy gone meanwhile leaves its event out as settled (readParked). It is best
// effort: a failure (or a crash before it) leaves copies no record names, which nothing reads
// and nothing cleans up but DeleteSubscription and DeleteTopic (the parked stream keeps one
// message per subject, with no age limit). The purges were registered (markPurging) while
// the update held the semaphore, and done ends them: an update of the same subscription that
// parks one of those Seqs again meanwhile waits for its purge before it writes the new copy
// (awaitPurges), which the purge would otherwise delete.
func (s *Store) dropBodies(ctx context.Context, topic, sub string, seqs []uint64, done func()) {
	defer done()
	if s.dropBodiesHook != nil {
		s.dropBodiesHook()
	}
	_ = each(ctx, len(seqs), func(ctx context.Context, i int) error {
		return s.parked.Purge(ctx, jetstream.WithPurgeSubject(s.parkedSubject(topic, sub, seqs[i])))
	})
}

// markPurging registers the purges of the copies of seqs, about to begin, and returns what
// ends them.
func (s *Store) markPurging(topic, sub string, seqs []uint64) func() {
	if len(seqs) == 0 {
		return func() {}
	}
	ch := make(chan struct{})
	subjs := make([]string, len(seqs))
	s.mu.Lock()
	for i, seq := range seqs {
		subjs[i] = s.parkedSubject(topic, sub, seq)
		s.purging[subjs[i]] = ch
	}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		for _, subj := range subjs {
			if s.purging[subj] == ch {
				delete(s.purging, subj)
			}
		}
		s.mu.Unlock()
		close(ch)
	}
}

// awaitPurges waits for the purges under way of the copies of ps' events.
func (s *Store) awaitPurges(ctx context.Context, topic, sub string, ps []store.Parked) error {
	for _, p := range ps {
		s.mu.Lock()
		ch := s.purging[s.parkedSubject(topic, sub, p.Seq)]
		s.mu.Unlock()
		if ch == nil {
			continue
		}
		if s.purgeWaitHook != nil {
			s.purgeWaitHook()
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("jetstream store: parked event %d of subscription %q of topic %q: waiting for the purge of its earlier copy: %w", p.Seq, sub, topic, ctx.Err())
		}
	}
	return nil
}

// bodyCalls bounds the NATS calls readParked, dropBodies and putDeadLetters have under way at
// once for one store call: a few round trips' time for a batch of hundreds, without flooding
// the server.
const bodyCalls = 16

// each calls fn(ctx, i) for i in [0, n), up to bodyCalls at once, and returns the first error
// one returned (the others then see ctx cancelled), or ctx's error when it ended before every
// call was made.
func each(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, bodyCalls)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ferr error
	)
	made := 0
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		made++
		wg.Go(func() {
			defer func() { <-sem }()
			if err := fn(ctx, i); err != nil {
				mu.Lock()
				if ferr == nil {
					ferr = err
				}
				mu.Unlock()
				cancel(err)
			}
		})
	}
	wg.Wait()
	if ferr == nil && made < n {
		return context.Cause(ctx)
	}
	return ferr
}

// readParked reads the event of each of parked (events of the subscription's life epoch)
// from its message and returns them, ordered as given. It runs without the subscription's
// semaphore, so an update of the subscription may settle a parked event and purge its message
// meanwhile: such an event is left out, as settled events are, per [store.Store.ParkedEvents]
// ("a seq that is not parked any more is left out"); a loaded state is then the record as
// read but for the events settled since, which the caller must not attempt again anyway. A
// subscription deleted meanwhile is store.ErrNotFound.
//
// A copy that is missing, or that does not decode, is taken for settled only when a fresh
// read of the record shows it. One the record still names (read again after that read, as an
// update stores a copy before the record naming it) is damage: the event is left out too, as
// the disk store leaves out a parked event whose record does not decode, and is lost to the
// subscription — neither retried nor dead-lettered, its event being unreadable — which goes
// on with its other events (a subscription actor forgets a parked event ParkedEvents leaves
// out, and its next update purges the copy). It is logged once as an ERROR naming the topic,
// the subscription, the event and what to do, and counted ([DamageEntry], [Store.Health]).
// Failing the read instead would fail the subscription at every start, for good. A copy of
// a format this release does not know is an error: it may be a newer release's; upgrade the
// node.
func (s *Store) readParked(ctx context.Context, topic, sub string, epoch uint64, parked []store.Parked) ([]store.Parked, error) {
	if len(parked) == 0 {
		return parked, nil
	}
	if s.readParkedHook != nil {
		s.readParkedHook()
	}
	bad := make([]bool, len(parked)) // missing, or not decoding
	err := each(ctx, len(parked), func(ctx context.Context, i int) error {
		p := &parked[i]
		ev, _, err := s.readCopy(ctx, topic, sub, p.Seq)
		if err != nil {
			return err
		}
		p.Event, bad[i] = ev, ev == nil
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !slices.Contains(bad, true) {
		return parked, nil
	}
	// Some copies are gone or damaged: read the record afresh (not this store's view, which
	// only the semaphore's holder may touch) to tell settled events from lost ones.
	kv, err := s.meta.Get(ctx, subKey(topic, sub))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, subNotFound(topic, sub)
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream store: reading subscription %q of topic %q: %w", sub, topic, err)
	}
	rec, err := decodeSubRecord(kv.Value())
	if err != nil {
		return nil, fmt.Errorf("jetstream store: subscription %q of topic %q: %w", sub, topic, err)
	}
	if rec.epoch != epoch { // deleted and created again: the life asked about is gone
		return nil, subNotFound(topic, sub)
	}
	named := make(map[uint64]bool, len(rec.parked))
	for _, p := range rec.parked {
		named[p.Seq] = true
	}
	out := parked[:0]
	for i, p := range parked {
		if !bad[i] {
			out = append(out, p)
			continue
		}
		if !named[p.Seq] {
			continue // settled meanwhile
		}
		// Parked again meanwhile, its copy stored before the record read above: read it again.
		ev, damage, err := s.readCopy(ctx, topic, sub, p.Seq)
		if err != nil {
			return nil, err
		}
		if ev != nil {
			p.Event = ev
			out = append(out, p)
			continue
		}
		s.copyDamage(topic, sub, epoch, p.Seq, damage)
	}
	return out, nil
}

// copyLoss is what [Store.readParked] found wrong with the copy of a parked event the
// subscription's record names: err is the decoding error of a copy that does not decode
// (streamSeq its message), nil for a missing copy.
type copyLoss struct {
	streamSeq uint64
	err       error
}

// readCopy reads the copy of parked event seq of the subscription: its event, or nil and what
// is wrong with it when it is missing or does not decode. Its error is a failed read, or a copy
// of a format this release does not know.
func (s *Store) readCopy(ctx context.Context, topic, sub string, seq uint64) (*schemas.Event, copyLoss, error) {
	m, err := s.parked.GetLastMsgForSubject(ctx, s.parkedSubject(topic, sub, seq))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, copyLoss{}, nil
	}
	if err != nil {
		return nil, copyLoss{}, fmt.Errorf("jetstream store: reading parked event %d of subscription %q of topic %q: %w", seq, sub, topic, err)
	}
	ev, err := decodeBody(m.Data)
	switch {
	case err == nil:
		return ev, copyLoss{}, nil
	case (len(m.Data) == 0 || m.Data[0] == formatV1) && errors.Is(err, errCorrupt):
		return nil, copyLoss{streamSeq: m.Sequence, err: err}, nil
	default:
		return nil, copyLoss{}, fmt.Errorf("jetstream store: parked event %d of subscription %q of topic %q (a newer release's format? upgrade this node): %w", seq, sub, topic, err)
	}
}

// copyDamage reports, once, the copy of parked event seq of the subscription (of life epoch)
// that is missing or does not decode although the record names the event: an ERROR naming
// the topic, the subscription, the event and what to do, and a count ([DamageEntry]).
func (s *Store) copyDamage(topic, sub string, epoch, seq uint64, d copyLoss) {
	key := fmt.Sprintf("%s %d %d", s.parkedSubject(topic, sub, seq), epoch, d.streamSeq)
	s.lostMu.Lock()
	seen := s.lost[key]
	if !seen {
		if s.lost == nil {
			s.lost = make(map[string]bool)
		}
		s.lost[key] = true
	}
	s.lostMu.Unlock()
	if seen {
		return
	}
	p := s.opts.Prefix
	if d.err != nil {
		s.opts.Logger.Error("jetstream store: a parked event's copy does not decode; the event is lost to the subscription (neither retried nor dead-lettered: its event cannot be read), which goes on with its other events. It is not a copy egrid stored (a message published to the parked events' subjects by something else, or damage): give publish rights on "+p+".parked.> to egrid's NATS user only, and recover the event from a backup of stream "+p+"_parked if one holds it",
			"topic", topic, "subscription", sub, "seq", seq, "stream", p+"_parked", "streamSeq", d.streamSeq, "err", d.err)
	} else {
		s.opts.Logger.Error("jetstream store: a parked event's copy is missing although the subscription's record names the event; the event is lost to the subscription (neither retried nor dead-lettered: its event cannot be read), which goes on with its other events. Something other than egrid deleted it: give delete and purge rights on stream "+p+"_parked to egrid's NATS user only, and recover the event from a backup of the stream if one holds it",
			"topic", topic, "subscription", sub, "seq", seq, "stream", p+"_parked")
	}
	s.damaged(DamageEntry)
}
