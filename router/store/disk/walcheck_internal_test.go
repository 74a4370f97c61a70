package disk

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// commitsAfterPerBlock is how checkWAL looked for commits after a damage before: a pebble
// record reader started at every block after it until one read a record, then the records
// that reader read. Each reader that read nothing had read the rest of the file (pebble's look
// past a chunk that does not read), so a recycled log's stale tail was read once per block.
func commitsAfterPerBlock(f io.ReaderAt, size, at int64, num uint64) (batches, appends int) {
	for blk := at/walBlock + 1; blk*walBlock < size && batches == 0; blk++ {
		rr := newRecordReader(io.NewSectionReader(f, blk*walBlock, size-blk*walBlock), num)
		for {
			rec, err := rr.Next()
			if err != nil {
				break
			}
			b, err := io.ReadAll(rec)
			if err != nil {
				break
			}
			batches++
			if hasJournalWrite(b) {
				appends++
			}
		}
	}
	return batches, appends
}

// crashLogs writes a store whose write-ahead logs rotate (a 1 MiB memtable) with commits of
// every size (appends of one event and of records over several blocks, subscription updates
// between them) and returns its logs as a copy taken while it is open, by number.
func crashLogs(t *testing.T) map[uint64][]byte {
	t.Helper()
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "db")
	s, err := Open(dir, Options{MemTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.PutTopic(ctx, "orders", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSubscription(ctx, "orders", "billing", nil); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		n := 1 + rng.IntN(4)
		if i%8 == 0 {
			n = 20 + rng.IntN(60) // a record over one to three blocks
		}
		evs := make([]*schemas.Event, n)
		for j := range evs {
			evs[j] = &schemas.Event{ID: fmt.Sprint(i, "-", j), Raw: bytes.Repeat([]byte{'x'}, 200+rng.IntN(1500))}
		}
		if _, err := s.Append(ctx, "orders", time.Now(), evs); err != nil {
			t.Fatal(err)
		}
		if err := s.UpdateSubscription(ctx, "orders", "billing", store.Update{Cursor: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	logs := map[uint64][]byte{}
	names, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		num, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(n), ".log"), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if logs[num], err = os.ReadFile(n); err != nil {
			t.Fatal(err)
		}
	}
	return logs
}

// checkWAL reads the blocks after a log's damage once (commitsAfter) and finds there what a
// reader started at every block found: the same commits and appends, for logs damaged every
// way (a zeroed page, a chunk of an unknown encoding, of another log, running past its block,
// with a flipped bit, cut; in records of one chunk and of several blocks) and for recycled files, whose stale tails it reads through when the
// damage is confirmed; where it is not, it ends at the stale tail (finding nothing the
// readers did not).
func TestCommitsAfterFindWhatAReaderAtEveryBlockFinds(t *testing.T) {
	logs := crashLogs(t)
	nums := slices.Sorted(maps.Keys(logs))
	if len(nums) < 2 {
		t.Fatalf("logs %v; want at least two", nums)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	fs := vfs.NewMem()
	var stops, found, withAppends, confirmed int
	for i := range 150 {
		num := nums[rng.IntN(len(nums))]
		b := bytes.Clone(logs[num])
		if len(b) < 4*walBlock {
			continue
		}
		recycled := false
		if other := nums[rng.IntN(len(nums))]; other != num && len(logs[other]) > len(b)/2 && rng.IntN(2) == 0 {
			// The file of log other, recycled: log num written over its start, up to a chunk.
			starts := chunkStarts(logs[num])
			cut := starts[len(starts)/4+rng.IntN(len(starts)/2)]
			b = append(b[:cut:cut], logs[other][min(cut, len(logs[other])):]...)
			recycled = true
		}
		// Damage at one of the log's chunks (chosen among chunks, not bytes: a checksum that
		// fails makes pebble's reader try every bit flip of the chunk, which costs seconds for
		// a whole block's).
		starts := chunkStarts(b[:min(len(b), len(logs[num]))])
		at := starts[rng.IntN(len(starts))]
		switch rng.IntN(6) {
		case 0: // a zeroed page from the chunk on
			clear(b[at:min(at+4096, len(b))])
		case 1: // an encoding pebble does not know
			b[at+6] = 0xee
		case 2: // another log's number
			b[at+7] ^= 0x40
		case 3: // a length past the block
			b[at+5] = 0xff
		case 4: // a flipped bit in a small chunk's payload, else in its checksum
			if l := int(b[at+4]) | int(b[at+5])<<8; l > 0 && l < 2048 {
				b[at+walSyncHeader+rng.IntN(l)] ^= 1 << rng.IntN(8)
			} else {
				b[at] ^= 1
			}
		case 5: // cut inside the chunk
			b = b[:at+1+rng.IntN(walSyncHeader)]
		}
		name := fmt.Sprintf("%06d.log", num)
		f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(bytes.Clone(b)); err != nil { // pebble's invariants (-race) mangle what was written
			t.Fatal(err)
		}
		_ = f.Close()
		ls, err := scanLog(fs, "", name, num)
		if err != nil {
			t.Fatal(err)
		}
		if ls.clean {
			continue
		}
		stops++
		if ls.confirmed {
			confirmed++
		}
		r := bytes.NewReader(b)
		wantBatches, wantAppends := commitsAfterPerBlock(r, ls.size, ls.stopAt, num)
		if i < 8 {
		}
		gotBatches, gotAppends := commitsAfter(r, ls.size, ls.stopAt, uint32(num), true)
		if gotBatches != wantBatches || gotAppends != wantAppends {
			t.Errorf("case %d (log %d, recycled %v, damage at %d, stop at %d, confirmed %v): commitsAfter = %d commits, %d appends; a reader at every block finds %d, %d",
				i, num, recycled, at, ls.stopAt, ls.confirmed, gotBatches, gotAppends, wantBatches, wantAppends)
		}
		if wantBatches > 0 {
			found++
		}
		if wantAppends > 0 {
			withAppends++
		}
		gotBatches, gotAppends = commitsAfter(r, ls.size, ls.stopAt, uint32(num), false)
		switch {
		case !recycled && (gotBatches != wantBatches || gotAppends != wantAppends):
			t.Errorf("case %d (log %d, damage at %d, stop at %d): not through a stale tail, commitsAfter = %d commits, %d appends; want %d, %d in a file that has none",
				i, num, at, ls.stopAt, gotBatches, gotAppends, wantBatches, wantAppends)
		case recycled && (gotBatches > wantBatches || gotAppends > wantAppends):
			t.Errorf("case %d (log %d, damage at %d, stop at %d): commitsAfter = %d commits, %d appends; a reader at every block finds only %d, %d",
				i, num, at, ls.stopAt, gotBatches, gotAppends, wantBatches, wantAppends)
		}
	}
	t.Logf("%d logs stopped early (%d confirmed); after the stop %d have commits, %d appends", stops, confirmed, found, withAppends)
	if stops < 100 || found < 30 || stops-found < 10 || withAppends < 20 {
		t.Errorf("want at least 100 stops, 30 with commits after them, 10 without and 20 with appends")
	}
}

// chunkStarts returns the offsets of the chunks of a log file that pebble wrote whole.
func chunkStarts(b []byte) []int {
	var starts []int
	for blk := 0; blk < len(b); blk += walBlock {
		end := min(blk+walBlock, len(b))
		for pos := blk; pos+walSyncHeader <= end; {
			enc := b[pos+6]
			var hs int
			switch {
			case enc >= 1 && enc <= 4:
				hs = walLegacyHeader
			case enc >= 5 && enc <= 8:
				hs = walRecyclableHeader
			case enc >= 9 && enc <= 12:
				hs = walSyncHeader
			default:
				pos = end
				continue
			}
			starts = append(starts, pos)
			pos += hs + (int(b[pos+4]) | int(b[pos+5])<<8)
		}
	}
	return starts
}
