package deadletter

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

// This file is the dead-letter actor (SPEC §5, DESIGN.md §1 step 4): one per router, a sibling of
// the topic actors. Subscription actors hand it the events that ended without delivery
// ([Enqueue]); it keeps them in an outbox, waits the dead-letter delay after each
// event's last attempt, and writes the records that are due together as one object per
// subscription per flush. Writes run off the mailbox, at most [MaxConcurrentWrites] at once
// (the others queue in the actor and start as earlier ones end); a failed write is retried
// with back-off, and records whose write still fails four hours after their first write
// attempt are dropped, counted and logged. Records are dropped only when a write this actor
// tried has failed: after a restart every object read back from the outbox is tried again
// (and looked for under its key) first, however long ago its first attempt was.
//
// The outbox is written off the mailbox too (a durable outbox syncs every change): one change
// at a time, in the order the actor made them, the changes made meanwhile merged into the next
// one. An object is written only once the outbox change that assigns its records to it is
// saved, and its records leave the outbox only after the object is written, so after a crash
// every record is either in the outbox or in an object.

// Props returns the props of a dead-letter actor. The outbox is created here (when
// cfg has none), so a restarted actor finds its records again.
func Props(cfg *Config) *actor.Props {
	if cfg.Store == nil {
		panic("actors: Config.Store is required")
	}
	c := cfg.withDefaults()
	if c.Stops == nil {
		c.Stops = new(Stops)
	}
	return actor.PropsFromProducer(func() actor.Actor { return &deadLetters{cfg: c} })
}

// pendingObject is a group of records assigned to one object key; it keeps the key across
// retries, so a write that did land but whose answer was lost is replaced, not duplicated.
type pendingObject struct {
	id         uint64
	key        string
	topic, sub string
	target     Target
	recs       []*Record
	first      time.Time // the first write attempt, by this actor or (read back from the outbox) an earlier one
	attempts   int       // the write attempts since first
	// tried is when this actor (this incarnation) first tried the write, and triedHere counts
	// its tries: attempts > triedHere when earlier ones were made before a restart or by
	// another node.
	tried     time.Time
	triedHere int
	next      time.Time
	writing   bool
	// refused is the store's error code when the last write failed because the destination
	// refused it (sinks.ErrRefused), "" when it failed otherwise.
	refused string
	// reread: the key was read back from the outbox (a restart, an adoption), whose records
	// may have left it only in part after the object was written whole; an object under the key
	// is then kept, not replaced by the records that are left of it.
	reread bool
}

// dlWritten is the result of one object write, sent by the goroutine that ran it.
type dlWritten struct {
	id        uint64
	info      sinks.ObjectInfo
	err       error
	permanent bool // the records cannot be encoded: retrying cannot help
	// missing counts the records the outbox no longer held when their events were read:
	// another writer (a node that adopted them) took them. They are left out of the object,
	// and no object is written when none is left.
	missing int
}

// dlWake is sent by the actor's timer.
type dlWake struct{ gen uint64 }

// dlSaved is the result of one outbox change, sent by the goroutine that wrote it.
type dlSaved struct {
	id  uint64 // of the change (see dlSaveIDs)
	err error
	put []Record // the change, written again as the actor restarts when it failed
	del []uint64
}

// dlLoaded is the outbox as the actor's start read it, sent by the goroutine that read it.
type dlLoaded struct {
	id   uint64
	recs []Record
	err  error
}

// earlyRecord is a record that arrived while the outbox was loading, kept for after it.
type earlyRecord struct {
	rec    *Record
	stored bool // it is in the outbox: past MaxEarlyRecords it is let go, and read back
}

// dlLoadIDs numbers outbox loads across incarnations, so a restarted actor ignores the load
// its predecessor started.
var dlLoadIDs atomic.Uint64

// dlObjectIDs and dlSaveIDs number object writes and outbox changes across incarnations, so a
// restarted actor ignores the results of those its predecessor started: taken for its own,
// the success of an older write would forget records that are in no object.
var dlObjectIDs, dlSaveIDs atomic.Uint64

// deadLetters is the dead-letter actor. All fields are owned by Receive.
type deadLetters struct {
	cfg    *Config
	self   *actor.PID
	system *actor.ActorSystem
	log    *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// after is closed once the stop work of the incarnations before this one has ended
	// ([Stops]): the outbox read and saves wait for it.
	after <-chan struct{}
	// events is the outbox when it keeps the events ([EventOutbox]): the records here then
	// have none, but for those not in the outbox yet.
	events EventOutbox

	// loading is the id of the outbox load in flight (0 once loaded), started at
	// loadingSince. Meanwhile status requests are answered at once (a poller's would otherwise
	// wait for as long as the store does not answer); records that arrive are put in the
	// outbox at once and kept in early, at most MaxEarlyRecords of them
	// ([deadLetters.keepEarly]); a Flush is remembered (flushAfter) with its sender among the
	// flushers; the results of a predecessor's writes and timers are dropped.
	loading      uint64
	loadingSince time.Time
	early        []earlyRecord
	earlyStored  int // of early, those in the outbox
	// readAgain: records in the outbox were let go from early, so the outbox is read again
	// (catchUp, the id of that read) once the first read is in; until that read is in too
	// no write starts, and a Flush waits.
	readAgain  bool
	catchUp    uint64
	flushAfter bool

	recs map[uint64]*Record
	// loaded holds the ids loaded at start, until their record leaves the outbox: a hand-off
	// of one of them comes late. An id left the outbox may be given again (a cluster node
	// started again numbers after the records of its base still there), and another node's
	// record under it is adopted here.
	loaded  map[uint64]bool
	waiting recordHeap
	objects map[uint64]*pendingObject
	stats   Status

	// The outbox change being saved (saving) and the changes made since, saved next;
	// afterSave and afterNext are the objects whose write waits for either.
	saving     uint64 // the id of the change being saved; 0 when none
	saveWG     sync.WaitGroup
	pendingPut map[uint64]Record
	pendingDel []uint64
	afterSave  []uint64
	afterNext  []uint64

	// putting counts the object writes running (at most MaxConcurrentWrites); putQueue holds,
	// in order, the objects whose write waits for one of them to end.
	putting  int
	putQueue []uint64

	flushers []*actor.PID
	timer    *time.Timer
	timerAt  time.Time
	timerGen uint64
}

