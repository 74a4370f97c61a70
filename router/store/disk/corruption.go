package disk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/record"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas/clip"
)

// Corruption detection.
//
// Pebble takes some damage silently: without its manifest marker (a 0-byte file) it opens
// the directory as a new, empty store and deletes the table files it no longer knows; a
// write-ahead log damaged in the middle is replayed up to the damage and the rest dropped with
// an INFO line, and one deleted or cut short at its end is not missed at all (walreplay.go); a
// damaged table block fails the reads that reach it. A table file cut short or
// missing pebble does report, as it opens the store, but not as corruption. The store looks
// for each (CheckDir before pebble opens the directory; tableProblems when pebble refuses to
// open it; Read when pebble reports corruption), says what is lost and how to recover in an
// ERROR, counts it (Options.OnCorruption, [Store.Health]), and never drops acknowledged
// events without saying so.

// ErrCorrupt is wrapped by the errors of damage found in a store: Open refuses to start on it,
// and CheckDir reports it. It matches [store.ErrCorrupt], so the router tells damage from a
// store that is down without knowing this package.
var ErrCorrupt = store.CorruptSentinel("disk store: corrupt")

// Kinds of damage, for Options.OnCorruption and metrics.
const (
	DamageMarker = "marker" // a pebble marker file is missing
	DamageWAL    = "wal"    // a write-ahead log is damaged before its end
	DamageTable  = "table"  // a table block does not match its checksum, or a table file is cut short or missing
	// DamageEntry: a journal block, a parked retry's record, a subscription's cursor or a
	// topic's trim floor is intact but does not decode.
	DamageEntry = "entry"
	// DamageDefinition: a topic or subscription definition does not decode, a subscription
	// is stored under a topic with no definition, a definition's key is malformed, the
	// next id (the highest id handed out) does not decode, or the secret key check does not
	// open with the key the definitions open with.
	DamageDefinition = "definition"
)

// CheckDir looks for damage in the store directory dir (on fs; nil for the OS) that pebble
// would not report: a missing marker file or MANIFEST, a write-ahead log that pebble replays
// damaged before its end or cut short, commits missing from the logs (walreplay.go). It reads
// only; Open runs it first and `egrid store check` runs it offline. It returns every problem
// found, each wrapping [ErrCorrupt] and naming what is lost and how to recover, and the kind
// of each; and, apart, the torn log tails found (unsynced state a power loss left damaged:
// the store starts, saying what is dropped). A file egrid may not read is err, not damage.
func CheckDir(fs vfs.FS, dir string) (problems []error, kinds []string, tails []error, err error) {
	if fs == nil {
		fs = vfs.Default
	}
	names, err := fs.List(dir)
	if err != nil {
		if unreadable(err) {
			return nil, nil, nil, err
		}
		return nil, nil, nil, nil // no directory yet: a new store
	}
	slices.Sort(names)
	var manifests, logs []string
	hasData := false
	markers := map[string]bool{}
	for _, n := range names {
		switch {
		case strings.HasPrefix(n, "MANIFEST-"):
			manifests = append(manifests, n)
			hasData = true
		case strings.HasSuffix(n, ".log"):
			logs = append(logs, n)
			hasData = true
		case strings.HasSuffix(n, ".sst"), strings.HasSuffix(n, ".blob"):
			hasData = true
		case strings.HasPrefix(n, "marker."):
			if parts := strings.SplitN(n, ".", 3); len(parts) == 3 {
				markers[parts[1]] = true
			}
		}
	}
	if hasData {
		if !markers["manifest"] {
			fix := "restore the directory from a backup"
			if len(manifests) > 0 {
				newest := manifests[len(manifests)-1]
				fix = fmt.Sprintf("recreate it pointing at the newest manifest: touch %s, then run egrid store check --data-dir %s; or %s",
					fs.PathJoin(dir, "marker.manifest.000001."+newest), dir, fix)
			}
			problems = append(problems, fmt.Errorf("%w: %s has data files but no manifest marker (marker.manifest.*): pebble would open it as an empty store and delete the tables, losing every topic, subscription and stored event; %s", ErrCorrupt, dir, fix))
			kinds = append(kinds, DamageMarker)
		}
		if !markers["format-version"] {
			problems = append(problems, fmt.Errorf("%w: %s has data files but no format-version marker (marker.format-version.*): pebble would not know the format of its files; recreate it: touch %s, then run egrid store check --data-dir %s; or restore the directory from a backup",
				ErrCorrupt, dir, fs.PathJoin(dir, fmt.Sprintf("marker.format-version.000001.%03d", uint64(pebbleFormat))), dir))
			kinds = append(kinds, DamageMarker)
		}
	}
	// Only the logs pebble replays: an older one's contents are in table files.
	var m manifestState
	if name := currentManifest(names); name != "" && markers["manifest"] {
		if m, err = readManifest(fs, dir, name); unreadable(err) {
			return nil, nil, nil, err
		} else if err != nil {
			problems = append(problems, fmt.Errorf("%w: the manifest marker names %s, which cannot be opened (%v): it lists the store's table files, and pebble cannot open the store without it. Recover: put back the complete file if a copy of it exists (a copy or restore that stopped early); otherwise restore the directory from a backup",
				ErrCorrupt, fs.PathJoin(dir, name), err))
			kinds = append(kinds, DamageMarker)
			return problems, kinds, nil, nil
		}
	}
	logs, nums := walFiles(logs)
	for i := range logs {
		if nums[i] >= m.minLog {
			logs, nums = logs[i:], nums[i:]
			break
		}
		if i == len(logs)-1 {
			logs, nums = nil, nil
		}
	}
	scans := make([]logScan, len(logs))
	for i, n := range logs {
		if scans[i], err = scanLog(fs, dir, n, nums[i]); err != nil {
			return nil, nil, nil, err // unreadable (a permission), or gone since the listing
		}
		if err, torn := checkWAL(fs, scans[i]); unreadable(err) {
			return nil, nil, nil, err
		} else if err != nil && !torn {
			problems = append(problems, err)
			kinds = append(kinds, DamageWAL)
		} else if err != nil {
			tails = append(tails, err)
		}
	}
	for _, p := range replayProblems(dir, m, names, scans) {
		problems = append(problems, p)
		kinds = append(kinds, DamageWAL)
	}
	return problems, kinds, tails, nil
}

