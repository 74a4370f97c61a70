package disk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/cockroachdb/pebble/v2"

	"github.com/egridio/egrid/schemas/clip"
)

// Damaged bookkeeping values.
//
// The next id, a topic's trim floor and a subscription's cursor are numbers the store keeps
// beside what they describe. One that pebble reads intact but that does not decode, or (the
// next id, a trim floor) that pebble reports in a damaged table block, is recomputed from
// what the store holds rather than refusing Open: the subscription's cursor as a cursor in a
// damaged block (repairCursors: delivery starts again at the journal's oldest entry), the
// floor and the next id here. Each is reported once (an ERROR saying what it means, a count, a
// problem of egrid store check) and written back by repairCursors, in one synced batch, so
// that the next start is clean; a read-only store (egrid store check) writes nothing.

// repair is a key load writes back once it has recomputed its value, or, with drop, a key
// (or, with hi, the range [key, hi)) it removes (orphaned definitions, defdamage.go).
type repair struct {
	key, value, hi []byte
	drop           bool
}

// idPrefixes are the prefixes whose keys start with a topic's or subscription's id (keys.go).
var idPrefixes = []byte{prefixSub, prefixJournal, prefixFloor, prefixCursor, prefixParked, prefixProbation, prefixHistory}

// recomputeNextID sets s.nextID, whose stored value is lost (kind: DamageDefinition when it
// does not decode, DamageTable when pebble reports it damaged), to the highest id the store
// holds anything under: the loaded definitions' (load has taken them) and every id that starts
// a key of idPrefixes. An id is handed out again only when nothing is left under it, so a new
// topic or subscription never takes in an old one's journal or state. A damaged table block
// met on the way refuses the start: the ids it holds cannot be read.
func (s *Store) recomputeNextID(g *generation, kind string) (repair, error) {
	for _, p := range idPrefixes {
		id, err := highestID(g.db, p)
		if pebble.IsCorruptionError(err) {
			pr := fmt.Errorf("%w: the next id (the highest id handed out to a topic or subscription) cannot be read, and recomputing it met a damaged table block (%v): the store cannot tell which ids are taken. Restore the directory from a backup; egrid store check --data-dir %s lists the damage", ErrCorrupt, err, s.dir)
			s.log.Error("disk store: damage found; refusing to start", "dir", s.dir, "err", pr)
			s.damaged(DamageTable)
			return repair{}, &damageError{problems: []error{pr}}
		}
		if err != nil {
			return repair{}, fmt.Errorf("recomputing the next id: %w", err)
		}
		s.nextID = max(s.nextID, id)
	}
	what := "does not decode"
	if kind == DamageTable {
		what = "is in a damaged table block"
	}
	s.log.Error("disk store: the next id (the highest id handed out to a topic or subscription) "+what+"; it is recomputed from the highest id the store holds anything under, and written again. Nothing is lost; egrid store check --data-dir DIR lists the damage",
		"dir", s.dir, "nextID", s.nextID)
	s.loadProblems = append(s.loadProblems, fmt.Errorf("%w: the next id (the highest id handed out to a topic or subscription) %s: nothing is lost (a running egrid recomputes it as %d, the highest id the store holds anything under, and writes it)", ErrCorrupt, what, s.nextID))
	s.damaged(kind)
	return repair{key: nextIDKey, value: encodeUint64(s.nextID)}, nil
}

// highestID returns the highest id that starts a key under prefix, 0 when none does.
func highestID(db *pebble.DB, prefix byte) (uint64, error) {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefix}, UpperBound: []byte{prefix + 1}})
	if err != nil {
		return 0, err
	}
	var id uint64
	// A key too short to hold an id (a damaged definition's, defdamage.go) can sort after
	// the others: step back past it.
	for valid := it.Last(); valid; valid = it.Prev() {
		if len(it.Key()) >= 9 {
			id = idOf(it.Key())
			break
		}
	}
	return id, errors.Join(it.Error(), it.Close())
}

