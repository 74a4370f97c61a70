package disk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"

	"github.com/egridio/egrid/router/store"
)

// Reading a journal around a damaged table file.
//
// A damaged table block whose keys reach past a topic's journal (into the keys that follow
// it: another topic's journal, the next id, parked retries) is met by pebble on every read of
// the journal from the block on: a seek positions each level at its first key at or after the
// read's start, and in the damaged file that key is in the block, however far past it the
// read starts. The entries after the block that other table files hold (newer events, flushed
// later) are intact, but pebble cannot read them while the damaged file is in the store:
// journalAround reads them from those files directly, so they are delivered, and the entries
// lost are those found in no other file. So are the entries before the block that other files
// hold, where the block's file starts before them (the previous topic's journal in it).

// damagedFile returns the number of the table file that pebble's corruption error err names
// ("pebble: file 000012: block 106154/765: crc32c checksum mismatch …").
func damagedFile(err error) (uint64, bool) {
	if err == nil {
		return 0, false
	}
	m := blockRE.FindStringSubmatch(err.Error())
	if m == nil {
		return 0, false
	}
	n, perr := strconv.ParseUint(m[1], 10, 64)
	return n, perr == nil
}

// journalBlock is a journal key and its value, read from a table file.
type journalBlock struct {
	key, value []byte
	seqNum     uint64 // pebble's sequence number of the version read
}

// journalAround returns the journal blocks of topic id from the one holding seq from (a
// block's key is its last seq) to the journal's end, in key order, as the store's table files
// other than skip (the damaged one) hold them: for each key its newest version in those files,
// none when that is a delete, and none older than skip's newest in skip's key range. The
// memtable is not read: what was written before pebble opened is in files (an Open that may
// write flushes what it replays from the logs; egrid store check's read-only one does not,
// and takes what only a log holds past the block for lost), and what was written since lies
// past the block (numbering goes on past it, or the topic takes no appends). Range deletions
// are not applied: the journal's are trims, below the topic's trim floor, which Read never
// reads under. A table file removed by a compaction meanwhile makes it list the files again,
// a few times.
func (g *generation) journalAround(dir string, id, skip, from uint64) ([]journalBlock, error) {
	lo, hi := seqKey(prefixJournal, id, from), idKey(prefixJournal, id+1)
	var err error
	for range 3 {
		var blocks []journalBlock
		blocks, err = g.readTablesAround(dir, lo, hi, skip)
		if !errors.Is(err, os.ErrNotExist) {
			return blocks, err
		}
	}
	return nil, err
}

func (g *generation) readTablesAround(dir string, lo, hi []byte, skip uint64) ([]journalBlock, error) {
	levels, err := g.db.SSTables(pebble.WithKeyRangeFilter(lo, hi))
	if err != nil {
		return nil, err
	}
	// A version older than the damaged file's newest, in its key range, may be one that the
	// file holds a newer version of, lost with its block: it is left out, not taken for
	// the key's value. (The journal writes each key once; an older version is a copy.)
	var shadowLo, shadowHi []byte
	var shadowSeq uint64
	for _, level := range levels {
		for _, f := range level {
			if uint64(f.FileNum) == skip {
				shadowLo, shadowHi, shadowSeq = f.Smallest.UserKey, f.Largest.UserKey, uint64(f.LargestSeqNum)
			}
		}
	}
	shadowed := func(k []byte, seqNum uint64) bool {
		return shadowHi != nil && seqNum <= shadowSeq && bytes.Compare(k, shadowLo) >= 0 && bytes.Compare(k, shadowHi) <= 0
	}
	newest := map[string]journalBlock{}
	deleted := map[string]uint64{} // the newest delete of a key, by its sequence number
	for _, level := range levels {
		for _, f := range level {
			if uint64(f.FileNum) == skip {
				continue
			}
			if f.Virtual {
				return nil, fmt.Errorf("table %s is virtual: it cannot be read apart from the store", f.FileNum)
			}
			err := readTable(g, g.fs.PathJoin(dir, f.BackingSSTNum.String()+".sst"), lo, hi, func(k []byte, seqNum uint64, kind pebble.InternalKeyKind, v []byte) {
				if shadowed(k, seqNum) {
					return
				}
				key := string(k)
				if kind != pebble.InternalKeyKindSet && kind != pebble.InternalKeyKindSetWithDelete {
					deleted[key] = max(deleted[key], seqNum)
					return
				}
				if b, ok := newest[key]; !ok || b.seqNum < seqNum {
					newest[key] = journalBlock{key: k, value: v, seqNum: seqNum}
				}
			})
			if err != nil {
				return nil, fmt.Errorf("reading table %s: %w", f.BackingSSTNum, err)
			}
		}
	}
	var blocks []journalBlock
	for key, b := range newest {
		if deleted[key] < b.seqNum {
			blocks = append(blocks, b)
		}
	}
	slices.SortFunc(blocks, func(a, b journalBlock) int { return bytes.Compare(a.key, b.key) })
	return blocks, nil
}