// damageError is Open's refusal to start on damage: each problem wraps [ErrCorrupt] and says
// what is lost and how to recover. Check reports the problems one by one, and the torn log
// tails found beside them (tails: not part of the refusal).
type damageError struct{ problems, tails []error }

func (e *damageError) Error() string { return errors.Join(e.problems...).Error() }

func (e *damageError) Unwrap() []error { return e.problems }

// Pebble's check of the table files its MANIFEST lists, run as it opens a store: one error a
// file, "L<level>: <file number>: " and then the file's size against the MANIFEST's, or the
// provider's answer that it has no such file.
var (
	tableCheckRE = regexp.MustCompile(`^L\d+: (\d+): `)
	tableSizeRE  = regexp.MustCompile(`object size mismatch \((.*)\): (\d+) \(disk\) != (\d+) \(MANIFEST\)`)
)

// tableProblems returns, for an error of pebble.Open, the table files its consistency check
// found cut short or missing, each as a problem wrapping [ErrCorrupt] that names the file and
// the way to recover; none for any other error. Pebble reports these with errors that
// pebble.IsCorruptionError does not recognise; dir is the store's directory.
func tableProblems(fs vfs.FS, dir string, err error) []error {
	var problems []error
	var walk func(error)
	walk = func(err error) {
		if multi, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range multi.Unwrap() {
				walk(e)
			}
			return
		}
		m := tableCheckRE.FindStringSubmatch(err.Error())
		if m == nil {
			if inner := errors.Unwrap(err); inner != nil {
				walk(inner)
			}
			return
		}
		const fix = "Recover: put back the complete file if a copy of it exists (a copy or restore that stopped early); otherwise restore the directory from a backup"
		if sz := tableSizeRE.FindStringSubmatch(err.Error()); sz != nil {
			problems = append(problems, fmt.Errorf("%w: table file %s is cut short: %s bytes on disk, %s in the store's MANIFEST; what it holds (journal entries, subscription state, definitions) cannot be read, and pebble does not open the store without it. %s",
				ErrCorrupt, sz[1], sz[2], sz[3], fix))
			return
		}
		if errors.Is(err, os.ErrNotExist) {
			problems = append(problems, fmt.Errorf("%w: table file %s is missing: the store's MANIFEST lists it, so what it held (journal entries, subscription state, definitions) is lost, and pebble does not open the store without it. %s",
				ErrCorrupt, fs.PathJoin(dir, m[1]+".sst"), fix))
		}
	}
	walk(err)
	return problems
}

// checkWAL looks at a write-ahead log that pebble's reader stops reading before its end
// (ls, from scanLog) for commits of the same log after the damage (chunks carry their log's
// number, so stale records of a recycled file do not count). The damage is certain when
// pebble's reader confirms it (a later chunk says the damaged part had been synced) or when
// an Append follows it: an Append is acknowledged only after a sync, which covers everything
// before it in the log. Either way replaying would drop acknowledged events, and checkWAL
// returns the damage. Only unsynced subscription state after it (a power loss keeps unsynced
// pages in any order) is a torn tail: it is returned as lost with tornTail set, and the store
// starts.
//
// It reads the blocks after the damage once (commitsAfter), and an unconfirmed stop followed
// by a block of another log is a recycled file's end: it reads no further.
func checkWAL(fs vfs.FS, ls logScan) (err error, tornTail bool) {
	if ls.clean {
		return nil, false
	}
	f, err := fs.Open(ls.path)
	if unreadable(err) {
		return fmt.Errorf("opening %s: %w", ls.path, err), false
	} else if err != nil {
		return fmt.Errorf("%w: opening %s: %v", ErrCorrupt, ls.path, err), false
	}
	defer f.Close()
	batches, appends := commitsAfter(f, ls.size, ls.stopAt, uint32(ls.num), ls.confirmed)
	damageAt, path := ls.stopAt, ls.path
	fix := fmt.Sprintf("Recover: restore the directory from a backup; or, to start and lose what follows the damage, truncate the log there: truncate -s %d %s", damageAt, path)
	switch {
	case ls.confirmed || appends > 0:
		return fmt.Errorf("%w: write-ahead log %s is damaged at offset %d, and %d commits follow the damage (%d of them appends of acknowledged events): pebble would replay the log only up to the damage and drop them. %s",
			ErrCorrupt, path, damageAt, batches, appends, fix), false
	case batches > 0:
		return fmt.Errorf("%w: write-ahead log %s ends damaged at offset %d with %d commits of subscription state after it, written without a sync (a power loss keeps unsynced pages in any order): they are dropped and some events may be delivered again",
			ErrCorrupt, path, damageAt, batches), true
	}
	return nil, false
}

