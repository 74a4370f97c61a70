package disk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/egridio/egrid/router/store"
)

// Report is what [Check] found in a store.
type Report struct {
	Topics, Subscriptions, JournalEntries, ParkedEvents, DeadLetters, Histories int
	// Problems lists the damage found, each saying what is lost and how to recover. A store
	// with none is sound.
	Problems []error
}

// Check verifies the store in dir offline, without writing to it (egrid store check): the
// marker files and write-ahead logs (CheckDir), the table files' sizes (as pebble opens the
// store), then every topic's journal, every subscription's state, the delivery histories and
// the dead-letter outbox, read through (and, but for the histories, decoded), which checks
// every block's checksum on the way. key is the secret key the definitions were written
// with, nil when none. Damage found while reading is logged to log as the running store
// would log it. The error is for a store Check could not read at all.
func Check(ctx context.Context, dir string, key []byte, log *slog.Logger) (Report, error) {
	var r Report
	// Open takes the directory's lock, then runs CheckDir: damage it finds there (or a table
	// file cut short or missing, which pebble does not open the store with) stops the check.
	s, err := Open(dir, Options{ReadOnly: true, SecretKey: key, Logger: log})
	if d := (*damageError)(nil); errors.As(err, &d) {
		r.Problems = append(append(r.Problems, d.problems...), d.tails...)
		return r, nil
	}
	if err != nil {
		return r, err
	}
	defer s.Close()
	r.Problems = append(r.Problems, s.tails...)
	s.mu.RLock()
	r.Problems = append(r.Problems, s.loadProblems...) // damaged definitions, next id, trim floors (defdamage.go, valdamage.go)
	s.mu.RUnlock()
	topics, err := s.Topics(ctx)
	if err != nil {
		return r, err
	}
	for _, t := range topics {
		r.Topics++
		last, err := s.LastSeq(ctx, t.Name)
		if err != nil {
			r.Problems = append(r.Problems, fmt.Errorf("topic %q: %w", t.Name, err))
			continue
		}
		for next := uint64(1); next <= last; {
			got, err := s.Read(ctx, t.Name, next, 1024)
			if err != nil {
				r.Problems = append(r.Problems, fmt.Errorf("topic %q from %d: %w", t.Name, next, err))
				break
			}
			if len(got) == 0 {
				break
			}
			r.JournalEntries += len(got)
			next = got[len(got)-1].Seq + 1
		}
		s.mu.RLock()
		tp := s.topics[t.Name]
		var damaged []damage
		if tp != nil {
			tp.mu.Lock()
			damaged = append(damaged, tp.damaged...)
			tp.mu.Unlock()
		}
		s.mu.RUnlock()
		for _, d := range damaged {
			r.Problems = append(r.Problems, fmt.Errorf("%w: topic %q: journal entries %d to %d are damaged (in a table block that fails its checksum, or in a block that does not decode) and cannot be read: restore the directory from a backup to recover them (a running egrid skips them, saying so)", ErrCorrupt, t.Name, d.lo, d.hi))
		}
		subs, err := s.Subscriptions(ctx, t.Name)
		if err != nil {
			r.Problems = append(r.Problems, fmt.Errorf("topic %q: %w", t.Name, err))
			continue
		}
		for _, sub := range subs {
			r.Subscriptions++
			st, err := s.LoadSubscription(ctx, t.Name, sub.Name)
			for _, l := range s.stateLosses(t.Name, sub.Name) {
				r.Problems = append(r.Problems, l.problem(t.Name, sub.Name))
			}
			if err != nil {
				r.Problems = append(r.Problems, fmt.Errorf("%w: subscription %q of topic %q: %w", ErrCorrupt, sub.Name, t.Name, err))
				continue
			}
			r.ParkedEvents += len(st.Parked)
		}
	}
	// The delivery histories: read through, which checks their blocks' checksums.
	s.mu.RLock()
	g := s.gen
	s.mu.RUnlock()
	problems, err := s.scanHistories(g.db, func(_, _ []byte) error { r.Histories++; return nil })
	r.Problems = append(r.Problems, problems...)
	if err != nil {
		r.Problems = append(r.Problems, fmt.Errorf("%w: delivery histories: %w", ErrCorrupt, err))
	}
	// Counted a record at a time: the outbox may hold many large events.
	err = s.ScanDeadLetters(ctx, func(store.DeadLetterRecord) error { r.DeadLetters++; return nil })
	if err != nil {
		r.Problems = append(r.Problems, fmt.Errorf("%w: dead-letter outbox: %w", ErrCorrupt, err))
	}
	return r, nil
}