// Receive implements actor.Actor.
func (d *deadLetters) Receive(c actor.Context) {
	switch msg := c.Message().(type) {
	case *actor.Started:
		d.start(c)
	case *dlLoaded:
		switch msg.id {
		case d.loading:
			d.applyLoad(c, msg)
		case d.catchUp:
			d.applyCatchUp(c, msg)
		}
	case *actor.Restarting:
		d.stop(false)
	case *actor.Stopping:
		d.stop(true)
	case *GetStatus:
		if c.Sender() != nil {
			c.Send(c.Sender(), d.status())
		}
	default:
		if d.loading != 0 {
			d.keepEarly(c, msg, c.Sender())
			return
		}
		d.handle(c, msg, c.Sender())
	}
	d.cfg.Metrics.SetOutbox(len(d.recs)) // read by the Prometheus collector, never by asking
}

// handle handles one message from sender once the outbox is loaded.
func (d *deadLetters) handle(c actor.Context, msg any, sender *actor.PID) {
	switch msg := msg.(type) {
	case *Enqueue:
		d.enqueue(msg)
		d.arm(time.Now())
	case *deadLettersHanded:
		d.handed(msg)
		d.arm(time.Now())
	case *dlWake:
		if msg.gen != d.timerGen {
			return
		}
		d.timerAt = time.Time{}
		if d.catchUp != 0 {
			return // no write before the outbox is read again: the read's end runs what is due
		}
		d.run(time.Now(), false)
	case *dlWritten:
		d.written(msg)
		d.answerFlushers(c)
		d.arm(time.Now())
	case *dlSaved:
		d.saved(msg)
		d.answerFlushers(c)
		d.arm(time.Now())
	case *Flush:
		d.addFlusher(c, sender)
		if d.catchUp != 0 {
			d.flushAfter = true
			return
		}
		d.run(time.Now(), true)
		d.answerFlushers(c)
	}
}

// addFlusher keeps sender to answer once the flush is done, unless MaxFlushers wait already:
// then it is answered at once, with the status of now.
func (d *deadLetters) addFlusher(c actor.Context, sender *actor.PID) {
	if sender == nil {
		return
	}
	if len(d.flushers) >= MaxFlushers {
		c.Send(sender, d.status())
		return
	}
	d.flushers = append(d.flushers, sender)
}

// keepEarly handles a message that arrives while the outbox loads. A record is put in the
// outbox at once (unless a subscription put it there) and kept for after the load, bounded by
// MaxEarlyRecords ([deadLetters.keep]); a Flush is remembered; a predecessor's results are
// dropped (nothing of this incarnation runs before its outbox is in).
func (d *deadLetters) keepEarly(c actor.Context, msg any, sender *actor.PID) {
	switch msg := msg.(type) {
	case *Enqueue:
		if r := d.record(msg); r != nil {
			d.save([]Record{*r}, nil)
			d.keep(r, false)
		}
	case *deadLettersHanded:
		if msg.save {
			d.save(msg.recs, nil)
		}
		for i := range msg.recs {
			d.keep(&msg.recs[i], !msg.save)
		}
	case *dlSaved:
		d.saved(msg)
	case *Flush:
		d.addFlusher(c, sender)
		d.flushAfter = true
	}
}

// keep keeps a record that arrived while the outbox loads. Past MaxEarlyRecords the records
// already in the outbox are let go, and so is every later one in it: the outbox is read again
// after the load ([deadLetters.readAgain]).
func (d *deadLetters) keep(r *Record, stored bool) {
	if stored && d.readAgain {
		return
	}
	d.early = append(d.early, earlyRecord{rec: r, stored: stored})
	if stored {
		d.earlyStored++
	}
	if len(d.early) > MaxEarlyRecords && d.earlyStored > 0 {
		d.letGoStored()
	}
}

// letGoStored lets go of the early records in the outbox: the outbox is read again after the
// load.
func (d *deadLetters) letGoStored() {
	d.readAgain = true
	kept := d.early[:0]
	for _, e := range d.early {
		if !e.stored {
			kept = append(kept, e)
		}
	}
	clear(d.early[len(kept):])
	d.early, d.earlyStored = kept, 0
}

// earlySaved marks the early records among put as in the outbox (dropping their events, for an
// [EventOutbox]), or lets them go when the outbox is to be read again.
func (d *deadLetters) earlySaved(put []Record) {
	if len(d.early) == 0 || len(put) == 0 {
		return
	}
	ids := make(map[uint64]bool, len(put))
	for _, p := range put {
		ids[p.ID] = true
	}
	for i := range d.early {
		e := &d.early[i]
		if e.stored || !ids[e.rec.ID] {
			continue
		}
		e.stored = true
		d.earlyStored++
		if d.events != nil {
			lighten(e.rec)
		}
	}
	if d.readAgain || len(d.early) > MaxEarlyRecords {
		d.letGoStored()
	}
}