// Pebble's log format (record package): 32 KiB blocks of chunks, none across a block's end,
// each with a header of a checksum (4 bytes), the payload's length (2) and the chunk's
// encoding (1; 1-4 legacy, 5-8 recyclable, 9-12 WAL sync: full, first, middle or last chunk of
// its record), then, but for legacy chunks, the low 32 bits of its log's number (4) and, for
// WAL sync chunks, the offset the log was synced to (8).
const (
	walBlock            = 32 << 10
	walLegacyHeader     = 7
	walRecyclableHeader = walLegacyHeader + 4
	walSyncHeader       = walRecyclableHeader + 8
)

var walCRC = crc32.MakeTable(crc32.Castagnoli)

// commitsAfter counts the commits (and the appends among them) of log num in f (size bytes)
// that pebble's record reader reads from a block after offset at, where it stopped reading
// the log: from the first block from which a record reads, the records up to the next chunk
// that does not read. It walks the chunks as pebble's reader does, each block read once. A
// reader started at every block until one reads a record (as before) read the rest of the
// file from each: pebble's reader looks to the end of the file past a chunk that does not read.
//
// A chunk that reads whole but carries another log's number is a recycled file's stale tail
// (pebble writes a new log over the start of an obsolete one's file): unless throughStale
// (the damage is confirmed, so the log was synced past it and the block is damage too), the
// log ends there, and nothing after it is read.
func commitsAfter(f io.ReaderAt, size, at int64, num uint32, throughStale bool) (batches, appends int) {
	buf := make([]byte, walBlock)
	var rec []byte
	inRecord := false
	commit := func(b []byte) {
		batches++
		if hasJournalWrite(b) {
			appends++
		}
	}
	for blk := at/walBlock + 1; blk*walBlock < size; blk++ {
		n := int(min(walBlock, size-blk*walBlock))
		if m, _ := f.ReadAt(buf[:n], blk*walBlock); m < n {
			return batches, appends // pebble's reader would stop at it too
		}
		stop, stale := false, false
		for pos := 0; ; {
			if pos+walLegacyHeader > n {
				// The rest of a full block is padding; the file's last block ends the log,
				// in the middle of a record or after bytes that are no chunk: a stop.
				stop = n < walBlock
				break
			}
			h := buf[pos:n]
			sum, length, enc := binary.LittleEndian.Uint32(h), int(binary.LittleEndian.Uint16(h[4:])), h[6]
			if enc == 0 && sum == 0 && length == 0 &&
				(pos+walRecyclableHeader > n || (pos+walSyncHeader > n && !slices.ContainsFunc(h, func(b byte) bool { return b != 0 }))) {
				pos = n // the zeroed end of a block
				continue
			}
			var hs int
			switch {
			case enc >= 1 && enc <= 4:
				hs = walLegacyHeader
			case enc >= 5 && enc <= 8:
				hs = walRecyclableHeader
			case enc >= 9 && enc <= 12:
				hs = walSyncHeader
			}
			if hs == 0 || pos+hs+length > n || crc32.Update(0, walCRC, h[6:hs+length]) != unmaskCRC(sum) {
				stop = true // a chunk that does not read (or a header cut by the block's end)
				break
			}
			if hs > walLegacyHeader {
				if ln := binary.LittleEndian.Uint32(h[7:]); ln != num {
					// Another log's chunk: the end-of-log trailer pebble writes as it closes a
					// log (numbered one up), or a recycled file's stale tail.
					stop, stale = true, ln != num+1
					break
				}
			}
			payload := h[hs : hs+length]
			pos += hs + length
			switch kind := (enc - 1) % 4; {
			case !inRecord && kind == 0: // a full chunk
				commit(payload)
			case !inRecord && kind == 1: // a first chunk
				rec, inRecord = append(rec[:0], payload...), true
			case !inRecord: // a middle or last chunk of a record begun before: skipped
			default:
				rec = append(rec, payload...)
				if kind == 0 || kind == 3 {
					commit(rec)
					inRecord = false
				}
			}
		}
		switch {
		case stale && !throughStale:
			return batches, appends
		case stop && batches > 0:
			return batches, appends // the records that follow the damage, up to the next
		case stop:
			inRecord = false // read on from the next block, as a reader started there would
		}
	}
	return batches, appends
}

// unmaskCRC undoes pebble's masking of a chunk's CRC-32C (internal/crc: rotated right by 15
// bits, plus a constant).
func unmaskCRC(v uint32) uint32 {
	c := v - 0xa282ead8
	return c<<15 | c>>17
}

