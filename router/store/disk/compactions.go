package disk

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Compactions over a damaged table file in level 0.
//
// Pebble tries a failed compaction again as soon as it ends. Below level 0 it keeps the failed
// tables' key ranges out of compactions for a while (five minutes after a checksum mismatch);
// in level 0 it does not, as that could hold back flushes. A damaged table file in level 0 is
// therefore read up to its damage, the compaction fails and is picked again at once, for as
// long as the process runs: 34 attempts a second and 87 % of a core, measured on four level-0
// tables of 400 KB, and more CPU the larger the tables; the cores the delivery path needs.
//
// compactionGate is pebble's compaction scheduler for one instance
// (Options.Experimental.CompactionScheduler): it grants compactions as pebble's default one
// does (ConcurrencyLimitScheduler: as many at once as pebble allows, asked again every
// 100 ms), except that after a compaction with a table of level 0 among its inputs fails on
// damage it grants none for a while: 1 s after the first failure, doubling with each further
// one up to a minute, so a damaged table costs one failed attempt a minute. The wait ends for
// good once every table of the failed compactions has left the store through a compaction
// that succeeded (one that did not read the damaged block, or moved or dropped the file); a
// healthy compaction of other tables does not end it, since the damaged one comes next.
// Flushes do not go through the scheduler (pebble starts them itself) and go on meanwhile;
// nor do delete-only compactions, which read nothing.
//
// Held compactions let level 0 grow. Writes go on until pebble stops them at its level-0
// limit (Options.L0StopWritesThreshold, l0StopWritesThreshold sublevels: the tables flushed since whose keys
// overlap the damaged one's), which only a compaction through the damaged table could lift:
// the store then fails, naming the tables and the remedy (checkStall).
type compactionGate struct {
	log *slog.Logger
	dir string

	// db is set by Register, before any other call.
	db   pebble.DBForCompaction
	stop chan struct{} // Unregister stops the granting goroutine
	poke chan struct{} // wakes the granting goroutine (UpdateGetAllowedWithoutPermission)

	mu       sync.Mutex
	cond     *sync.Cond      // signalled when granting ends
	running  int             // compactions granted and not done
	allowed  int             // pebble's allowance when last asked
	granting bool            // a goroutine is granting; one at a time
	closed   bool            // unregistered: nothing more is granted
	wait     time.Duration   // after the latest failure on damage in level 0; 0: none
	until    time.Time       // no grant before it
	suspects map[uint64]bool // the tables of the failed compactions still in the store
	damaged  map[string]bool // the table files pebble reported damaged (DataCorruption)
	stalled  bool            // pebble holds writes back (a write stall has begun and not ended)
	stopped  bool            // stopWrites was called
	pdb      *pebble.DB      // the instance, once open; for the size of level 0

	// stopWrites fails the store's generation (checkStall); set before pebble opens.
	stopWrites func(error)
	// l0Limit is pebble's level-0 limit (Options.L0StopWritesThreshold).
	l0Limit int
}

// Bounds of the wait after a compaction fails on damage.
const (
	damageWaitMin = time.Second
	damageWaitMax = time.Minute
	// grantEvery is how often the gate asks pebble for waiting compactions, as pebble's
	// own scheduler does: its allowance rises with the backlog, which the gate is not told
	// about otherwise.
	grantEvery = 100 * time.Millisecond
)

func newCompactionGate(log *slog.Logger, dir string, l0Limit int, stopWrites func(error)) *compactionGate {
	if l0Limit <= 0 {
		defaults := pebble.Options{FS: vfs.NewMem()} // an FS of its own: the default one starts a health check
		defaults.EnsureDefaults()
		l0Limit = defaults.L0StopWritesThreshold
	}
	g := &compactionGate{log: log, dir: dir, l0Limit: l0Limit, stopWrites: stopWrites, stop: make(chan struct{}), poke: make(chan struct{}, 1), suspects: make(map[uint64]bool), damaged: make(map[string]bool)}
	g.cond = sync.NewCond(&g.mu)
	return g
}