func (d *deadLetters) start(c actor.Context) {
	d.self, d.system = c.Self(), c.ActorSystem()
	d.log = d.cfg.Logger.With("component", "dead-letters")
	d.ctx, d.cancel = context.WithCancel(context.Background())
	d.events, _ = d.cfg.Outbox.(EventOutbox)
	d.recs = make(map[uint64]*Record)
	d.loaded = make(map[uint64]bool)
	d.objects = make(map[uint64]*pendingObject)
	d.pendingPut = make(map[uint64]Record)
	d.putting, d.putQueue = 0, nil
	d.waiting = d.waiting[:0]
	d.stats = Status{}
	d.after = d.cfg.Stops.idle()
	// The outbox is read off the mailbox: a store may wait behind a publish's fsync.
	d.loading, d.loadingSince, d.early = d.read(), time.Now(), nil
}

// read reads the outbox off the mailbox and returns the id of the read, whose [dlLoaded]
// comes back. It reads once the stop work of the incarnation before has ended: its last
// changes are in the outbox then, or its WriteTimeouts passed.
func (d *deadLetters) read() uint64 {
	id := dlLoadIDs.Add(1)
	outbox, root, self, ctx, after := d.cfg.Outbox, d.system.Root, d.self, d.ctx, d.after
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		select {
		case <-after:
		case <-ctx.Done():
			return // stopped before: nobody reads the answer
		}
		recs, err := outbox.Load(ctx)
		sendUnlessStopped(ctx, root, self, &dlLoaded{id: id, recs: recs, err: err})
	}()
	return id
}

// applyLoad takes in the records loaded at start, then those that arrived meanwhile; when it
// let some of those go, it reads the outbox again ([deadLetters.applyCatchUp]) before it runs.
func (d *deadLetters) applyLoad(c actor.Context, m *dlLoaded) {
	if m.err != nil {
		panic(fmt.Errorf("loading the dead-letter outbox: %w", m.err))
	}
	early := d.early
	d.loading, d.early, d.earlyStored = 0, nil, 0
	now := time.Now()
	if n := d.takeInLoaded(m.recs, now); n > 0 {
		d.log.Info("dead-letter outbox loaded", "records", n)
	}
	recs := make([]*Record, 0, len(early))
	for _, e := range early {
		if _, ok := d.recs[e.rec.ID]; !ok && !d.loaded[e.rec.ID] {
			recs = append(recs, e.rec)
		}
	}
	d.takeIn(recs, now)
	if d.readAgain {
		d.readAgain = false
		d.catchUp = d.read()
		return
	}
	d.ready(c, now)
}

// applyCatchUp takes in the records of the outbox's second read that the actor does not know:
// those let go while it loaded ([MaxEarlyRecords]). No write ran since the first read, so none
// of them left the outbox since.
func (d *deadLetters) applyCatchUp(c actor.Context, m *dlLoaded) {
	if m.err != nil {
		panic(fmt.Errorf("reading the dead-letter outbox again: %w", m.err))
	}
	d.catchUp = 0
	now := time.Now()
	if n := d.takeInLoaded(m.recs, now); n > 0 {
		d.log.Info("dead-letter outbox read again for the records that arrived while it loaded", "records", n)
	}
	d.ready(c, now)
}

// takeInLoaded takes in the records read from the outbox that the actor does not know yet,
// noting them as loaded, and returns how many.
func (d *deadLetters) takeInLoaded(recs []Record, now time.Time) int {
	loaded := make([]*Record, 0, len(recs))
	for i := range recs {
		r := &recs[i]
		if _, ok := d.recs[r.ID]; ok || d.loaded[r.ID] {
			continue
		}
		loaded = append(loaded, r)
		d.loaded[r.ID] = true
	}
	d.takeIn(loaded, now)
	return len(loaded)
}

// ready starts the actor's work once its outbox is in: the flush asked for meanwhile, or the
// timer of the next write.
func (d *deadLetters) ready(c actor.Context, now time.Time) {
	if d.flushAfter {
		d.flushAfter = false
		d.run(now, true)
		d.answerFlushers(c)
		return
	}
	d.arm(now)
}

// stop cancels what runs, takes the changes the outbox has not saved yet and starts the stop
// work ([Stops]) that saves them once the writes and the save in flight have returned: the
// actor terminates at once (the waits would hold its mailbox, up to 3 × WriteTimeout, exactly
// when the store is slow), and the next incarnation reads the outbox after that stop work.
func (d *deadLetters) stop(final bool) {
	if d.cancel != nil {
		d.cancel()
	}
	if d.timer != nil {
		d.timer.Stop()
	}
	d.timerGen++
	if _, inMemory := d.cfg.Outbox.(*MemoryOutbox); final && (inMemory || d.cfg.Volatile) {
		// The in-memory outbox dies with the process: what is still in it is lost, and said
		// so; its records leave the outbox with the last changes. Those that arrived while it
		// loaded count too. (The results of the writes and the save in flight never reach this
		// incarnation: it counts the records as it has them now.)
		for _, e := range d.early {
			if _, ok := d.recs[e.rec.ID]; !ok {
				d.recs[e.rec.ID] = e.rec
			}
		}
		d.early = nil
		ids := slices.Sorted(maps.Keys(d.recs))
		recs := make([]*Record, len(ids))
		for i, id := range ids {
			recs[i] = d.recs[id]
			delete(d.pendingPut, id)
		}
		d.drop(recs, "the router stopped before the records could be written", "")
		d.pendingDel = append(d.pendingDel, ids...)
	}
	// What the actor decided is saved before the next incarnation loads, off the mailbox.
	save := d.pendingSave()
	prev, end := d.cfg.Stops.begin()
	wg, saveWG, timeout, log := &d.wg, &d.saveWG, d.cfg.WriteTimeout, d.log
	go func() {
		defer end()
		<-prev // the stop work before, bounded the same way: its last save lands first
		if !actors.WaitBounded(wg, timeout) {
			log.Error("dead-letter writes did not return after their context was cancelled; abandoning them, their records stay in the outbox")
		}
		// The save in flight gets WriteTimeout; a store stuck longer than that must not hold
		// the next incarnation or the router's shutdown, so the last changes are then written
		// beside it (at worst a record's older state lands last, and its object is written
		// again: at least once).
		if !actors.WaitBounded(saveWG, timeout) {
			log.Error("the dead-letter outbox save did not finish in time; writing the latest changes beside it", "timeout", timeout)
		}
		// The last changes, bounded the same way (an outbox may ignore its context).
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		var last sync.WaitGroup
		last.Add(1)
		var err error
		go func() {
			defer last.Done()
			err = save(ctx)
		}()
		if !actors.WaitBounded(&last, timeout) {
			log.Error("the dead-letter outbox did not take the last changes in time; records made since the last save may be lost", "timeout", timeout)
		} else if err != nil {
			log.Error("saving the dead-letter outbox before stopping", "err", err)
		}
	}()
}