// hasJournalWrite reports whether a batch (pebble's batch encoding: 12-byte header, then per
// record a kind byte, the key and, for a set, the value, each with a uvarint length) sets a
// journal entry. Records of other kinds end the look: it answers false then.
func hasJournalWrite(b []byte) bool {
	if len(b) < 12 {
		return false
	}
	b = b[12:]
	for len(b) > 0 {
		kind := b[0]
		b = b[1:]
		key, rest, ok := lengthPrefixed(b)
		if !ok {
			return false
		}
		b = rest
		switch kind {
		case 1: // set
			if len(key) > 0 && key[0] == prefixJournal {
				return true
			}
			if _, b, ok = lengthPrefixed(b); !ok {
				return false
			}
		case 0, 7: // delete, single delete
		case 15: // range delete: the value is the end key
			if _, b, ok = lengthPrefixed(b); !ok {
				return false
			}
		default:
			return false
		}
	}
	return false
}

func lengthPrefixed(b []byte) (v, rest []byte, ok bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) < n {
		return nil, nil, false
	}
	return b[k : k+int(n)], b[k+int(n):], true
}

// newRecordReader is record.NewReader for log number num. The log number's type is internal
// to pebble, so the call converts num through reflection.
func newRecordReader(r io.Reader, num uint64) *record.Reader {
	fn := reflect.ValueOf(record.NewReader)
	arg := reflect.ValueOf(num).Convert(fn.Type().In(1))
	in := reflect.New(fn.Type().In(0)).Elem()
	in.Set(reflect.ValueOf(r))
	return fn.Call([]reflect.Value{in, arg})[0].Interface().(*record.Reader)
}

// damaged counts one piece of damage of kind.
func (s *Store) damaged(kind string) {
	s.health.mu.Lock()
	s.health.corruptions++
	s.health.mu.Unlock()
	if s.opts.OnCorruption != nil {
		s.opts.OnCorruption(kind)
	}
}

// damage is a range of a topic's journal that cannot be read: lo..hi inclusive.
type damage struct{ lo, hi uint64 }

// skipDamage is called when reading topic t's journal at seq failed with corruption. It finds
// the first readable seq after it (up to visible+1: none) and reports the range in between
// once: an ERROR naming the topic, the lost seqs and the way to recover, and a count.
func (s *Store) skipDamage(db *pebble.DB, topicName string, t *topic, seq, visible uint64) uint64 {
	t.mu.Lock()
	for _, d := range t.damaged {
		if seq >= d.lo && seq <= d.hi {
			t.mu.Unlock()
			return d.hi + 1
		}
	}
	t.mu.Unlock()
	good := firstReadable(db, func(at uint64) []byte { return seqKey(prefixJournal, t.id, at) },
		seqKey(prefixJournal, t.id, visible+1), seq, visible)
	d := damage{lo: seq, hi: good - 1}
	t.mu.Lock()
	t.damaged = append(t.damaged, d)
	t.mu.Unlock()
	s.log.Error("disk store: journal entries are in a damaged table block and cannot be read; they are lost to every subscription of the topic, and delivery goes on after them. Recover them from a backup of the data directory; egrid store check --data-dir DIR lists the damage",
		"dir", s.dir, "topic", topicName, "fromSeq", d.lo, "throughSeq", d.hi)
	s.damaged(DamageTable)
	return good
}

// readableBefore returns the highest number end in next..bound at which topic t's journal
// reads from next up to end (exclusive) without meeting a damaged table block, where the read
// from next up to bound met one. A seek positions every level of the store at its first key
// at or after next, loading that key's block, so a damaged block in one table file fails the
// reads of the entries below it held by others; a read bounded below the damaged block leaves
// its table file out. It returns next when nothing can be read before the damage, or when next
// is in a range already found damaged.
func readableBefore(db *pebble.DB, t *topic, next, bound uint64) uint64 {
	t.mu.Lock()
	for _, d := range t.damaged {
		if next >= d.lo && next <= d.hi {
			t.mu.Unlock()
			return next
		}
	}
	t.mu.Unlock()
	key := func(at uint64) []byte { return seqKey(prefixJournal, t.id, at) }
	good, bad := next, bound // an empty read is readable; the read up to bound was not
	for bad-good > 1 {
		mid := good + (bad-good)/2
		if firstKeyReads(db, key(next), key(mid)) {
			good = mid
		} else {
			bad = mid
		}
	}
	return good
}

// firstKeyReads reports whether the first key in [lower, upper) and its value read without a
// corruption error (an empty range reads).
func firstKeyReads(db *pebble.DB, lower, upper []byte) bool {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return false
	}
	if it.First() {
		_, err = it.ValueAndErr()
	}
	err = errors.Join(err, it.Error(), it.Close())
	return !pebble.IsCorruptionError(err)
}

// firstReadable returns the first number after seq, up to last+1 (none), at which a key range
// made by key reads again: where the first key at or after key(at), below upper, reads
// without a corruption error. A damaged table block holds some numbers from seq on: it steps
// out exponentially, then bisects back.
func firstReadable(db *pebble.DB, key func(at uint64) []byte, upper []byte, seq, last uint64) uint64 {
	readable := func(at uint64) bool { return firstKeyReads(db, key(at), upper) }
	bad, good := seq, last+1
	for step := uint64(1); seq < last && step <= last-seq; step *= 2 {
		if readable(seq + step) {
			good = seq + step
			break
		}
		bad = seq + step
		if step > math.MaxUint64/2 {
			break // the next step would wrap: bisect what is left
		}
	}
	for good-bad > 1 {
		mid := bad + (good-bad)/2
		if readable(mid) {
			good = mid
		} else {
			bad = mid
		}
	}
	return good
}