// readTable calls fn with every point key in [lo, hi) of the table file at path.
func readTable(g *generation, path string, lo, hi []byte, fn func(k []byte, seqNum uint64, kind pebble.InternalKeyKind, v []byte)) error {
	f, err := g.fs.Open(path)
	if err != nil {
		return err
	}
	readable, err := sstable.NewSimpleReadable(f)
	if err != nil {
		_ = f.Close()
		return err
	}
	r, err := sstable.NewReader(context.Background(), readable, sstable.ReaderOptions{})
	if err != nil {
		_ = readable.Close()
		return err
	}
	defer r.Close()
	it, err := r.NewIter(sstable.NoTransforms, lo, hi, sstable.AssertNoBlobHandles)
	if err != nil {
		return err
	}
	for kv := it.SeekGE(lo, 0); kv != nil; kv = it.Next() {
		v, _, err := kv.Value(nil)
		if err != nil {
			_ = it.Close()
			return err
		}
		fn(slices.Clone(kv.K.UserKey), uint64(kv.SeqNum()), kv.Kind(), slices.Clone(v))
	}
	return errors.Join(it.Error(), it.Close())
}

// readAround reads topic t's journal from seq next, which pebble could not read (err, naming
// the damaged table file), up to the first seq pebble reads again past the damage (none when
// the block reaches past the journal, endClosed): the entries there, through visible and up to
// limit, that the other table files hold. The seqs in between that no other file holds are
// lost, and reported so once. It returns the entries and the seq to read on from, or false,
// for the caller to go past the damage as for any damaged block, when pebble's error names no
// file or the other table files cannot be read.
func (s *Store) readAround(g *generation, topicName string, t *topic, next, visible uint64, limit int, err error) ([]store.Entry, uint64, bool) {
	file, ok := damagedFile(err)
	if !ok {
		return nil, 0, false
	}
	t.mu.Lock()
	closed := t.endClosed
	t.mu.Unlock()
	good := visible + 1 // the first seq pebble reads again
	if !closed {
		good = firstReadable(g.db, func(at uint64) []byte { return seqKey(prefixJournal, t.id, at) },
			seqKey(prefixJournal, t.id, visible+1), next, visible)
	}
	blocks, rerr := g.journalAround(s.dir, t.id, file, next)
	if rerr != nil {
		s.log.Warn("disk store: reading a topic's journal past a damaged table block from its other table files failed; the entries the block keeps pebble from reading are taken for lost",
			"dir", s.dir, "topic", topicName, "fromSeq", next, "err", rerr)
		return nil, 0, false
	}
	var out []store.Entry
	from := next // the next seq to deliver
	for _, b := range blocks {
		last := seqOf(b.key)
		first := blockFirst(last, b.value)
		if first >= good || len(out) >= limit {
			break
		}
		if first > from {
			s.reportLost(topicName, t, from, first-1)
		}
		derr := decodeJournal(last, b.value, from, func(e store.Entry) error {
			if e.Seq >= good {
				return errStop
			}
			out = append(out, e)
			from = e.Seq + 1
			if len(out) == limit {
				return errStop
			}
			return nil
		})
		if errors.Is(derr, errCorrupt) {
			from = s.skipUndecodable(topicName, t, from, &undecodableBlock{last: last, err: derr})
		}
	}
	if len(out) < limit && from < good {
		s.reportLost(topicName, t, from, good-1)
		from = good
	}
	return out, from, true
}

// reportLost reports, once, the journal entries lo..hi of topic t as lost in a damaged table
// block: an ERROR and a count. A range starting in one reported already is not reported again.
func (s *Store) reportLost(topicName string, t *topic, lo, hi uint64) {
	t.mu.Lock()
	for _, d := range t.damaged {
		if lo >= d.lo && lo <= d.hi {
			t.mu.Unlock()
			return
		}
	}
	d := damage{lo: lo, hi: hi}
	t.damaged = append(t.damaged, d)
	t.mu.Unlock()
	s.log.Error("disk store: journal entries are in a damaged table block and cannot be read; they are lost to every subscription of the topic, and delivery goes on after them. Recover them from a backup of the data directory; egrid store check --data-dir DIR lists the damage",
		"dir", s.dir, "topic", topicName, "fromSeq", d.lo, "throughSeq", d.hi)
	s.damaged(DamageTable)
}