// recomputeFloor sets the trim floor of topic t (name), whose stored value is lost (lost:
// errCorrupt when it does not decode, kind DamageEntry; pebble's error when it reports it
// damaged, kind DamageTable, counted once per block and Store, copyDamage not counting it
// again), to the
// lowest the journal allows: just below the first entry of its oldest block, so that every
// entry still in the journal is read (entries a Trim cut through in that block may be
// delivered again to a subscription whose cursor is below them; none is skipped). A journal
// trimmed to nothing gives no bound: the floor is then the highest seq any of t's
// subscriptions holds (cursor, parked retries), so that numbering goes on above every seq a
// subscription has seen and no new event is taken for delivered. A journal whose oldest block
// cannot be read is not empty: the floor is 0, and reading the journal reports the block and
// delivers what follows. loadSeqs has taken the floor as 0.
func (s *Store) recomputeFloor(g *generation, name string, t *topic, lost error) (repair, error) {
	kind := DamageEntry
	if pebble.IsCorruptionError(lost) {
		kind = DamageTable
	}
	lo, hi := idRange(prefixJournal, t.id)
	it, err := g.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return repair{}, err
	}
	var floor uint64
	empty := !it.First()
	if !empty {
		if v, err := it.ValueAndErr(); err == nil {
			floor = blockFirst(seqOf(it.Key()), v) - 1
		} // else 0: reading the journal reports the damaged block
	}
	if err := errors.Join(it.Error(), it.Close()); pebble.IsCorruptionError(err) {
		// The oldest block is damaged, not the journal empty: 0, reading the journal reports
		// the block and delivers what follows it.
		floor, empty = 0, false
	} else if err != nil {
		return repair{}, fmt.Errorf("recomputing the trim floor: %w", err)
	}
	if empty {
		ids := make([]uint64, 0, len(t.subs)+len(t.damagedSubs))
		for _, sb := range t.subs {
			ids = append(ids, sb.id)
		}
		for _, d := range t.damagedSubs {
			if d.id != 0 {
				ids = append(ids, d.id)
			}
		}
		for _, id := range ids {
			seq, err := highestSubSeq(g.db, id)
			if err != nil {
				return repair{}, fmt.Errorf("recomputing the trim floor: %w", err)
			}
			floor = max(floor, seq)
		}
	}
	t.mu.Lock()
	t.floor = floor
	t.next = max(t.next, floor)
	t.visible = t.next
	t.mu.Unlock()
	what := "does not decode"
	if kind == DamageTable {
		what = "is in a damaged table block"
	}
	topic := clip.String(name)
	s.log.Error("disk store: a topic's trim floor (the newest event number trimmed from its journal) "+what+"; it is recomputed from the journal's oldest entry (or, the journal being empty, from the highest event number its subscriptions hold) and written again. Every event still in the journal is delivered to the subscriptions that have not had it, none skipped; some trimmed events left in the oldest journal block may be delivered again. Restore the data directory from a backup to avoid that; egrid store check --data-dir DIR lists the damage",
		"dir", s.dir, "topic", topic, "floor", floor, "journalEmpty", empty)
	s.loadProblems = append(s.loadProblems, fmt.Errorf("%w: topic %q: its trim floor %s: a running egrid recomputes it as %d (from the journal's oldest entry, or the highest event number its subscriptions hold) and writes it; no event is skipped", ErrCorrupt, topic, what, floor))
	if kind == DamageEntry {
		s.damaged(kind)
	} else if count, _ := s.spans.note(lost, lostState(prefixFloor)); count {
		s.damaged(kind)
	}
	return repair{key: idKey(prefixFloor, t.id), value: encodeUint64(floor)}, nil
}

// blockFirst returns the first seq the journal value v stored under seq last holds: a block
// (format 2) holds its count of entries up to last, an entry (format 1) is last alone. A block
// whose count does not decode gives 1: reading the journal reports it.
func blockFirst(last uint64, v []byte) uint64 {
	if len(v) == 0 || v[0] != formatBlock {
		return max(last, 1)
	}
	n, k := binary.Uvarint(v[1:])
	if k <= 0 || n == 0 || n > last {
		return 1
	}
	return last - n + 1
}

// highestSubSeq returns the highest event number the state of subscription id holds: its
// cursor (not 2⁶⁴−1, which repairCursors lowers, nor one that does not decode) and its newest
// parked retry. Parts that a damaged table block keeps from being read count as 0: loading
// the subscription reports them.
func highestSubSeq(db *pebble.DB, id uint64) (uint64, error) {
	var seq uint64
	v, ok, err := get(db, idKey(prefixCursor, id))
	if err != nil && !pebble.IsCorruptionError(err) {
		return 0, err
	}
	if c, dec := decodeUint64(v); ok && dec && c != math.MaxUint64 {
		seq = c
	}
	lo, hi := idRange(prefixParked, id)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return 0, err
	}
	if it.Last() && len(it.Key()) == 17 {
		seq = max(seq, seqOf(it.Key()))
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil && !pebble.IsCorruptionError(err) {
		return 0, err
	}
	return seq, nil
}

// journalEnd is where a topic's journal ends, for its numbering (readJournalEnd).
type journalEnd struct {
	// last is the newest seq the journal holds; when damaged, the highest a damaged block
	// may hold, or, closed, the newest read before it.
	last uint64
	// damaged: the journal's newest entries are in a damaged table block.
	damaged bool
	// closed: damaged, and the block reaches past the journal's end.
	closed bool
}

// errJournalEndClosed refuses an Append to a topic whose journal ends in a damaged table block
// that reaches past it (journalEnd.closed).
var errJournalEndClosed = fmt.Errorf("%w: the topic's newest journal entries are in a damaged table block that reaches past the journal's end, so a new event could not be read back: delete the topic and create it again (its subscriptions with it), or restore the data directory from a backup; egrid store check --data-dir DIR lists the damage", ErrCorrupt)