// scanPastDamage is scan over [lo, hi) going on past damaged table blocks, for the ranges
// whose keys are a prefix byte and 8-byte words (keys.go: an id and maybe more; the outbox's
// string IDs, scanOutbox). Where pebble reports damage,
// nextReadable finds the first key after it that reads, and damaged is called with bad, the
// first key the scan could not read past (lo, the key it went on from, or the key just after
// the last one read), next, that key (hi: none before hi), and pebble's error; it returns the key to go on
// from (next, or one after it; hi ends the scan), or an error that ends the scan. The keys in
// between are passed over: the damaged block's, and any that pebble's seek passes over with
// them. An error of fn, or one that is not corruption, ends the scan.
func scanPastDamage(db *pebble.DB, lo, hi []byte, fn func(k, v []byte) error, damaged func(bad, next []byte, err error) ([]byte, error)) error {
	for from := lo; bytes.Compare(from, hi) < 0; {
		var after []byte
		err := scan(db, from, hi, func(k, v []byte) error {
			after = append(after[:0], k...)
			return fn(k, v)
		})
		if err == nil || !pebble.IsCorruptionError(err) {
			return err
		}
		bad := from
		if after != nil {
			bad = append(after, 0) // the first key after it
		}
		next := nextReadable(db, bad, hi)
		if from, err = damaged(bad, next, err); err != nil {
			return err
		}
		if bytes.Compare(from, next) < 0 {
			from = next
		}
	}
	return nil
}

// nextReadable returns the first key after bad, below hi, from which a scan reads on without
// meeting the damaged table block that fails the read at bad; hi when there is none. Keys are
// taken as a prefix byte, then 8-byte words (an id, a seq, or the bytes of an event id or a
// dead letter's ID; a word cut short is padded with zero bytes): firstReadable
// steps out and bisects among the words after bad's id, or else among the ids after it, to
// the first position that reads; then among the words one deeper under the position below
// it (past bad's word, when bad lies under it), and so on down, keeping the lowest key found.
// The key it returns is always past bad.
func nextReadable(db *pebble.DB, bad, hi []byte) []byte {
	const none uint64 = math.MaxUint64 // firstReadable's last+1 with last none-1: nothing reads
	var w0 [8]byte
	copy(w0[:], bad[1:])
	id := binary.BigEndian.Uint64(w0[:]) // the first word: an id, or a string's first 8 bytes
	// under returns the positions of the word after prefix.
	under := func(prefix []byte) func(at uint64) []byte {
		return func(at uint64) []byte { return binary.BigEndian.AppendUint64(slices.Clip(prefix), at) }
	}
	// firstKey returns the first key at or after pos, which reads: hi when none.
	firstKey := func(pos []byte) []byte {
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: pos, UpperBound: hi})
		if err != nil {
			return hi
		}
		defer it.Close()
		if it.First() {
			return slices.Clone(it.Key())
		}
		return hi
	}
	var below []byte // the position below the first that reads
	if len(bad) > 9 {
		var w [8]byte
		copy(w[:], bad[9:])
		if at := firstReadable(db, under(bad[:9]), hi, binary.BigEndian.Uint64(w[:]), none-1); at != none {
			below = under(bad[:9])(at - 1)
		}
	}
	if below == nil {
		at := firstReadable(db, under(bad[:1]), hi, id, none-1)
		if at == none {
			return hi
		}
		below = idKey(bad[0], at-1)
	}
	next := firstKey(under(below[:len(below)-8])(binary.BigEndian.Uint64(below[len(below)-8:]) + 1))
	// Keys past the damage may lie under below, the position that does not read: go down a
	// word at a time, each time to the position below the first that reads, keeping the
	// lowest key found. Under a position that bad lies under, the words up to bad's are keys
	// read before the damage, or the damaged ones: the search starts past bad's word there,
	// so the key returned is always past bad. Keys are not longer than maxKeyDepth words.
	for depth := 0; depth < maxKeyDepth; depth++ {
		var from uint64
		if len(bad) > len(below) && bytes.HasPrefix(bad, below) {
			var w [8]byte
			copy(w[:], bad[len(below):])
			from = binary.BigEndian.Uint64(w[:])
		}
		at := firstReadable(db, under(below), hi, from, none-1)
		if at == none {
			return next
		}
		if k := firstKey(under(below)(at)); bytes.Compare(k, next) < 0 {
			next = k
		}
		below = under(below)(at - 1)
	}
	return next
}

// maxKeyDepth bounds how many 8-byte words deep nextReadable looks for keys past damage: keys
// of up to 4 KiB, far more than a prefix, two ids and an event id take.
const maxKeyDepth = 512

// damageSpans remembers the damaged table blocks the store has met, so that each is counted
// once per Store however many reads meet it (scans going past it, point reads of keys in
// it), each by the table file and block that pebble's error names, and reported once for each
// kind of data that is lost with it: one block can hold keys of several kinds (a freshly
// flushed table holds every prefix), and a dead letter lost with a block whose cursors were
// reported already must still be told.
type damageSpans struct {
	mu      sync.Mutex
	counted map[string]bool // by block
	told    map[string]bool // by block and what was lost
}

// What a damaged block loses, for damageSpans.note: each is reported once per block.
const (
	lostOutbox      = "outbox"
	lostHistory     = "history"
	lostDefinitions = "definitions"
)

