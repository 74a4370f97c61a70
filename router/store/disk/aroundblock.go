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

// journalAround calls visit with the journal blocks of topic id from the one holding seq from
// (a block's key is its last seq) on, in key order, until visit returns false or the journal
// ends, as the store's table files other than skip (the damaged one) hold them: for each key
// its newest version in those files, none when that is a delete, and none older than skip's
// newest in skip's key range. The files are read side by side, a key at a time, so that a
// read takes what it needs and no more: the journal past the block may be long, and every
// Read from the block on comes here.
//
// The memtable is not read. Where Open found the damage, that loses nothing: what was written
// before pebble opened is in files (an Open that may write flushes what it replays from the
// logs; egrid store check's read-only one does not, and takes what only a log holds past the
// block for lost), and the topic takes no appends since (its journal's end is closed). A block
// found damaged while running is another matter: the topic goes on taking appends, and the
// entries past the block that only the memtable holds (appended since the last flush) are not
// read here: they are reported lost and skipped, as they were before there was a read around
// the block.
//
// Range deletions are not applied: the journal's are trims, below the topic's trim floor,
// which Read never reads under. A table file removed by a compaction before it is opened
// makes it list the files again, a few times; one opened is read to the end of the call.
// Every block visit is called with counts in g.aroundBlocks.
func (g *generation) journalAround(dir string, id, skip, from uint64, visit func(journalBlock) bool) error {
	lo, hi := seqKey(prefixJournal, id, from), idKey(prefixJournal, id+1)
	var tables []*aroundTable
	var shadowed func([]byte, uint64) bool
	var err error
	for range 3 {
		tables, shadowed, err = g.openTablesAround(dir, lo, hi, skip)
		if err == nil || !errors.Is(err, os.ErrNotExist) {
			break
		}
		err = errors.Join(err, closeTables(tables))
		tables = nil
	}
	if err == nil {
		err = g.mergeAround(tables, shadowed, visit)
	}
	return errors.Join(err, closeTables(tables))
}

// aroundTable is a table file read by journalAround: an iterator over its keys in
// [lo, hi), at the key below until done.
type aroundTable struct {
	num  uint64
	r    *sstable.Reader
	it   sstable.Iterator
	done bool
	// The key the iterator is at, valid until it moves.
	key    []byte
	seqNum uint64
	kind   pebble.InternalKeyKind
	value  func() ([]byte, error)
	next   func() error // moves the iterator on to its next key
}

func closeTables(tables []*aroundTable) error {
	var err error
	for _, t := range tables {
		err = errors.Join(err, t.it.Close(), t.r.Close())
	}
	return err
}

// openTablesAround opens the table files other than skip holding keys in [lo, hi), each
// positioned at its first key there, and returns with them whether a version of a key is older
// than the damaged file's newest, in its key range.
func (g *generation) openTablesAround(dir string, lo, hi []byte, skip uint64) ([]*aroundTable, func([]byte, uint64) bool, error) {
	levels, err := g.db.SSTables(pebble.WithKeyRangeFilter(lo, hi))
	if err != nil {
		return nil, nil, err
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
	var tables []*aroundTable
	for _, level := range levels {
		for _, f := range level {
			if uint64(f.FileNum) == skip {
				continue
			}
			if f.Virtual {
				return tables, nil, fmt.Errorf("table %s is virtual: it cannot be read apart from the store", f.FileNum)
			}
			t, err := openTable(g, g.fs.PathJoin(dir, f.BackingSSTNum.String()+".sst"), lo, hi)
			if t != nil {
				t.num = uint64(f.BackingSSTNum)
				tables = append(tables, t)
			}
			if err != nil {
				return tables, nil, fmt.Errorf("reading table %s: %w", f.BackingSSTNum, err)
			}
		}
	}
	return tables, shadowed, nil
}

// mergeAround calls visit with the keys of tables in key order, each key once with its newest
// version that shadowed does not leave out, unless that is a delete, until visit returns false.
func (g *generation) mergeAround(tables []*aroundTable, shadowed func([]byte, uint64) bool, visit func(journalBlock) bool) error {
	for {
		// The smallest key any table is at. (A journal has a few table files: a heap
		// would save little.)
		var key []byte
		for _, t := range tables {
			if !t.done && (key == nil || bytes.Compare(t.key, key) < 0) {
				key = t.key
			}
		}
		if key == nil {
			return nil
		}
		key = slices.Clone(key)
		var b journalBlock
		var set bool
		var deleted uint64 // the newest delete of the key, by its sequence number
		for _, t := range tables {
			for !t.done && bytes.Equal(t.key, key) {
				switch seqNum := t.seqNum; {
				case shadowed(key, seqNum):
				case t.kind != pebble.InternalKeyKindSet && t.kind != pebble.InternalKeyKindSetWithDelete:
					deleted = max(deleted, seqNum)
				case !set || b.seqNum < seqNum:
					v, err := t.value()
					if err != nil {
						return fmt.Errorf("reading table %06d: %w", t.num, err)
					}
					b, set = journalBlock{key: key, value: slices.Clone(v), seqNum: seqNum}, true
				}
				if err := t.next(); err != nil {
					return fmt.Errorf("reading table %06d: %w", t.num, err)
				}
			}
		}
		if !set || deleted >= b.seqNum {
			continue
		}
		g.aroundBlocks.Add(1)
		if !visit(b) {
			return nil
		}
	}
}

// openTable opens the table file at path and positions an iterator over its point keys in
// [lo, hi) at the first of them.
func openTable(g *generation, path string, lo, hi []byte) (*aroundTable, error) {
	f, err := g.fs.Open(path)
	if err != nil {
		return nil, err
	}
	readable, err := sstable.NewSimpleReadable(f)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	r, err := sstable.NewReader(context.Background(), readable, sstable.ReaderOptions{})
	if err != nil {
		_ = readable.Close()
		return nil, err
	}
	it, err := r.NewIter(sstable.NoTransforms, lo, hi, sstable.AssertNoBlobHandles)
	if err != nil {
		_ = r.Close()
		return nil, err
	}
	t := &aroundTable{r: r, it: it}
	kv := it.SeekGE(lo, 0)
	at := func() error {
		if kv == nil {
			t.done = true
			return it.Error()
		}
		t.key, t.seqNum, t.kind = kv.K.UserKey, uint64(kv.SeqNum()), kv.Kind()
		return nil
	}
	t.value = func() ([]byte, error) {
		v, _, err := kv.Value(nil)
		return v, err
	}
	t.next = func() error {
		kv = it.Next()
		return at()
	}
	return t, at()
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
	// The blocks from next on to the one holding the limit-th entry to deliver (short, when
	// the limit was met before good), or to good or the journal's end: what the loop below
	// takes, not the journal's rest, which every Read from the block on would read again.
	var blocks []journalBlock
	var short bool
	want, at := uint64(limit), next
	rerr := g.journalAround(s.dir, t.id, file, next, func(b journalBlock) bool {
		last := seqOf(b.key)
		first := max(blockFirst(last, b.value), at)
		if first >= good {
			return false
		}
		blocks = append(blocks, b)
		if last >= good-1 {
			return false
		}
		if n := last - first + 1; n < want {
			want, at = want-n, last+1
			return true
		}
		short = true
		return false
	})
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
	// A read cut short takes what a block that does not decode left out of its limit from
	// the next call: the seqs after from are not lost.
	if len(out) < limit && from < good && !short {
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