// readJournalEnd returns where the journal of topic id ends. Numbering goes on after last: a
// damaged table block holding the journal's newest entries (pebble fails the read of its
// last key) does not stop the store. Every key of such a block lies below the lowest seq from
// which the journal reads to its end without meeting damage, and numbers from there on are
// read back: last is that seq less one, or the newest seq read from it when higher. When no
// seq reads clean to the end (the block holds keys past the journal too: pebble loads it for
// any read of the journal's end), closed says so: no new event of the topic could be read
// back, and last is the newest seq the other table files hold past the block (Read reads them
// from those files, readAround), or the newest read before the damage.
func readJournalEnd(g *generation, dir string, id uint64) (journalEnd, error) {
	db := g.db
	last, err := lastJournalSeq(db, id)
	if !pebble.IsCorruptionError(err) {
		return journalEnd{last: last}, err
	}
	_, hi := idRange(prefixJournal, id)
	// tail reads the journal from seq to its end: clean when no damage is met, with the
	// newest seq read; damage is pebble's error for the damage met.
	var damage error
	tail := func(seq uint64) (newest uint64, clean bool, err error) {
		err = scan(db, seqKey(prefixJournal, id, seq), hi, func(k, _ []byte) error {
			newest = seqOf(k)
			return nil
		})
		if pebble.IsCorruptionError(err) {
			damage = err
			return newest, false, nil
		}
		return newest, err == nil, err
	}
	before, clean, err := tail(0)
	if err != nil || clean {
		return journalEnd{last: before}, err // the damage lies past the journal's keys
	}
	newest, clean, err := tail(math.MaxUint64)
	if err != nil {
		return journalEnd{}, err
	}
	if !clean {
		// Entries past the block that other table files hold (newer events, flushed later)
		// cannot be read through pebble, but they are there: the journal ends at the newest
		// of them (journalAround). Before, the journal was taken to end before the block,
		// and they were never read.
		end := journalEnd{last: before, damaged: true, closed: true}
		if file, ok := damagedFile(damage); ok {
			var last uint64
			if err := g.journalAround(dir, id, file, before+1, func(b journalBlock) bool {
				last = seqOf(b.key)
				return true
			}); err == nil {
				end.last = max(before, last)
			}
		}
		return end, nil
	}
	// tail(bad) meets the damage, tail(good) does not: step out from the newest seq read
	// before the damage, then bisect back.
	bad, good := before, uint64(math.MaxUint64)
	for step := uint64(1); step < good-before; step *= 2 {
		n, clean, err := tail(before + step)
		if err != nil {
			return journalEnd{}, err
		}
		if clean {
			good, newest = before+step, n
			break
		}
		bad = before + step
		if step > (math.MaxUint64-before)/2 {
			break
		}
	}
	for good-bad > 1 {
		mid := bad + (good-bad)/2
		n, clean, err := tail(mid)
		if err != nil {
			return journalEnd{}, err
		}
		if clean {
			good, newest = mid, n
		} else {
			bad = mid
		}
	}
	return journalEnd{last: max(good-1, newest), damaged: true}, nil
}

// journalEndDamage reports, once, that the newest entries of topic t's journal (name) are in
// a damaged table block (readJournalEnd): an ERROR saying where numbering goes on or, the
// block reaching past the journal, that t takes no new event and what to do, and a count. It
// returns the problem for egrid store check. The entries in the block are reported as lost
// when a Read reaches them (skipDamage).
func (s *Store) journalEndDamage(name string, t *topic, end journalEnd) error {
	t.mu.Lock()
	t.endReported = true
	next := t.next
	t.mu.Unlock()
	topic := clip.String(name)
	s.damaged(DamageTable)
	if end.closed {
		s.log.Error("disk store: a topic's newest journal entries are in a damaged table block that reaches past the journal's end; the topic takes no new event (a publish is refused: it could not be read back), its subscriptions deliver what the journal holds before the block, and the entries after it that other table files hold. Delete the topic and create it again (egrid topic delete --name NAME; its subscriptions go with it), or restore the data directory from a backup; egrid store check --data-dir DIR lists the damage",
			"dir", s.dir, "topic", topic, "readThrough", end.last)
		return fmt.Errorf("%w: topic %q: its newest journal entries are in a damaged table block that reaches past the journal's end: a running egrid refuses its publishes (they could not be read back); delete the topic and create it again, or restore the directory from a backup", ErrCorrupt, topic)
	}
	s.log.Error("disk store: a topic's newest journal entries are in a damaged table block; numbering goes on past every number the block may hold, so new events are read back. The entries in the block are lost to every subscription (reading the journal names them); restore the data directory from a backup to recover them; egrid store check --data-dir DIR lists the damage",
		"dir", s.dir, "topic", topic, "numberingFrom", next+1)
	return fmt.Errorf("%w: topic %q: its newest journal entries are in a damaged table block: a running egrid numbers new events from %d, past it; the entries in it are lost", ErrCorrupt, topic, next+1)
}