// lostState is what a damaged block loses of the state kept under prefix (prefixCursor,
// prefixParked, prefixProbation, prefixFloor), for damageSpans.note.
func lostState(prefix byte) string { return "state " + string(rune(prefix)) }

// blockRE finds the table file and block in pebble's error for a block that fails its
// checksum: "pebble: file 000012: block 0/84: crc32c checksum mismatch …".
var blockRE = regexp.MustCompile(`file (\d+): block (\d+/\d+)`)

// note remembers the damage err, whose loss of what is being reported, and tells whether its
// block is new to the store (count it) and whether its loss of what is (report it). A scan's
// error names its block twice (the iterator's error and its Close's), a point read's once:
// both are the block.
func (d *damageSpans) note(err error, what string) (count, tell bool) {
	block := err.Error()
	if m := blockRE.FindStringSubmatch(block); m != nil {
		block = m[1] + " " + m[2]
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.counted == nil {
		d.counted, d.told = make(map[string]bool), make(map[string]bool)
	}
	count, tell = !d.counted[block], !d.told[block+" "+what]
	d.counted[block], d.told[block+" "+what] = true, true
	return count, tell
}

// lostBlock notes the damaged table block of err, losing what (lostOutbox, lostHistory,
// lostDefinitions, lostState): it counts the block once per Store (kind table) and reports
// whether its loss of what is still to be told.
func (s *Store) lostBlock(err error, what string) (tell bool) {
	count, tell := s.spans.note(err, what)
	if count {
		s.damaged(DamageTable)
	}
	return tell
}

// idNames returns, for egrid's logs and messages, the topics and subscriptions whose ids lie
// from lo through hi, as "topic" or "topic/subscription", sorted.
func (s *Store) idNames(lo, hi uint64) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []string
	for tname, t := range s.topics {
		if t.id >= lo && t.id <= hi {
			out = append(out, clip.String(tname))
		}
		for name, sb := range t.subs {
			if sb.id >= lo && sb.id <= hi {
				out = append(out, clip.String(tname)+"/"+clip.String(name))
			}
		}
	}
	slices.Sort(out)
	return out
}

// spanIDs returns the ids whose keys a damaged span from bad up to next (scanPastDamage)
// may hold.
func spanIDs(bad, next []byte) (lo, hi uint64) {
	if len(bad) >= 9 {
		lo = idOf(bad)
	}
	hi = math.MaxUint64 - 1
	if len(next) >= 9 {
		hi = idOf(next)
		if len(next) == 9 && hi > lo {
			hi-- // next is the first key of its id
		}
	}
	return lo, hi
}

// seqAt returns the seq a key bad of the form prefix + id + seq, or the key just after one
// (scanPastDamage), stands at: 0 for the id's first key.
func seqAt(bad []byte) uint64 {
	switch {
	case len(bad) < 17:
		return 0
	case len(bad) == 17:
		return seqOf(bad)
	}
	return seqOf(bad[:17]) + 1
}

// undecodableBlock is a journal block (keyed by its last seq) whose value pebble returned
// intact but that does not decode.
type undecodableBlock struct {
	last uint64
	err  error
}

func (u *undecodableBlock) Error() string {
	return fmt.Sprintf("journal block %d: %v", u.last, u.err)
}

func (u *undecodableBlock) Unwrap() error { return u.err }

// skipUndecodable is called when reading topic t's journal at seq met a block that does not
// decode. Its entries from seq through the block's last are lost: it reports them once, as
// skipDamage reports a damaged table block, and returns the seq to read on from. Failing the
// read instead would fail every read of every subscription of the topic at that block, for
// good: each would stop there.
func (s *Store) skipUndecodable(topicName string, t *topic, seq uint64, u *undecodableBlock) uint64 {
	t.mu.Lock()
	for _, d := range t.damaged {
		if seq >= d.lo && seq <= d.hi {
			t.mu.Unlock()
			return d.hi + 1
		}
	}
	d := damage{lo: seq, hi: u.last}
	t.damaged = append(t.damaged, d)
	t.mu.Unlock()
	s.log.Error("disk store: journal entries do not decode; they are lost to every subscription of the topic, and delivery goes on after them. Recover them from a backup of the data directory; egrid store check --data-dir DIR lists the damage",
		"dir", s.dir, "topic", topicName, "fromSeq", d.lo, "throughSeq", d.hi, "err", u.err)
	s.damaged(DamageEntry)
	return u.last + 1
}

// parkedDamage reports, once per record, a parked event of subscription sb whose stored
// record pebble read back intact but that does not decode: the event is lost, and the
// subscription goes on without it.
func (s *Store) parkedDamage(topicName, name string, sb *sub, seq uint64, err error) {
	sb.mu.Lock()
	seen := sb.damaged[seq]
	if !seen {
		if sb.damaged == nil {
			sb.damaged = make(map[uint64]bool)
		}
		sb.damaged[seq] = true
	}
	sb.mu.Unlock()
	if seen {
		return
	}
	s.log.Error("disk store: a parked event's record does not decode; the event is lost to the subscription, which goes on without it. Recover it from a backup of the data directory; egrid store check --data-dir DIR lists the damage",
		"dir", s.dir, "topic", topicName, "subscription", name, "seq", seq, "err", err)
	s.damaged(DamageEntry)
}