// sendUnlessStopped sends a result of work off the mailbox to the actor, unless the actor
// has stopped (or restarted) meanwhile, its context ended: no incarnation takes a result of
// another's, and one sent after the actor terminated would only be logged as a protoactor
// dead letter.
func sendUnlessStopped(ctx context.Context, root *actor.RootContext, self *actor.PID, msg any) {
	if ctx.Err() == nil {
		root.Send(self, msg)
	}
}

// save queues outbox changes: records to put (their latest state) and ids to delete. They are
// written off the mailbox, after the changes queued before them.
func (d *deadLetters) save(put []Record, del []uint64) {
	for _, r := range put {
		d.pendingPut[r.ID] = r
	}
	for _, id := range del {
		delete(d.pendingPut, id)
	}
	d.pendingDel = append(d.pendingDel, del...)
	d.startSave()
}

// startSave writes the queued outbox changes, unless a change is being written: then they go
// when it is done.
func (d *deadLetters) startSave() {
	if d.saving != 0 || (len(d.pendingPut) == 0 && len(d.pendingDel) == 0) {
		return
	}
	put := slices.SortedFunc(maps.Values(d.pendingPut), func(a, b Record) int { return cmp.Compare(a.ID, b.ID) })
	del := d.pendingDel
	clear(d.pendingPut)
	d.pendingDel = nil
	d.afterSave, d.afterNext = d.afterNext, nil
	id := dlSaveIDs.Add(1)
	d.saving = id
	outbox, root, self, after, actx := d.cfg.Outbox, d.system.Root, d.self, d.after, d.ctx
	d.saveWG.Add(1)
	go func() {
		defer d.saveWG.Done()
		<-after // the last changes of the incarnation before land first ([Stops])
		// Not the actor's context: a change the actor made is saved even when it stops.
		err := writeOutbox(context.Background(), outbox, put, del)
		sendUnlessStopped(actx, root, self, &dlSaved{id: id, err: err, put: put, del: del})
	}()
}

// pendingSave takes the queued outbox changes and returns the function that writes them (the
// actor is stopping); it touches no actor state, so it may run off the mailbox.
func (d *deadLetters) pendingSave() func(ctx context.Context) error {
	put := slices.SortedFunc(maps.Values(d.pendingPut), func(a, b Record) int { return cmp.Compare(a.ID, b.ID) })
	del := d.pendingDel
	clear(d.pendingPut)
	d.pendingDel = nil
	outbox := d.cfg.Outbox
	return func(ctx context.Context) error { return writeOutbox(ctx, outbox, put, del) }
}

func writeOutbox(ctx context.Context, outbox Outbox, put []Record, del []uint64) error {
	if len(put) > 0 {
		if err := outbox.Put(ctx, put); err != nil {
			return fmt.Errorf("saving dead letters to the outbox: %w", err)
		}
	}
	if len(del) > 0 {
		if err := outbox.Delete(ctx, del); err != nil {
			return fmt.Errorf("removing dead letters from the outbox: %w", err)
		}
	}
	return nil
}

// saved applies the result of an outbox change: the objects that waited for it are written,
// and the changes made meanwhile are saved next.
func (d *deadLetters) saved(m *dlSaved) {
	if m.id != d.saving {
		return // from before a restart
	}
	d.saving = 0
	if m.err != nil {
		// The outbox is the truth after a restart: start again from it. The failed change goes
		// back in front of those made since, so the restart's last save writes it again (a store
		// that failed once may take it): a record put by it alone, taken in from a replay, is
		// in no other change.
		for _, r := range m.put {
			if _, newer := d.pendingPut[r.ID]; !newer && !slices.Contains(d.pendingDel, r.ID) {
				d.pendingPut[r.ID] = r
			}
		}
		d.pendingDel = append(m.del, d.pendingDel...)
		panic(m.err)
	}
	if d.events != nil {
		// Records the actor put with their events are in the outbox now: their events are
		// read back from it when written.
		for _, p := range m.put {
			if r := d.recs[p.ID]; r != nil && r.Letter.Event != nil {
				lighten(r)
			}
		}
	}
	d.earlySaved(m.put)
	d.putQueue = append(d.putQueue, d.afterSave...)
	d.afterSave = nil
	d.startPuts()
	d.startSave()
}

