package disk

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2/record"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// The write-ahead logs pebble replays, and what their sequence numbers say.
//
// Pebble replays, at open, only the logs numbered at or above the MANIFEST's oldest unflushed
// log: the older ones' contents are in table files already, and a log left over from them
// (kept for reuse, or not yet deleted) is never read. So damage in such a log loses nothing,
// and only the replayed logs are checked (before 2026-11-29 every log was, and a damaged
// obsolete one refused the start with a count of commits that were all safe in tables).
//
// Pebble numbers every commit from one counter: a batch of n records takes the n numbers
// after the one before it, and the logs hold the batches in that order, the oldest unflushed
// log starting at or before the number the MANIFEST records as the last assigned when it was
// last written. So a replayed log whose first commit comes after a number no replayed log
// holds says that commits are missing: the log that held them was deleted, or cut short at a
// record's end. File numbers prove nothing (tables, logs and MANIFESTs share their counter),
// and the commits a deleted newest log held leave no trace: the store looks like one that
// crashed before writing them (README: Damage in the store).

// manifestState is what the store's current MANIFEST says about the logs.
type manifestState struct {
	name    string // the MANIFEST file's name
	minLog  uint64 // the oldest log pebble replays (0: none recorded)
	lastSeq uint64 // the last sequence number assigned when the MANIFEST was last written
}

// Tags of pebble's version edits (internal/manifest/version_edit.go) read here: pebble writes
// them first in every edit, before the table entries, which end the look.
const (
	tagComparator          = 1
	tagLogNumber           = 2
	tagNextFileNumber      = 3
	tagLastSequence        = 4
	tagDeletedFile         = 6
	tagPrevLogNumber       = 9
	tagCreatedBackingTable = 105
	tagRemovedBackingTable = 106
)

// currentManifest returns the name of the MANIFEST the manifest marker names, "" when there
// is no marker.
func currentManifest(names []string) string {
	best, bestIter := "", uint64(0)
	for _, n := range names {
		parts := strings.SplitN(n, ".", 4)
		if len(parts) != 4 || parts[0] != "marker" || parts[1] != "manifest" {
			continue
		}
		iter, err := strconv.ParseUint(parts[2], 10, 64)
		if err != nil {
			continue
		}
		if best == "" || iter > bestIter {
			best, bestIter = parts[3], iter
		}
	}
	return best
}

// readManifest reads the MANIFEST name in dir for the oldest unflushed log and the last
// sequence number. A MANIFEST that cannot be opened is returned as the error of the open (the
// caller tells a missing one from a permission); one whose records do not read to the end
// gives what was read before the damage (pebble reports the damage as it opens the store).
func readManifest(fs vfs.FS, dir, name string) (manifestState, error) {
	st := manifestState{name: name}
	f, err := fs.Open(fs.PathJoin(dir, name))
	if err != nil {
		return st, err
	}
	defer f.Close()
	r := record.NewReader(f, 0)
	for {
		rec, err := r.Next()
		if err != nil {
			return st, nil
		}
		b, err := io.ReadAll(rec)
		if err != nil {
			return st, nil
		}
		decodeEdit(b, &st)
	}
}

// decodeEdit takes from one version edit the oldest unflushed log and the last sequence
// number, when it sets them.
func decodeEdit(b []byte, st *manifestState) {
	uvarint := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	for len(b) > 0 {
		tag, ok := uvarint()
		if !ok {
			return
		}
		switch tag {
		case tagComparator:
			n, ok := uvarint()
			if !ok || uint64(len(b)) < n {
				return
			}
			b = b[n:]
		case tagLogNumber:
			v, ok := uvarint()
			if !ok {
				return
			}
			st.minLog = v
		case tagLastSequence:
			v, ok := uvarint()
			if !ok {
				return
			}
			st.lastSeq = v
		case tagNextFileNumber, tagPrevLogNumber, tagRemovedBackingTable:
			if _, ok := uvarint(); !ok {
				return
			}
		case tagCreatedBackingTable, tagDeletedFile:
			if _, ok := uvarint(); !ok {
				return
			}
			if _, ok := uvarint(); !ok {
				return
			}
		default:
			return // a table entry: the fields read here come before them
		}
	}
}

// logScan is what one replayed log holds: the sequence numbers of its commits, and how it
// ends.
type logScan struct {
	name       string
	path       string
	num        uint64 // the log's number
	commits    int
	first, end uint64 // the first commit's number, and the number after the last commit's
	size       int64
	// stopAt is the offset of the record pebble's reader stops at: the log's end when
	// clean, else the first record that does not read (checkWAL looks after it).
	stopAt int64
	clean  bool
	// confirmed: pebble's reader found, past the record it stops at, a chunk of the log
	// saying that the log had been synced beyond it, so the record is damaged in place.
	confirmed bool
	// cutAt is the offset of a record the file ends in the middle of (-1: none): the
	// log was cut there (ErrUnexpectedEOF), not damaged in place.
	cutAt int64
}