var _ pebble.CompactionScheduler = (*compactionGate)(nil)

// Register implements [pebble.CompactionScheduler].
func (g *compactionGate) Register(_ int, db pebble.DBForCompaction) {
	g.db = db
	go g.granter()
}

// Unregister implements [pebble.CompactionScheduler]: it stops the granting goroutine and
// waits for a grant under way.
func (g *compactionGate) Unregister() {
	g.stop <- struct{}{}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	for g.granting {
		g.cond.Wait()
	}
}

// TrySchedule implements [pebble.CompactionScheduler].
func (g *compactionGate) TrySchedule() (bool, pebble.CompactionGrantHandle) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.heldLocked() {
		return false, nil
	}
	g.allowed = g.db.GetAllowedWithoutPermission()
	if g.allowed > g.running {
		g.running++
		return true, g
	}
	return false, nil
}

// UpdateGetAllowedWithoutPermission implements [pebble.CompactionScheduler].
func (g *compactionGate) UpdateGetAllowedWithoutPermission() {
	allowed := g.db.GetAllowedWithoutPermission()
	g.mu.Lock()
	more := allowed > g.allowed
	g.allowed = allowed
	g.mu.Unlock()
	if more {
		select {
		case g.poke <- struct{}{}:
		default:
		}
	}
}

// Started, MeasureCPU and CumulativeStats implement [pebble.CompactionGrantHandle]; the
// gate does not weigh resources.
func (g *compactionGate) Started()                                          {}
func (g *compactionGate) MeasureCPU(pebble.CompactionGoroutineKind)         {}
func (g *compactionGate) CumulativeStats(pebble.CompactionGrantHandleStats) {}

// Done implements [pebble.CompactionGrantHandle]: a compaction ended; another may start.
func (g *compactionGate) Done() {
	g.mu.Lock()
	g.running--
	g.mu.Unlock()
	g.grant()
}

// heldLocked reports whether compactions wait after a failure on damage.
func (g *compactionGate) heldLocked() bool {
	return g.wait > 0 && time.Now().Before(g.until)
}

// grant starts the compactions pebble has waiting, as many as it allows, unless they wait
// after a failure on damage.
func (g *compactionGate) grant() {
	g.mu.Lock()
	for g.granting && !g.closed {
		g.cond.Wait()
	}
	if g.closed || g.heldLocked() {
		g.mu.Unlock()
		return
	}
	g.allowed = g.db.GetAllowedWithoutPermission()
	n := g.allowed - g.running
	if n <= 0 {
		g.mu.Unlock()
		return
	}
	g.granting = true
	g.mu.Unlock()
	// Pebble takes its own mutex in these calls: the gate's is not held.
	for ; n > 0; n-- {
		if waiting, _ := g.db.GetWaitingCompaction(); !waiting || !g.db.Schedule(g) {
			break
		}
		g.mu.Lock()
		g.running++
		g.mu.Unlock()
	}
	g.mu.Lock()
	g.granting = false
	g.cond.Broadcast()
	g.mu.Unlock()
}

// granter grants waiting compactions every grantEvery and when poked, until Unregister, and
// checks a write stall (checkStall).
func (g *compactionGate) granter() {
	tick := time.NewTicker(grantEvery)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			g.checkStall()
		case <-g.poke:
		case <-g.stop:
			return
		}
		g.grant()
	}
}

