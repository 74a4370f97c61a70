package disk

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/testkit"
)

var damagePublishTime = time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)

// writeLevel0 writes, in dir on fs, topic orders with subscription billing and n table files
// in level 0, each holding events and billing's cursor, so that their key ranges overlap (as
// a flush of a running store's journal and state does). It returns the oldest table's path.
func writeLevel0(t *testing.T, fs vfs.FS, dir string, n int) string {
	t.Helper()
	ctx := t.Context()
	s, err := Open(dir, Options{fs: fs, tune: noCompactions})
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
	for i := range n {
		last := appendPadded(t, s, i, 200)
		if err := s.UpdateSubscription(ctx, "orders", "billing", store.Update{Cursor: last - 100}); err != nil {
			t.Fatal(err)
		}
		if err := s.gen.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	levels, err := s.gen.db.SSTables()
	if err != nil {
		t.Fatal(err)
	}
	if len(levels[0]) != n {
		t.Fatalf("level 0 holds %d tables, want %d: %v", len(levels[0]), n, levels)
	}
	oldest := slices.MinFunc(levels[0], func(a, b pebble.SSTableInfo) int { return int(a.FileNum) - int(b.FileNum) })
	return fs.PathJoin(dir, fmt.Sprintf("%06d.sst", oldest.FileNum))
}

// appendPadded appends n events of 1 KB in one Append and returns the last one's number.
func appendPadded(t *testing.T, s *Store, round, n int) uint64 {
	t.Helper()
	evs := make([]*schemas.Event, n)
	for i := range evs {
		evs[i] = &schemas.Event{ID: fmt.Sprint(i), Raw: fmt.Appendf(nil, `{"id":"%d-%d","pad":%q}`, round, i, strings.Repeat("x", 1000))}
	}
	seq, err := s.Append(t.Context(), "orders", damagePublishTime, evs)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// damageMem overwrites 64 bytes in the middle of the file at path on fs.
func damageMem(t *testing.T, fs vfs.FS, path string) {
	t.Helper()
	f, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xff}, 64), fi.Size()/2); err != nil {
		t.Fatal(err)
	}
}

// compactionLog records when pebble starts each compaction and how each ends.
type compactionLog struct {
	mu     sync.Mutex
	begins []time.Time
	failed int
	stalls int
	// hold, once the given number of compactions has begun, keeps the next one waiting
	// until released: a compaction retried without end stops there, and the bubble with
	// it, instead of spinning for good.
	hold    int
	release chan struct{}
	// spinning, when set, is closed once 100 compactions have failed during a write stall.
	spinning      chan struct{}
	stalledFailed int
}

func (c *compactionLog) tune(o *pebble.Options) {
	// The tests write a few tables to level 0 (writeLevel0) and want pebble to compact
	// them at once: at pebble's own threshold, not the store's (l0CompactionThreshold).
	o.L0CompactionThreshold = 4
	el := *o.EventListener
	el.CompactionBegin = func(pebble.CompactionInfo) {
		c.mu.Lock()
		c.begins = append(c.begins, time.Now())
		held := c.hold > 0 && len(c.begins) == c.hold
		c.mu.Unlock()
		if held {
			<-c.release
		}
	}
	el.CompactionEnd = func(info pebble.CompactionInfo) {
		if info.Err != nil {
			c.mu.Lock()
			c.failed++
			if c.stalls > 0 {
				if c.stalledFailed++; c.stalledFailed == 100 && c.spinning != nil {
					close(c.spinning)
				}
			}
			c.mu.Unlock()
		}
	}
	el.WriteStallBegin = func(pebble.WriteStallBeginInfo) {
		c.mu.Lock()
		c.stalls++
		c.mu.Unlock()
	}
	o.EventListener = &el
}

func (c *compactionLog) counts() (begun, failed, stalls int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.begins), c.failed, c.stalls
}