func (d *deadLetters) enqueue(m *Enqueue) {
	r := d.record(m)
	if r == nil {
		return
	}
	d.save([]Record{*r}, nil) // with its event, kept here until the outbox holds it
	d.recs[r.ID] = r
	heap.Push(&d.waiting, r)
}

// record returns the outbox record of an Enqueue (nil for one without an event).
func (d *deadLetters) record(m *Enqueue) *Record {
	if m.Letter == nil || m.Letter.Event == nil {
		return nil
	}
	r := newOutboxRecord(d.cfg, m.Letter, m.Target)
	note(r)
	return r
}

// newOutboxRecord returns the outbox record of a dead letter, with a fresh id: due the delay
// after its event's last attempt.
func newOutboxRecord(cfg *Config, l *actors.DeadLetter, t Target) *Record {
	base := l.LastAttemptTime
	if base.IsZero() {
		base = time.Now()
	}
	return &Record{ID: cfg.Outbox.NewID(), Letter: l, Target: t, Due: base.Add(cfg.scale(cfg.Delay))}
}

// handed takes in records a subscription put in the outbox with its own update
// ([actors.DeadLetterHandoff]), or that [StoreOutbox.Adopt] read there; those of a replay's
// subscription, settled in its own journal, are put in the outbox here. One loaded at start, or
// already known, is not taken in twice.
func (d *deadLetters) handed(m *deadLettersHanded) {
	var recs []*Record
	var put []Record
	for i := range m.recs {
		r := &m.recs[i]
		if _, ok := d.recs[r.ID]; ok || d.loaded[r.ID] {
			continue
		}
		recs = append(recs, r)
		if m.save {
			put = append(put, *r)
		}
	}
	if len(put) > 0 {
		d.save(put, nil)
	}
	d.takeIn(recs, time.Now())
}

// takeIn takes in records read from the outbox. Those whose write was tried before — by an
// earlier incarnation, or by the node that ran their subscription before (adopted) — are
// grouped again into their object (by its key; records saved by an older version without one,
// by their first write attempt) and retried at once: that write may have landed, so the object
// is looked for under its key and kept when found, instead of putting the records in a second
// object or replacing it with those of its records still in the outbox. The others wait out
// their delay. A record is tried at once however long ago its first attempt was: the limit
// ([Config.GiveUpAfter]) drops it only if this try fails too.
func (d *deadLetters) takeIn(recs []*Record, now time.Time) {
	type group struct {
		target     Target
		topic, sub string
		first      time.Time
		key        string
	}
	groups := map[group]*pendingObject{}
	for _, r := range recs {
		note(r)
		d.recs[r.ID] = r
		if r.FirstWriteAttempt.IsZero() {
			heap.Push(&d.waiting, r)
			continue
		}
		g := group{r.Target, r.Letter.Topic, r.Letter.Subscription, r.FirstWriteAttempt, r.ObjectKey}
		if r.ObjectKey != "" {
			g.first = time.Time{}
		}
		o, ok := groups[g]
		if !ok {
			o = d.newObject(g.topic, g.sub, r.Target, now)
			if r.ObjectKey != "" {
				o.key, o.reread = r.ObjectKey, true
			}
			o.first, o.attempts, o.next = r.FirstWriteAttempt, r.WriteAttempts, now
			groups[g] = o
		}
		o.first = minTime(o.first, r.FirstWriteAttempt)
		o.attempts = max(o.attempts, r.WriteAttempts)
		o.recs = append(o.recs, r)
	}
}

