package jetstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/store"
)

// The dead-letter outbox: one key per record in the dead-letter bucket, each put acknowledged
// by JetStream, deleted without leaving deletion markers, listed by scan and stream (scan.go).

// PutDeadLetters implements [store.Store]: one key per record in the dead-letter bucket, each
// written once JetStream acknowledged it (stored on a majority of the replicas). The keys are
// written up to bodyCalls at once (a batch of endings costs a few round trips, not one each),
// after every record's id is checked: a bad id writes none of them.
func (s *Store) PutDeadLetters(ctx context.Context, recs []store.DeadLetterRecord) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	return s.putDeadLetters(ctx, recs)
}

func (s *Store) putDeadLetters(ctx context.Context, recs []store.DeadLetterRecord) error {
	for _, r := range recs {
		if err := checkName("dead-letter record", r.ID); err != nil {
			return err
		}
	}
	return each(ctx, len(recs), func(ctx context.Context, i int) error {
		r := recs[i]
		if _, err := s.dead.Put(ctx, escape(r.ID), appendOpaque(nil, r.Payload)); err != nil {
			return fmt.Errorf("jetstream store: writing dead-letter record %q: %w", r.ID, err)
		}
		return nil
	})
}

// DeadLetters implements [store.Store].
func (s *Store) DeadLetters(ctx context.Context) ([]store.DeadLetterRecord, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	recs := []store.DeadLetterRecord{}
	err = scan(ctx, s.dead, s.deadStream, ">", func(key string, val []byte) error {
		id, err := unescape(key)
		if err != nil {
			s.keyDamage(s.dead.Bucket(), key, "a dead-letter record", err) // left out: see metadamage.go
			return nil
		}
		p, err := decodeOpaque(val)
		if err != nil {
			return fmt.Errorf("dead-letter record %q: %w", id, err)
		}
		recs = append(recs, store.DeadLetterRecord{ID: id, Payload: p})
		return nil
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("jetstream store: listing dead-letter records: %w", err)
	}
	slices.SortFunc(recs, func(a, b store.DeadLetterRecord) int { return strings.Compare(a.ID, b.ID) })
	return recs, nil
}

// ScanDeadLetters implements [store.Store]: a key watch of the dead-letter bucket, each
// record handed to fn as it arrives.
func (s *Store) ScanDeadLetters(ctx context.Context, fn func(store.DeadLetterRecord) error) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	var fnErr error
	err = stream(ctx, s.dead, s.deadStream, ">", func(key string, val []byte) error {
		id, err := unescape(key)
		if err != nil {
			s.keyDamage(s.dead.Bucket(), key, "a dead-letter record", err) // left out: see metadamage.go
			return nil
		}
		p, err := decodeOpaque(val)
		if err != nil {
			return fmt.Errorf("dead-letter record %q: %w", id, err)
		}
		if err := fn(store.DeadLetterRecord{ID: id, Payload: p}); err != nil {
			fnErr = err
			return err
		}
		return nil
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return fmt.Errorf("jetstream store: listing dead-letter records: %w", err)
	}
	return nil
}

// DeadLettersByID implements [store.Store]: a get of each id's key.
func (s *Store) DeadLettersByID(ctx context.Context, ids []string) ([]store.DeadLetterRecord, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	recs := make([]store.DeadLetterRecord, 0, len(ids))
	for _, id := range ids {
		if checkName("dead-letter record", id) != nil {
			continue // no such key can be stored
		}
		e, err := s.dead.Get(ctx, escape(id))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("jetstream store: reading dead-letter record %q: %w", id, err)
		}
		if e.Operation() != jetstream.KeyValuePut {
			continue
		}
		p, err := decodeOpaque(e.Value())
		if err != nil {
			return nil, fmt.Errorf("dead-letter record %q: %w", id, err)
		}
		recs = append(recs, store.DeadLetterRecord{ID: id, Payload: p})
	}
	return recs, nil
}

// DeleteDeadLetters implements [store.Store].
func (s *Store) DeleteDeadLetters(ctx context.Context, ids []string) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	for _, id := range ids {
		if id == "" {
			continue
		}
		// Its messages, leaving no deletion marker: the outbox takes one key per dead letter,
		// and markers, kept for good, would make every later listing longer.
		if err := purgeKey(ctx, s.dead, s.deadStream, escape(id), 0); err != nil {
			return fmt.Errorf("jetstream store: deleting dead-letter record %q: %w", id, err)
		}
	}
	return nil
}