// stateLoss is a piece of a subscription's state that a damaged table block keeps from being
// read (kind DamageTable), or a cursor that pebble reads intact but that does not decode
// (undecodable; kind DamageEntry).
type stateLoss struct {
	part statePart
	// lo and hi bound the seqs among which lost parked records lie (partParked); for
	// partCursor, lo is the seq delivery starts again at.
	lo, hi      uint64
	undecodable bool
}

// statePart is the part of a subscription's state a [stateLoss] is of.
type statePart int

const (
	partCursor    statePart = iota // the cursor: delivery starts again at the journal's oldest entry
	partParked                     // parked retries: their events are lost to the subscription
	partProbation                  // the probation state: the endpoint is taken as healthy
)

func (p statePart) String() string {
	switch p {
	case partCursor:
		return "cursor"
	case partParked:
		return "parked retries"
	case partProbation:
		return "probation state"
	}
	return fmt.Sprintf("statePart(%d)", int(p))
}

// prefix returns the key prefix the part is kept under.
func (p statePart) prefix() byte {
	switch p {
	case partCursor:
		return prefixCursor
	case partParked:
		return prefixParked
	}
	return prefixProbation
}

// covers reports whether l already accounts for m.
func (l stateLoss) covers(m stateLoss) bool {
	if l.part != m.part {
		return false
	}
	return m.part != partParked || (m.lo >= l.lo && m.lo <= l.hi)
}

// problem describes l for egrid store check.
func (l stateLoss) problem(topicName, name string) error {
	var what string
	switch l.part {
	case partCursor:
		where := "is in a damaged table block"
		if l.undecodable {
			where = "does not decode"
		}
		what = fmt.Sprintf("its cursor %s (a running egrid delivers again every event from seq %d, the oldest its journal holds, and writes a good cursor)", where, l.lo)
	case partParked:
		what = fmt.Sprintf("parked retries with seqs from %d to %d are in a damaged table block: their events are lost to it (restore the directory from a backup to recover them)", l.lo, l.hi)
	default:
		what = "its probation state is in a damaged table block (a running egrid takes its endpoint as healthy)"
	}
	return fmt.Errorf("%w: subscription %q of topic %q: %s", ErrCorrupt, name, topicName, what)
}

// stateDamage reports, once, a piece of subscription sb's state that a damaged table block
// keeps from being read (pebble failing with err), or a cursor that does not decode (err nil):
// an ERROR naming the topic, the subscription and what is lost, and a count (DamageEntry when
// undecodable; DamageTable once per block and Store, however many pieces of state it holds
// and whoever meets it: a start, a load, the copy of a reopening after a failed write). The
// subscription loads what can be read and goes on: failing the load would stop it for good,
// its actor failing at every restart. It returns the loss it is
// covered by (l itself when new), so that a scan of parked retries goes on after it.
func (s *Store) stateDamage(topicName, name string, sb *sub, l stateLoss, err error) stateLoss {
	sb.mu.Lock()
	for _, old := range sb.lost {
		if old.covers(l) {
			sb.mu.Unlock()
			return old
		}
	}
	sb.lost = append(sb.lost, l)
	sb.mu.Unlock()
	const check = " egrid store check --data-dir DIR lists the damage"
	kind := DamageTable
	switch {
	case l.part == partCursor && l.undecodable:
		kind = DamageEntry
		s.log.Error("disk store: a subscription's cursor does not decode (pebble reads it intact); the subscription starts again at the oldest event its topic's journal holds, so events it had delivered are delivered again (at least once), none skipped, and a good cursor is written. Its parked retries are kept. Restore the data directory from a backup to avoid the duplicates;"+check,
			"dir", s.dir, "topic", topicName, "subscription", name, "fromSeq", l.lo)
	case l.part == partCursor:
		s.log.Error("disk store: a subscription's cursor is in a damaged table block and cannot be read; the subscription starts again at the oldest event its topic's journal holds, so events it had delivered are delivered again (at least once), none skipped. Its parked retries are kept where they can be read. Restore the data directory from a backup to avoid the duplicates;"+check,
			"dir", s.dir, "topic", topicName, "subscription", name, "fromSeq", l.lo)
	case l.part == partParked:
		s.log.Error("disk store: a subscription's parked retries are in a damaged table block and cannot be read; the events among them are lost to the subscription (they are neither retried nor dead-lettered), which goes on with its other events. Recover them from a backup of the data directory;"+check,
			"dir", s.dir, "topic", topicName, "subscription", name, "fromSeq", l.lo, "throughSeq", l.hi)
	default:
		s.log.Error("disk store: a subscription's probation state is in a damaged table block and cannot be read; the subscription starts with its endpoint taken as healthy, and no event is lost;"+check,
			"dir", s.dir, "topic", topicName, "subscription", name)
	}
	if err == nil {
		s.damaged(kind)
	} else if count, _ := s.spans.note(err, lostState(l.part.prefix())); count {
		s.damaged(kind)
	}
	return l
}

// stateLosses returns the damage found so far in the state of subscription name of topic
// topicName.
func (s *Store) stateLosses(topicName, name string) []stateLoss {
	s.mu.RLock()
	defer s.mu.RUnlock()
	t := s.topics[topicName]
	if t == nil || t.subs[name] == nil {
		return nil
	}
	sb := t.subs[name]
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return slices.Clone(sb.lost)
}