func minTime(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

func (d *deadLetters) newObject(topic, sub string, t Target, now time.Time) *pendingObject {
	o := &pendingObject{
		id: dlObjectIDs.Add(1), topic: topic, sub: sub, target: t,
		key: Key(t.Prefix, now, d.cfg.NewID()),
	}
	d.objects[o.id] = o
	return o
}

// run starts the writes that are due at now: objects whose retry has come, then the waiting
// records due, grouped one object per subscription. With flush everything is due.
func (d *deadLetters) run(now time.Time, flush bool) {
	for _, id := range slices.Sorted(maps.Keys(d.objects)) {
		o := d.objects[id]
		if o.writing || (!flush && o.next.After(now)) {
			continue
		}
		d.write(o, now) // past the limit too: records are dropped only after a try fails (written)
	}
	type group struct {
		target     Target
		topic, sub string
	}
	var order []group
	due := map[group][]*Record{}
	for d.waiting.Len() > 0 && (flush || !d.waiting[0].Due.After(now)) {
		r := heap.Pop(&d.waiting).(*Record)
		if d.cfg.Owns != nil && !d.cfg.Owns(r.Letter.Topic, r.Letter.Subscription) {
			delete(d.recs, r.ID) // another node's to write; Adopt brings it back if it moves here
			delete(d.loaded, r.ID)
			continue
		}
		g := group{r.Target, r.Letter.Topic, r.Letter.Subscription}
		if _, ok := due[g]; !ok {
			order = append(order, g)
		}
		due[g] = append(due[g], r)
	}
	for _, g := range order {
		recs := due[g]
		for len(recs) > 0 {
			n := objectLength(recs, d.cfg.MaxRecordsPerObject, d.cfg.MaxObjectBytes)
			o := d.newObject(g.topic, g.sub, g.target, now)
			o.recs, recs = recs[:n], recs[n:]
			d.write(o, now)
		}
	}
	d.arm(now)
}

// objectLength returns how many of recs, taken in order, the next object holds: at most
// maxRecords, and records whose encoding takes at most maxBytes — at least one, so a record
// larger than maxBytes is written alone.
func objectLength(recs []*Record, maxRecords, maxBytes int) int {
	n, size := 0, 0
	for n < len(recs) && n < maxRecords {
		s := recs[n].Size
		if n > 0 && size+s > maxBytes {
			break
		}
		size += s
		n++
	}
	return n
}

// note sets the event id and size of a record that has its event.
func note(r *Record) {
	if r.Letter.Event != nil {
		r.EventID, r.Size = r.Letter.Event.ID, sizeOf(r)
	}
}

// lighten notes r's event id and size and drops its event ([EventOutbox]); the letter is
// replaced, not changed: others may share it.
func lighten(r *Record) {
	if r.Letter.Event == nil {
		return
	}
	note(r)
	l := *r.Letter
	l.Event = nil
	r.Letter = &l
}

// sizeOf bounds the bytes of a record, with its event, in its object.
func sizeOf(r *Record) int {
	rec := recordOf(r.Letter)
	return schemas.DeadLetterSizeBound(r.Target.Format, &rec)
}

// recordOf returns the wire record of a dead letter.
func recordOf(l *actors.DeadLetter) schemas.DeadLetterRecord {
	return schemas.DeadLetterRecord{
		Event: l.Event, Reason: l.Reason, DeliveryAttempts: l.DeliveryAttempts, LastOutcome: l.LastOutcome,
		LastHTTPStatus: l.LastHTTPStatus, PublishTime: l.PublishTime, LastAttemptTime: l.LastAttemptTime,
	}
}

// write starts one object write: its records' new write state is saved to the outbox first,
// then the object is put ([deadLetters.put]), both off the mailbox.
func (d *deadLetters) write(o *pendingObject, now time.Time) {
	o.writing = true
	o.attempts++
	o.triedHere++
	if o.first.IsZero() {
		o.first = now
	}
	if o.tried.IsZero() {
		o.tried = now
	}
	changed := make([]Record, len(o.recs))
	for i, r := range o.recs {
		if r.FirstWriteAttempt.IsZero() {
			r.FirstWriteAttempt = o.first
		}
		r.WriteAttempts = o.attempts
		r.ObjectKey = o.key
		changed[i] = *r
	}
	d.afterNext = append(d.afterNext, o.id) // before save starts the change that includes it
	d.save(changed, nil)
}

// startPuts starts the queued object writes while fewer than MaxConcurrentWrites run.
func (d *deadLetters) startPuts() {
	for d.putting < MaxConcurrentWrites && len(d.putQueue) > 0 {
		id := d.putQueue[0]
		d.putQueue = d.putQueue[1:]
		if o, ok := d.objects[id]; ok {
			d.put(o)
		}
	}
	if len(d.putQueue) == 0 {
		d.putQueue = nil // let the array go
	}
}

// put writes an object off the mailbox; the result comes back as a [dlWritten], which frees
// its place among the MaxConcurrentWrites. The events of records that have none here are read
// from the outbox ([EventOutbox]) by the write, once it knows it writes the object.
func (d *deadLetters) put(o *pendingObject) {
	ids := make([]uint64, len(o.recs))
	letters := make([]*actors.DeadLetter, len(o.recs))
	size := 2
	for i, r := range o.recs {
		ids[i], letters[i] = r.ID, r.Letter
		size += r.Size
	}
	id, key, target, topic, sub, reread := o.id, o.key, o.target, o.topic, o.sub, o.reread
	root, self, parent, cfg, events := d.system.Root, d.self, d.ctx, d.cfg, d.events
	d.putting++
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		res := &dlWritten{id: id}
		defer func() { sendUnlessStopped(parent, root, self, res) }()
		ctx, cancel := context.WithTimeout(parent, cfg.WriteTimeout)
		found := false
		if reread {
			res.info, found, res.err = lookupObject(ctx, cfg.Store, target.Bucket, key)
		}
		written := len(ids)
		if res.err == nil && !found {
			var recs []schemas.DeadLetterRecord
			recs, res.err = wireRecords(ctx, events, ids, letters)
			res.missing, written = len(ids)-len(recs), len(recs)
			var body []byte
			if res.err == nil && len(recs) > 0 {
				if body, res.err = schemas.AppendDeadLetters(make([]byte, 0, size), target.Format, recs); res.err != nil {
					res.permanent = true
				}
			}
			recs = nil // let the events go before the upload
			if res.err == nil && len(body) > 0 {
				res.info, res.err = cfg.Store.Put(ctx, target.Bucket, key, body, sinks.PutOptions{
					ContentType: schemas.ContentTypeDeadLetters, Metadata: map[string]string{TopicMetadata: topic},
				})
			}
		}
		cancel()
		if res.err == nil && written > 0 && target.Notify && cfg.OnWritten != nil {
			cfg.OnWritten(parent, &Object{Topic: topic, Subscription: sub, Target: target, Info: res.info, Records: written})
		}
	}()
}

