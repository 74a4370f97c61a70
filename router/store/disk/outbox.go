package disk

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/egridio/egrid/router/store"
)

// The dead-letter outbox: dead letters waiting to be written to their destination, each put
// and delete committed with a sync. While the store is failed, those handed over by updates
// kept in memory belong to it as well (heldDeadLetters).

// PutDeadLetters implements [store.Store]. The records are one batch committed with a sync.
func (s *Store) PutDeadLetters(ctx context.Context, recs []store.DeadLetterRecord) error {
	return s.writeDeadLetters(ctx, "saving", func(b *pebble.Batch) error {
		var errs []error
		for _, r := range recs {
			errs = append(errs, b.Set(nameKey(prefixDeadLetter, r.ID), appendOpaque(nil, r.Payload), nil))
		}
		return errors.Join(errs...)
	})
}

// DeleteDeadLetters implements [store.Store]. The deletions are one batch committed with a
// sync.
func (s *Store) DeleteDeadLetters(ctx context.Context, ids []string) error {
	return s.writeDeadLetters(ctx, "deleting", func(b *pebble.Batch) error {
		var errs []error
		for _, id := range ids {
			errs = append(errs, b.Delete(nameKey(prefixDeadLetter, id), nil))
		}
		return errors.Join(errs...)
	})
}

func (s *Store) writeDeadLetters(ctx context.Context, what string, build func(b *pebble.Batch) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c, err := s.enter("", "")
	if err != nil {
		return err
	}
	defer c.done()
	if err := c.g.err(); err != nil {
		return fmt.Errorf("%s dead letters: %w", what, err)
	}
	b := c.g.db.NewBatch()
	if err := build(b); err != nil {
		_ = b.Close()
		return fmt.Errorf("%s dead letters: %w", what, err)
	}
	if b.Empty() {
		_ = b.Close()
		return nil
	}
	if err := c.g.commit(b, pebble.Sync, s.onFail); err != nil {
		return fmt.Errorf("%s dead letters: %w", what, err)
	}
	return nil
}

// heldDeadLetters returns the dead letters handed over by updates kept in memory while the
// store is failed, by ID: they are part of the outbox too (as LoadSubscription applies those
// updates), newer than what the database holds under their IDs, and a dead-letter actor that
// reloads meanwhile must find them. The payloads are the updates' own: copy before handing
// them out.
func (s *Store) heldDeadLetters() map[string][]byte {
	held := map[string][]byte{}
	s.mu.RLock()
	for _, w := range s.pending {
		for _, d := range w.update().DeadLetters {
			held[d.ID] = d.Payload
		}
	}
	s.mu.RUnlock()
	return held
}

// ScanDeadLetters implements [store.Store]: one iterator over the outbox's keys, a record
// decoded (copied) at a time, then the records held in memory while the store is failed.
//
// Records in a damaged table block are lost: the scan goes on after the block, which is
// reported once (an ERROR saying what is lost and what to do, and a count of kind
// DamageTable), and gives every record it can read; a router whose outbox holds such a block
// starts. A read-only store (egrid store check) gives what it can read as well, then returns
// the damage, wrapping [ErrCorrupt].
func (s *Store) ScanDeadLetters(ctx context.Context, fn func(store.DeadLetterRecord) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c, err := s.enter("", "")
	if err != nil {
		return err
	}
	defer c.done()
	held := s.heldDeadLetters()
	var fnErr error
	problems, err := s.scanOutbox(c.g.db, func(k, v []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, ok := held[string(k[1:])]; ok {
			return nil // the held one is newer
		}
		payload, err := decodeOpaque(v)
		if err != nil {
			return fmt.Errorf("dead letter %q: %w", k[1:], err)
		}
		if err := fn(store.DeadLetterRecord{ID: string(k[1:]), Payload: payload}); err != nil {
			fnErr = err
			return err
		}
		return nil
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return fmt.Errorf("listing dead letters: %w", err)
	}
	for id, payload := range held {
		if err := fn(store.DeadLetterRecord{ID: id, Payload: slices.Clone(payload)}); err != nil {
			return err
		}
	}
	return s.outboxProblems(problems)
}

// outboxProblems is what a scan of the outbox that met problems (scanOutbox) returns: nothing
// for a running store, which has reported them and goes on without what they hold; the
// problems for egrid store check (a read-only store), which lists them.
func (s *Store) outboxProblems(problems []error) error {
	if !s.opts.ReadOnly || len(problems) == 0 {
		return nil
	}
	return &outboxDamageError{problems}
}

// DeadLettersByID implements [store.Store]: a point read of each id. A dead letter in a
// damaged table block fails the call with an error wrapping [ErrCorrupt] (deadLetterDamage).
func (s *Store) DeadLettersByID(ctx context.Context, ids []string) ([]store.DeadLetterRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := s.enter("", "")
	if err != nil {
		return nil, err
	}
	defer c.done()
	held := s.heldDeadLetters()
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	recs := make([]store.DeadLetterRecord, 0, len(ids))
	for _, id := range ids {
		if payload, ok := held[id]; ok {
			recs = append(recs, store.DeadLetterRecord{ID: id, Payload: slices.Clone(payload)})
			continue
		}
		v, ok, err := get(c.g.db, nameKey(prefixDeadLetter, id))
		if pebble.IsCorruptionError(err) {
			return nil, s.deadLetterDamage(id, err)
		}
		if err != nil {
			return nil, fmt.Errorf("reading dead letter %q: %w", id, err)
		}
		if !ok {
			continue
		}
		payload, err := decodeOpaque(v)
		if err != nil {
			return nil, fmt.Errorf("dead letter %q: %w", id, err)
		}
		recs = append(recs, store.DeadLetterRecord{ID: id, Payload: payload})
	}
	return recs, nil
}

// DeadLetters implements [store.Store]. Records in a damaged table block are lost, as
// ScanDeadLetters says.
func (s *Store) DeadLetters(ctx context.Context) ([]store.DeadLetterRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := s.enter("", "")
	if err != nil {
		return nil, err
	}
	defer c.done()
	held := s.heldDeadLetters()
	recs := []store.DeadLetterRecord{}
	problems, err := s.scanOutbox(c.g.db, func(k, v []byte) error {
		if _, ok := held[string(k[1:])]; ok {
			return nil // the held one is newer
		}
		payload, err := decodeOpaque(v)
		if err != nil {
			return fmt.Errorf("dead letter %q: %w", k[1:], err)
		}
		recs = append(recs, store.DeadLetterRecord{ID: string(k[1:]), Payload: payload})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing dead letters: %w", err)
	}
	if err := s.outboxProblems(problems); err != nil {
		return nil, err
	}
	if len(held) == 0 {
		return recs, nil
	}
	for id, payload := range held {
		recs = append(recs, store.DeadLetterRecord{ID: id, Payload: slices.Clone(payload)})
	}
	slices.SortFunc(recs, func(a, b store.DeadLetterRecord) int { return strings.Compare(a.ID, b.ID) })
	return recs, nil
}