// A compaction over a damaged table file in level 0 is tried again after a wait of 1 s,
// doubling up to a minute, where pebble tried it again at once, for as long as the process
// ran (hundreds of times a second with small tables, a core busy). Flushes go on while
// compactions wait. The first failure is a WARN naming the tables and the remedy.
func TestDamagedLevel0TableCompactionWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := vfs.NewMem()
		victim := writeLevel0(t, fs, "db", 4)
		damageMem(t, fs, victim)

		const spin = 50
		c := &compactionLog{hold: spin, release: make(chan struct{})}
		var logs lockedBuffer
		s, err := Open("db", Options{fs: fs, tune: c.tune, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		defer close(c.release) // before Close: a held compaction goes on

		synctest.Wait()
		begun, failed, _ := c.counts()
		if begun != 1 || failed != 1 {
			t.Fatalf("with no time passed, %d compactions begun, %d failed; want the one that fails on the damaged table, then a wait", begun, failed)
		}
		l := logs.String()
		if !strings.Contains(l, "level=WARN msg=\"disk store: a compaction failed on a damaged table file in level 0") ||
			!strings.Contains(l, strings.TrimPrefix(victim, "db/")) || !strings.Contains(l, "egrid store check") {
			t.Errorf("want a WARN naming the damaged table and the remedy; logs:\n%s", l)
		}

		// A flush goes on while compactions wait.
		appendPadded(t, s, 100, 200)
		if err := s.gen.db.Flush(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if tables := s.gen.db.Metrics().Levels[0].TablesCount; tables != 5 {
			t.Errorf("level 0 holds %d tables after a flush, want 5", tables)
		}
		if begun, _, _ := c.counts(); begun != 1 {
			t.Errorf("the flush started %d compactions while they wait; want none", begun-1)
		}

		// Ten minutes: the waits double from 1 s to a minute, and the damaged table is
		// still tried once a minute.
		for range 600 {
			testkit.Advance(time.Second)
		}
		c.mu.Lock()
		begins := slices.Clone(c.begins)
		failed = c.failed
		c.mu.Unlock()
		if failed != len(begins) {
			t.Errorf("%d of %d compactions failed; want each on the damaged table", failed, len(begins))
		}
		for i := 1; i < len(begins); i++ {
			gap, want := begins[i].Sub(begins[i-1]), min(damageWaitMin<<(i-1), damageWaitMax)
			if gap < want || gap > want+grantEvery {
				t.Errorf("compaction %d began %v after the one before, want %v (up to %v later)", i+1, gap, want, grantEvery)
			}
		}
		// 0, 1, 3, 7, 15, 31, 63 s, then every minute up to 543 s.
		if len(begins) != 15 {
			t.Errorf("%d compactions in ten minutes, want 15", len(begins))
		}
	})
}

// The wait ends once the tables of the compactions that failed are compacted away; a healthy
// compaction in between does not end it. A failure that is not damage, or on damage below
// level 0 (which pebble keeps out of compactions itself), starts no wait.
func TestCompactionGateWaitsUntilTheFailedTablesAreGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newCompactionGate(slog.New(slog.DiscardHandler), "db", 0, nil)
		end := func(err error, level int, tables ...uint64) {
			info := pebble.CompactionInfo{Done: true, Err: err, Input: []pebble.LevelInfo{{Level: level}}}
			for _, n := range tables {
				info.Input[0].Tables = append(info.Input[0].Tables, pebble.TableInfo{FileNum: pebble.TableNum(n)})
			}
			g.compactionEnd(info)
		}
		held := func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			return g.heldLocked()
		}
		damage := fmt.Errorf("reading block: %w", pebble.ErrCorruption)

		end(errors.New("disk full"), 0, 1)
		end(damage, 1, 1)
		if held() {
			t.Fatal("waiting after a failure that is not damage in level 0")
		}
		end(damage, 0, 7, 8)
		if !held() || g.wait != damageWaitMin {
			t.Fatalf("after a failure on damage: held %v, wait %v; want %v", held(), g.wait, damageWaitMin)
		}
		end(damage, 0, 7, 8)
		end(nil, 0, 8, 9) // a healthy compaction of another of the tables
		if !held() || g.wait != 2*damageWaitMin {
			t.Fatalf("after a second failure and a healthy compaction: held %v, wait %v; want %v", held(), g.wait, 2*damageWaitMin)
		}
		<-time.After(g.wait)
		if held() {
			t.Fatal("still held once the wait is over")
		}
		end(nil, 0, 7) // the damaged table is compacted away
		if g.wait != 0 {
			t.Fatalf("wait %v once the failed tables are gone, want none", g.wait)
		}
		end(damage, 0, 10)
		if g.wait != damageWaitMin {
			t.Fatalf("wait %v after a new failure, want %v: it starts again", g.wait, damageWaitMin)
		}
	})
}