// wireRecords returns the wire records of an object's letters (ids their records' ids),
// reading from events the events the letters do not have. A record no longer in the outbox
// (another writer took it) is left out.
func wireRecords(ctx context.Context, events EventOutbox, ids []uint64, letters []*actors.DeadLetter) ([]schemas.DeadLetterRecord, error) {
	var read []uint64
	for i, l := range letters {
		if l.Event == nil {
			read = append(read, ids[i])
		}
	}
	var evs map[uint64]*schemas.Event
	if len(read) > 0 {
		if events == nil {
			return nil, errors.New("dead letters without their events, and an outbox that does not keep them")
		}
		var err error
		if evs, err = events.Events(ctx, read); err != nil {
			return nil, err
		}
	}
	recs := make([]schemas.DeadLetterRecord, 0, len(letters))
	for i, l := range letters {
		rec := recordOf(l)
		if rec.Event == nil {
			if rec.Event = evs[ids[i]]; rec.Event == nil {
				continue
			}
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

// lookupObject describes the object under key in bucket; found is false when there is none.
// It lists one object: the first key beginning with key is key itself, when there is one.
func lookupObject(ctx context.Context, st sinks.ObjectStore, bucket, key string) (info sinks.ObjectInfo, found bool, err error) {
	objs, err := st.List(ctx, bucket, sinks.ListQuery{Prefix: key, Max: 1})
	if errors.Is(err, sinks.ErrBucketNotFound) {
		return sinks.ObjectInfo{}, false, nil
	}
	if err != nil {
		return sinks.ObjectInfo{}, false, fmt.Errorf("looking for the dead-letter object %s/%s: %w", bucket, key, err)
	}
	for _, o := range objs {
		if o.Key == key {
			return o, true, nil
		}
	}
	return sinks.ObjectInfo{}, false, nil
}

// written applies the result of one write.
func (d *deadLetters) written(m *dlWritten) {
	o, ok := d.objects[m.id]
	if !ok {
		return // from before a restart
	}
	d.putting--
	defer d.startPuts()
	o.writing = false
	now := time.Now()
	if m.err == nil {
		ids := make([]uint64, len(o.recs))
		for i, r := range o.recs {
			ids[i] = r.ID
			delete(d.recs, r.ID)
			delete(d.loaded, r.ID)
		}
		d.save(nil, ids)
		delete(d.objects, o.id)
		if m.missing > 0 {
			d.log.Warn("dead letters left the outbox before their object was written; another writer took them",
				logattr.Topic, o.topic, logattr.Subscription, o.sub, "records", m.missing)
		}
		if n := len(o.recs) - m.missing; n > 0 {
			d.stats.ObjectsWritten++
			d.stats.RecordsWritten += n
			d.log.Info("dead letters written", logattr.Topic, o.topic, logattr.Subscription, o.sub, "bucket", o.target.Bucket,
				"key", o.key, "records", n, "attempts", o.attempts)
		}
		return
	}
	if m.permanent {
		d.log.Error("dead letters cannot be encoded; dropping them", logattr.Topic, o.topic, logattr.Subscription, o.sub, "err", m.err)
		d.dropObject(o, "the records cannot be encoded: "+m.err.Error())
		return
	}
	// A write the destination refused for what it is (access denied or disabled: a bucket
	// policy, credentials it does not take) is retried like one it failed: Event Grid retries
	// a dead-letter write for four hours whatever the failure, and a refusal is mostly fixed by
	// an operator (the policy, the credentials) within them. It is logged at error level with
	// the store's code, and the records, if dropped, say they were refused.
	o.refused = sinks.RefusalCode(m.err)
	level, failed, refused := slog.LevelWarn, "writing dead letters failed", slog.Attr{}
	if o.refused != "" {
		level, failed, refused = slog.LevelError, "the dead-letter destination refused the write", slog.String("refused", o.refused)
	}
	giveUp := o.first.Add(d.cfg.scale(d.cfg.GiveUpAfter))
	if !now.Before(giveUp) {
		d.log.Log(context.Background(), level, failed, logattr.Topic, o.topic, logattr.Subscription, o.sub, "bucket", o.target.Bucket,
			"key", o.key, "records", len(o.recs), "attempts", o.attempts, refused, "err", m.err)
		d.dropObject(o, d.unavailableFor(o, now))
		return
	}
	delay := d.cfg.Backoff[min(o.attempts, len(d.cfg.Backoff))-1]
	o.next = now.Add(d.cfg.scale(delay))
	if o.next.After(giveUp) {
		o.next = giveUp // a last try at the limit: the records are dropped if it fails
	}
	d.log.Log(context.Background(), level, failed+"; will retry", logattr.Topic, o.topic, logattr.Subscription, o.sub, "bucket", o.target.Bucket,
		"key", o.key, "records", len(o.recs), "attempts", o.attempts, "retryIn", o.next.Sub(now), refused, "err", m.err)
}

// unavailableFor says why an object whose write failed at now, past the limit, is dropped:
// how long the destination was seen unavailable. When earlier attempts were made before a
// restart (or by another node), only the tries since are this actor's to vouch for: the
// destination may have been up while the router was down, so the reason says what was
// seen since the records were taken up again, and how long ago the first attempt was.
//
// When the destination refused the last write for what it is (o.refused), the reason says
// so, with the store's error code, instead of calling it unavailable.
func (d *deadLetters) unavailableFor(o *pendingObject, now time.Time) string {
	sinceFirst := now.Sub(o.first).Round(time.Second)
	if o.refused != "" {
		return fmt.Sprintf("the dead-letter destination refused the write (%s: access to bucket %s is denied or disabled, "+
			"or the credentials are not accepted) for %s after the first write attempt (%s)",
			o.refused, o.target.Bucket, sinceFirst, plural(o.attempts, "attempt"))
	}
	if o.attempts <= o.triedHere {
		return fmt.Sprintf("the dead-letter destination was unavailable for %s after the first write attempt (%s)",
			sinceFirst, plural(o.attempts, "attempt"))
	}
	return fmt.Sprintf("the dead-letter destination still failed the write after the records were read back from the outbox "+
		"(a restart or a hand-over): %s failed in the %s since; the first write attempt, before that, was %s ago "+
		"(%s in all), past the limit of %s",
		plural(o.triedHere, "attempt"), now.Sub(o.tried).Round(time.Second), sinceFirst, plural(o.attempts, "attempt"),
		d.cfg.scale(d.cfg.GiveUpAfter))
}

// plural says n things, as "1 attempt" or "3 attempts".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// dropObject drops every record of an object that cannot be written, saying why.
func (d *deadLetters) dropObject(o *pendingObject, why string) {
	ids := make([]uint64, len(o.recs))
	for i, r := range o.recs {
		ids[i] = r.ID
	}
	d.drop(o.recs, why, o.refused)
	d.save(nil, ids)
	delete(d.objects, o.id)
}

// MaxDroppedIDsPerLine bounds the event ids one "dead letters dropped" log line lists: a
// larger drop is logged in several lines, each with its part of the ids.
const MaxDroppedIDsPerLine = 100

// drop forgets records, saying why (refused is the store's error code when the destination
// refused the writes): each is counted as DroppedEventCount with reason
// DeadLetterDestinationUnavailable (SPEC §5), and every event id is logged, per subscription,
// at most [MaxDroppedIDsPerLine] a line. The lines are never folded by the log's flood guard
// (logattr.Unfolded): each names events no other line does, and their number is bounded by
// the records dropped. [Config.OnDropped] then has the drop, per subscription, for the events'
// delivery histories.
func (d *deadLetters) drop(recs []*Record, why, refused string) {
	now := time.Now()
	type group struct{ topic, sub string }
	var order []group
	bySub := map[group]*Dropped{}
	buckets := map[group]string{}
	for _, r := range recs {
		l := r.Letter
		delete(d.recs, r.ID)
		delete(d.loaded, r.ID)
		d.stats.RecordsDropped++
		d.cfg.Metrics.Add(metrics.Key{
			Name: metrics.DroppedEventCount, Scope: metrics.SubscriptionScope(l.Topic, l.Subscription),
			Dim: string(schemas.DeadLetterDestinationUnavailable),
		}, 1)
		g := group{l.Topic, l.Subscription}
		dr, ok := bySub[g]
		if !ok {
			dr = &Dropped{Topic: l.Topic, Subscription: l.Subscription, Time: now, Why: why, Refused: refused}
			bySub[g], buckets[g] = dr, r.Target.Bucket
			order = append(order, g)
		}
		dr.EventIDs = append(dr.EventIDs, r.EventID)
		dr.Attempts = append(dr.Attempts, l.DeliveryAttempts)
		dr.PublishTimes = append(dr.PublishTimes, l.PublishTime)
	}
	ctx := logattr.Unfolded(context.Background())
	for _, g := range order {
		dr := bySub[g]
		n := len(dr.EventIDs)
		for from := 0; from < n; from += MaxDroppedIDsPerLine {
			to := min(from+MaxDroppedIDsPerLine, n)
			attrs := []any{logattr.Topic, dr.Topic, logattr.Subscription, dr.Subscription, "bucket", buckets[g],
				"records", n, logattr.EventIDs, dr.EventIDs[from:to]}
			if n > MaxDroppedIDsPerLine {
				attrs = append(attrs, "idsFrom", from+1, "idsTo", to)
			}
			attrs = append(attrs, "reason", string(schemas.DeadLetterDestinationUnavailable))
			if refused != "" {
				attrs = append(attrs, "refused", refused)
			}
			attrs = append(attrs, "why", why)
			d.log.WarnContext(ctx, "dead letters dropped", attrs...)
		}
		if d.cfg.OnDropped != nil {
			d.cfg.OnDropped(dr)
		}
	}
}

func (d *deadLetters) answerFlushers(c actor.Context) {
	if len(d.flushers) == 0 || d.saving != 0 || d.loading != 0 || d.catchUp != 0 {
		return // the answer waits until what it reports is in the outbox
	}
	for _, o := range d.objects {
		if o.writing {
			return
		}
	}
	st := d.status()
	for _, p := range d.flushers {
		if p != nil {
			c.Send(p, st)
		}
	}
	d.flushers = nil
}

// arm makes sure a wake arrives when the next write is due: the earliest waiting record's due
// time plus the slack, or the earliest retry.
func (d *deadLetters) arm(now time.Time) {
	var at time.Time
	if d.waiting.Len() > 0 {
		at = d.waiting[0].Due.Add(d.cfg.scale(d.cfg.Slack))
	}
	for _, o := range d.objects {
		if !o.writing && (at.IsZero() || o.next.Before(at)) {
			at = o.next
		}
	}
	if at.IsZero() || at.Equal(d.timerAt) {
		return
	}
	if d.timer != nil {
		d.timer.Stop()
	}
	d.timerGen++
	d.timerAt = at
	gen, root, self := d.timerGen, d.system.Root, d.self
	d.timer = time.AfterFunc(max(at.Sub(now), 0), func() { root.Send(self, &dlWake{gen: gen}) })
}

func (d *deadLetters) status() *Status {
	if d.loading != 0 || d.catchUp != 0 {
		return &Status{Loading: true, LoadingSince: d.loadingSince}
	}
	st := d.stats
	st.Waiting = d.waiting.Len()
	for _, o := range d.objects {
		if o.writing {
			st.Writing += len(o.recs)
		} else {
			st.Retrying += len(o.recs)
		}
	}
	return &st
}

// recordHeap orders waiting records by due time, then id.
type recordHeap []*Record

func (h recordHeap) Len() int { return len(h) }
func (h recordHeap) Less(i, j int) bool {
	if h[i].Due.Equal(h[j].Due) {
		return h[i].ID < h[j].ID
	}
	return h[i].Due.Before(h[j].Due)
}
func (h recordHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *recordHeap) Push(x any)   { *h = append(*h, x.(*Record)) }
func (h *recordHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil // the slot past the end must not keep the record (and its event) alive
	*h = old[:len(old)-1]
	return r
}