// compactionEnd is the instance's EventListener.CompactionEnd. Pebble calls it before it
// lets the next compaction be picked (Done), holding its own mutex.
func (g *compactionGate) compactionEnd(info pebble.CompactionInfo) {
	if !info.Done {
		return
	}
	if info.Err == nil {
		g.mu.Lock()
		was := g.wait
		for _, l := range info.Input {
			for _, t := range l.Tables {
				delete(g.suspects, uint64(t.FileNum))
			}
		}
		if g.wait > 0 && len(g.suspects) == 0 {
			g.wait, g.until = 0, time.Time{}
		}
		ended := was > 0 && g.wait == 0
		g.mu.Unlock()
		if ended {
			g.log.Warn("disk store: the table files a compaction failed on are compacted away; compactions run again without waiting", "dir", g.dir)
		}
		return
	}
	if !pebble.IsCorruptionError(info.Err) {
		return
	}
	level0 := false
	var tables []uint64
	for _, l := range info.Input {
		level0 = level0 || l.Level == 0
		for _, t := range l.Tables {
			tables = append(tables, uint64(t.FileNum))
		}
	}
	if !level0 {
		return // pebble keeps the failed tables out of compactions itself
	}
	g.mu.Lock()
	first := g.wait == 0
	for _, t := range tables {
		g.suspects[t] = true
	}
	g.wait = min(max(2*g.wait, damageWaitMin), damageWaitMax)
	g.until = time.Now().Add(g.wait)
	g.mu.Unlock()
	if first {
		err, _, _ := strings.Cut(info.Err.Error(), "\n")
		// A WARN: the damage itself is pebble's ERROR (the background error) and the
		// store's when a read meets it; this says what it costs from now on.
		g.log.Warn("disk store: a compaction failed on a damaged table file in level 0; compactions wait 1s, doubling with each further failure up to 1m, and stored events are still delivered (what cannot be read is reported as it is read): stop egrid, run egrid store check on dir, and restore dir from a backup",
			"dir", g.dir, "tables", tableNames(tables), "err", err)
	}
}

// dataCorruption is the instance's EventListener.DataCorruption: it keeps the damaged file's
// name for checkStall's message.
func (g *compactionGate) dataCorruption(info pebble.DataCorruptionInfo) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.damaged) < 100 {
		g.damaged[info.Path] = true
	}
}

// tableNames writes table file numbers as pebble names the files.
func tableNames(nums []uint64) string {
	names := make([]string, len(nums))
	for i, n := range nums {
		names[i] = fmt.Sprintf("%06d.sst", n)
	}
	return strings.Join(names, ",")
}

// opened gives the gate its instance once pebble has opened it.
func (g *compactionGate) opened(db *pebble.DB) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pdb = db
}

// writeStallBegin and writeStallEnd are the instance's EventListener.WriteStallBegin and
// WriteStallEnd. Pebble calls them in a committing goroutine, holding its own mutex. A stall
// that begins as "memtable count limit reached" may go on at the level-0 limit once the
// flush is done, without a new event: checkStall looks at level 0 itself.
func (g *compactionGate) writeStallBegin(pebble.WriteStallBeginInfo) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stalled = true
}

func (g *compactionGate) writeStallEnd() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stalled = false
}

// checkStall fails the store, once, when pebble's write stall cannot end: writes wait at
// pebble's level-0 limit while its compactions fail on damage. Commits wait in pebble until
// a compaction lowers level 0, which none can while the damaged table is in it; failing the
// store makes them return, refused, with the remedy, instead of waiting for good without a
// word. It does nothing while writes go on, or compactions do.
func (g *compactionGate) checkStall() {
	g.mu.Lock()
	db := g.pdb
	check := g.stalled && g.wait > 0 && !g.stopped && db != nil
	g.mu.Unlock()
	if !check {
		return
	}
	sublevels := int(db.Metrics().Levels[0].Sublevels) // takes pebble's mutex: not under g.mu
	g.mu.Lock()
	if !g.stalled || g.wait == 0 || g.stopped || sublevels < g.l0Limit {
		g.mu.Unlock()
		return
	}
	g.stopped = true
	found := "among the table files " + tableNames(slices.Sorted(maps.Keys(g.suspects)))
	if len(g.damaged) > 0 {
		found = "in " + strings.Join(slices.Sorted(maps.Keys(g.damaged)), ",")
	}
	g.mu.Unlock()
	g.stopWrites(fmt.Errorf("%w: writes stopped: level 0 holds %d overlapping layers of table files, pebble's limit, and cannot be compacted: a compaction failed on damage %s: stop egrid, run egrid store check --data-dir %s, and restore the directory from a backup",
		ErrCorrupt, sublevels, found, g.dir))
}