// scanLog reads the commits of log name (number num) up to its end or its first damage, as
// pebble's replay reads them: the records, then, where one does not read, the rest of the
// file once (pebble's reader looks there for a promise that more was synced). It is the one
// read of the whole file that CheckDir makes; checkWAL and runsPastEnd read past the stop
// only as far as they need.
func scanLog(fs vfs.FS, dir, name string, num uint64) (logScan, error) {
	ls := logScan{name: name, path: fs.PathJoin(dir, name), num: num, cutAt: -1}
	f, err := fs.Open(ls.path)
	if err != nil {
		return ls, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return ls, err
	}
	ls.size = info.Size()
	r := newRecordReader(io.NewSectionReader(f, 0, ls.size), num)
	for {
		off := r.Offset()
		rec, err := r.Next()
		var b []byte
		if err == nil {
			b, err = io.ReadAll(rec)
		}
		if err != nil {
			ls.stopAt = off
			ls.clean = errors.Is(err, io.EOF)
			ls.confirmed = errors.Is(err, record.ErrInvalidChunk) || errors.Is(err, record.ErrZeroedChunk)
			if errors.Is(err, record.ErrUnexpectedEOF) && runsPastEnd(f, ls.size, off, uint32(num)) {
				ls.cutAt = off
			}
			return ls, nil // damage in place is checkWAL's
		}
		if len(b) < 12 {
			continue
		}
		seq, count := binary.LittleEndian.Uint64(b), uint64(binary.LittleEndian.Uint32(b[8:]))
		if ls.commits == 0 {
			ls.first = seq
		}
		ls.commits++
		ls.end = seq + count
	}
}

// runsPastEnd reports whether the record of log num starting at offset at in f (size bytes)
// runs past the end of the file: its chunks' headers, read in turn, reach one that the file
// ends in before its last chunk ends. A record whose chunks all end within the file, or whose
// headers do not read, is damaged in place instead (checkWAL's).
func runsPastEnd(f io.ReaderAt, size, at int64, num uint32) bool {
	const (
		block      = walBlock
		legacy     = walLegacyHeader
		recyclable = walRecyclableHeader
		walSync    = walSyncHeader
	)
	var h [walSync]byte
	for pos := at; pos < size; {
		rem := block - pos%block
		n := min(int64(walSync), rem, size-pos)
		if _, err := f.ReadAt(h[:n], pos); err != nil {
			return false
		}
		if rem < walSync && !slices.ContainsFunc(h[:n], func(b byte) bool { return b != 0 }) {
			pos += rem // the zeroed end of a block
			continue
		}
		if n < legacy {
			return n == size-pos // a header the file ends in
		}
		enc := h[6]
		var hs int64
		switch {
		case enc >= 1 && enc <= 4:
			hs = legacy
		case enc >= 5 && enc <= 8:
			hs = recyclable
		case enc >= 9 && enc <= 12:
			hs = walSync
		default:
			return false
		}
		if n < hs {
			return n == size-pos
		}
		if hs > legacy && binary.LittleEndian.Uint32(h[7:11]) != num {
			return false
		}
		end := pos + hs + int64(binary.LittleEndian.Uint16(h[4:6]))
		switch {
		case end > pos+rem:
			return false // straddles a block: damaged
		case end > size:
			return true
		case (enc-1)%4 == 0 || (enc-1)%4 == 3:
			return false // the record's last chunk ends within the file
		}
		pos = end
	}
	return false
}

// walFiles returns the write-ahead logs among names with their numbers, in replay order.
func walFiles(names []string) (logs []string, nums []uint64) {
	type log struct {
		name string
		num  uint64
	}
	var all []log
	for _, n := range names {
		if !strings.HasSuffix(n, ".log") {
			continue
		}
		num, err := strconv.ParseUint(strings.TrimSuffix(n, ".log"), 10, 64)
		if err != nil {
			continue // not one of pebble's logs
		}
		all = append(all, log{n, num})
	}
	slices.SortFunc(all, func(a, b log) int { return cmp.Compare(a.num, b.num) })
	for _, l := range all {
		logs, nums = append(logs, l.name), append(nums, l.num)
	}
	return logs, nums
}