// outboxLoss is a part of the dead-letter outbox that a damaged table block keeps from being
// read: the records with IDs after after and before before; from the first when first is set,
// to the last when last is.
type outboxLoss struct {
	after, before string
	first, last   bool
}

func (l outboxLoss) String() string {
	from, to := fmt.Sprintf("after dead letter %q", clip.String(l.after)), fmt.Sprintf("before dead letter %q", clip.String(l.before))
	if l.first {
		from = "from the first"
	}
	if l.last {
		to = "to the last"
	}
	return from + " " + to
}

// scanOutbox calls fn with each record of the dead-letter outbox that can be read, in key
// order, until fn returns an error, which it returns as it is. A damaged table block does not
// end the scan: the records in it are lost, reported once (outboxDamage), and the scan goes on
// after it (scanPastDamage: the IDs are strings, taken 8 bytes a word), as a subscription's
// load goes on after a block of its parked retries. Failing instead would keep the dead-letter
// actor, and with it the router, from starting at all. It returns the losses met, described
// for egrid store check: each from the last record read before it to the next one read, the
// blocks met with no record read between them one loss.
func (s *Store) scanOutbox(db *pebble.DB, fn func(k, v []byte) error) (problems []error, err error) {
	var prev []byte      // the last key read, nil before the first
	var lost *outboxLoss // a loss whose end is not read yet
	var lostErr error    // pebble's error for its first block
	var fnErr error
	err = scanPastDamage(db, []byte{prefixDeadLetter}, []byte{prefixDeadLetter + 1}, func(k, v []byte) error {
		if lost != nil {
			lost.before = string(k[1:])
			problems = append(problems, s.outboxDamage(*lost, lostErr))
			lost = nil
		}
		prev = append(prev[:0], k...)
		fnErr = fn(k, v)
		return fnErr
	}, func(_, next []byte, err error) ([]byte, error) {
		if lost == nil {
			lost, lostErr = &outboxLoss{first: prev == nil}, err
			if prev != nil {
				lost.after = string(prev[1:])
			}
		}
		return next, nil
	})
	if fnErr != nil {
		return problems, fnErr
	}
	if err != nil {
		return problems, err
	}
	if lost != nil {
		lost.last = true
		problems = append(problems, s.outboxDamage(*lost, lostErr))
	}
	return problems, nil
}

// outboxDamage reports, once, dead letters of the outbox that a damaged table block keeps
// from being read (pebble failing with err): an ERROR saying what they are and what to do, and
// a count (DamageTable), unless the block was reported already (a point read of a dead letter
// in it, deadLetterDamage).
// It returns the loss, described for egrid store check.
func (s *Store) outboxDamage(l outboxLoss, err error) error {
	s.mu.Lock()
	seen := s.outboxLost[l]
	if !seen {
		if s.outboxLost == nil {
			s.outboxLost = make(map[outboxLoss]bool)
		}
		s.outboxLost[l] = true
	}
	s.mu.Unlock()
	tell := s.lostBlock(err, lostOutbox)
	if !seen && tell {
		attrs := []any{"dir", s.dir}
		if !l.first {
			attrs = append(attrs, "afterID", clip.String(l.after))
		}
		if !l.last {
			attrs = append(attrs, "beforeID", clip.String(l.before))
		}
		s.log.Error("disk store: dead letters of the outbox are in a damaged table block and cannot be read; they are lost: these events were dead-lettered but not yet written to the dead-letter destination, and will not be. The other dead letters are written as usual. Restore the data directory from a backup to recover them; egrid store check --data-dir DIR lists the damage", attrs...)
	}
	return fmt.Errorf("the dead letters %s are in a damaged table block and cannot be read: they were not yet written to the dead-letter destination, and a running egrid goes on without them; restore the directory from a backup to recover them", l)
}

// deadLetterDamage is DeadLettersByID's error when pebble reports dead letter id in a damaged
// table block (err): it wraps [ErrCorrupt] and says what is lost and what to do. The block is
// reported once per Store (an ERROR, a count of kind table), however often it is read.
func (s *Store) deadLetterDamage(id string, err error) error {
	if s.lostBlock(err, lostOutbox) {
		s.log.Error("disk store: dead letters of the outbox are in a damaged table block and cannot be read; they are lost: these events were dead-lettered but not yet written to the dead-letter destination, and will not be. Restore the data directory from a backup to recover them; egrid store check --data-dir DIR lists the damage",
			"dir", s.dir, "id", clip.String(id), "err", err)
	}
	return fmt.Errorf("%w: dead letter %q of the dead-letter outbox is in a damaged table block and cannot be read (%v): it is lost: its event was dead-lettered but not yet written to the dead-letter destination, and will not be. Restore the directory from a backup to recover it; egrid store check --data-dir %s lists the damage",
		ErrCorrupt, clip.String(id), err, s.dir)
}

// outboxDamageError is what a read-only store's scan of the outbox returns for the damage it
// met (outboxProblems): the problems, as egrid store check lists them, wrapping [ErrCorrupt].
type outboxDamageError struct{ problems []error }

func (e *outboxDamageError) Error() string { return errors.Join(e.problems...).Error() }

func (e *outboxDamageError) Unwrap() []error { return append([]error{ErrCorrupt}, e.problems...) }