// Compactions held behind a damaged table let level 0 grow until pebble stops writes at its
// limit, which only a compaction through the damaged table could lift: the store fails, and
// the Append that met the limit, and each after it, is refused with an error naming the table
// and the remedy, where it waited inside pebble for good. The store does not reopen itself:
// a new instance would stop at its first write.
func TestWritesStoppedBehindADamagedTableAreRefused(t *testing.T) {
	ctx := t.Context()
	fs := vfs.NewMem()
	victim := writeLevel0(t, fs, "db", 4)
	damageMem(t, fs, victim)

	c := &compactionLog{spinning: make(chan struct{})}
	tune := func(o *pebble.Options) {
		c.tune(o)
		o.L0StopWritesThreshold = 6
	}
	var logs lockedBuffer
	s, err := Open("db", Options{fs: fs, tune: tune, MemTableSize: 256 << 10, RecoverInterval: time.Millisecond,
		freeBytes: func(string) (uint64, error) { return 1 << 30, nil }, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	// Closed at the end, not deferred: a Close behind a commit stuck in the stall would
	// wait for good.

	// Each Append runs in a goroutine; one that does not return while pebble retries the
	// compaction over the damaged table again and again (c.spinning) waits in the write
	// stall.
	var refused error
	for round := range 200 {
		done := make(chan error, 1)
		go func() {
			evs := []*schemas.Event{{ID: fmt.Sprint(round), Raw: fmt.Appendf(nil, `{"pad":%q}`, strings.Repeat("x", 64<<10))}}
			seq, err := s.Append(ctx, "orders", damagePublishTime, evs)
			if err == nil {
				err = s.UpdateSubscription(ctx, "orders", "billing", store.Update{Cursor: seq - 1})
			}
			done <- err
		}()
		var err error
		select {
		case err = <-done:
		case <-c.spinning:
			_, failed, _ := c.counts()
			t.Fatalf("round %d: the Append waits in pebble's write stall while %d compactions failed on the damaged table", round, failed)
		}
		if err != nil {
			refused = err
			break
		}
	}
	if refused == nil {
		t.Fatal("200 rounds of writes went on behind the damaged table; want pebble's level-0 limit met")
	}
	t.Logf("refused: %v", refused)
	for _, want := range []string{strings.TrimPrefix(victim, "db/"), "egrid store check", "restore the directory from a backup"} {
		if !strings.Contains(refused.Error(), want) {
			t.Errorf("the refusal does not say %q", want)
		}
	}
	if !errors.Is(refused, ErrFailed) || !errors.Is(refused, ErrCorrupt) || !errors.Is(refused, store.ErrUnavailable) {
		t.Errorf("refused with %v; want ErrFailed and ErrCorrupt (store.ErrUnavailable: 503)", refused)
	}
	if _, err := s.Append(ctx, "orders", damagePublishTime, []*schemas.Event{{ID: "after", Raw: []byte(`{}`)}}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("the next Append: %v, want it refused at once", err)
	}
	if h := s.Health(); h.State != store.Failed || !strings.Contains(h.Reason, "restore") {
		t.Errorf("Health %+v; want failed, saying to restore", h)
	}
	if got, err := s.Read(ctx, "orders", 1, 10); err != nil || len(got) != 10 {
		t.Errorf("Read: %d entries, %v; want stored events still read", len(got), err)
	}
	if l := logs.String(); !strings.Contains(l, "level=ERROR msg=\"disk store: a write to disk failed") || !strings.Contains(l, "does not reopen itself") {
		t.Errorf("want an ERROR saying the store failed and does not reopen itself; logs:\n%s", l)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