// replayProblems looks at the replayed logs (ascending) for commits that are missing: a gap in
// the sequence numbers before a log's first commit, a log other than the newest cut short (it
// was closed, so it ended with a whole record; pebble refuses it with a bare "unexpected
// EOF"), and the newest cut in the middle of a record at an offset no crash leaves (see
// cutByCrash). Each wraps [ErrCorrupt] and says what to do. scans are the replayed logs'
// (scanLog), ascending.
func replayProblems(dir string, m manifestState, names []string, scans []logScan) (problems []error) {
	if len(scans) == 0 && m.name != "" {
		if opts := newestOptions(names); opts > m.minLog {
			problems = append(problems, fmt.Errorf("%w: %s has no write-ahead log numbered %d or above, the ones its MANIFEST (%s) says hold what the table files do not, although pebble created one before it wrote OPTIONS-%06d: the log was deleted, and the commits it held (acknowledged events, topic and subscription definitions may be among them) are lost; pebble would start without them, saying nothing. Recover: put back the log if a copy of it exists (a copy or restore that stopped early); otherwise restore the directory from a backup",
				ErrCorrupt, dir, m.minLog, m.name, opts))
		}
		return problems
	}
	later := func(i int) (commits int) {
		for _, s := range scans[i+1:] {
			commits += s.commits
		}
		return commits
	}
	const putBack = "Recover: put back the complete file if a copy of it exists (a copy or restore that stopped early); otherwise restore the directory from a backup"
	// The next commit's number: the first ever is seqNumStart; 0 while unknown (no MANIFEST).
	expect := uint64(0)
	if m.name != "" {
		expect = max(m.lastSeq+1, seqNumStart)
	}
	cut := false // a log before was cut short: the gap after it is that damage
	for i, s := range scans {
		if s.commits > 0 && expect > 0 && s.first > expect && !cut {
			what := fmt.Sprintf("the commits numbered %d to %d are in no log: they were written before the first commit of %s, after everything the table files hold", expect, s.first-1, s.path)
			if i > 0 {
				what = fmt.Sprintf("the commits numbered %d to %d are in no log: they were written after the last commit of %s and before the first of %s", expect, s.first-1, scans[i-1].path, s.path)
			}
			problems = append(problems, fmt.Errorf("%w: %s, so a write-ahead log holding them was deleted, or cut short at the end of a record (acknowledged events, topic and subscription definitions may be among them); pebble would start without them, saying nothing. %s",
				ErrCorrupt, what, putBack))
		}
		if s.commits > 0 {
			expect = max(expect, s.end)
		}
		if s.cutAt < 0 {
			continue
		}
		if i < len(scans)-1 {
			cut = true
			problems = append(problems, fmt.Errorf("%w: write-ahead log %s is cut short: it ends at %d bytes in the middle of the record that starts at offset %d, and %d commits in later logs follow it; a log is closed with whole records before the next one starts, so the file lost its end (a copy or restore that stopped early, a truncation), and pebble refuses to open the store. %s",
				ErrCorrupt, s.path, s.size, s.cutAt, later(i), putBack))
			continue
		}
		if !cutByCrash(s.size) {
			problems = append(problems, fmt.Errorf("%w: write-ahead log %s ends at %d bytes in the middle of a record that starts at offset %d: a crash or power loss cuts a log only at a %d-byte boundary, so the file lost its end (a copy or restore that stopped early, a truncation), and the record and whatever followed it (acknowledged events among them) are lost; pebble would drop the record and start, saying nothing. %s; or, to start without it, truncate the log at the record: truncate -s %d %s",
				ErrCorrupt, s.path, s.size, s.cutAt, crashBoundary, putBack, s.cutAt, s.path))
		}
	}
	return problems
}

// seqNumStart is the number of the first commit of a new store (pebble's base.SeqNumStart).
const seqNumStart = 10

// newestOptions returns the number of the newest OPTIONS file among names, 0 for none. Pebble
// writes one at every open (but a read-only one), after creating the log the open writes to.
func newestOptions(names []string) uint64 {
	var newest uint64
	for _, n := range names {
		if num, ok := strings.CutPrefix(n, "OPTIONS-"); ok {
			if v, err := strconv.ParseUint(num, 10, 64); err == nil {
				newest = max(newest, v)
			}
		}
	}
	return newest
}

// crashBoundary is the granularity at which a crash can cut a file being written: pebble
// writes a log in whole chunks, each write() its chunks at once; a process killed in a
// write() stops at a page boundary, and a power loss keeps a file's size at the end of a
// write or of a page written back. 512 divides every page size, so a file ending mid-record
// at an offset that is not a multiple of it was cut by something other than a crash.
const crashBoundary = 512

// cutByCrash reports whether a log of size bytes ending in the middle of a record can be a
// crash's doing (unsynced writes lost): pebble drops such a tail, and the records in it were
// never acknowledged.
func cutByCrash(size int64) bool { return size%crashBoundary == 0 }

// unreadable reports whether err, from opening or reading a store file, says egrid may not
// read it: a permission, not damage.
func unreadable(err error) bool {
	return errors.Is(err, fs.ErrPermission) || errors.Is(err, os.ErrPermission)
}
