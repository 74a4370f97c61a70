package router

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

// ReplayStage names the part of a replay a [ReplayProgress] is about.
type ReplayStage string

// Replay stages.
const (
	// ReplayReading: Done of Total objects read.
	ReplayReading ReplayStage = "reading"
	// ReplayDelivering: Done of Total replayed events settled (delivered or ended again); only
	// with [ReplayOptions.Wait].
	ReplayDelivering ReplayStage = "delivering"
)

// ReplayProgress is one progress report of a replay.
type ReplayProgress struct {
	Stage ReplayStage `json:"stage"`
	Done  int         `json:"done"`
	Total int         `json:"total"`
}

// ReplayOptions select what a replay re-delivers and how it reports.
type ReplayOptions struct {
	// Since and Until select the objects written in [Since, Until); zero means unbounded.
	Since, Until time.Time
	// Reason, when set, selects the records with that deadLetterReason.
	Reason schemas.Reason
	// DryRun reads and selects but re-delivers nothing: the summary says what would happen.
	DryRun bool
	// Wait makes the call return only when every replayed event has been delivered or has
	// ended again (or ctx is done; the replay goes on regardless).
	Wait bool
	// Progress, when set, is called as objects are read and, with Wait, as events settle.
	Progress func(ReplayProgress)
}

// ReplaySummary says what a replay found and did.
type ReplaySummary struct {
	DryRun bool `json:"dryRun"`
	// Objects counts the objects read.
	Objects int `json:"objects"`
	// Found counts the records in them.
	Found int `json:"found"`
	// Replayed counts the events re-delivered (or, on a dry run, that would be).
	Replayed int `json:"replayed"`
	// Skipped counts the records not replayed: another reason than the one asked for, or an
	// event id already taken from a newer object (an event dead-lettered again after an
	// earlier replay).
	Skipped int `json:"skipped"`
	// Delivered, DeadLettered and Dropped say how the replayed events ended (with Wait).
	Delivered    int `json:"delivered"`
	DeadLettered int `json:"deadLettered"`
	Dropped      int `json:"dropped"`
	// Unread counts the replayed events whose object could not be read again when the replay
	// came to it (with Wait; Problems says why): replay again to take them. Once the store
	// failed a read through every retry, the replay reads no further objects and counts their
	// events here too.
	Unread int `json:"unread,omitempty"`
	// Completed is set when every replayed event settled before the call returned.
	Completed bool `json:"completed"`
	// Events lists the replayed events, newest object first: at most the first 10 000
	// ([MaxListedReplayEvents]), so a summary stays small however many events a replay takes.
	Events []ReplayedEvent `json:"events,omitempty"`
	// Unlisted counts the replayed events left out of Events.
	Unlisted int `json:"unlisted,omitempty"`
	// Problems lists the objects that could not be read or decoded: at most the first 100
	// ([MaxListedProblems]); UnlistedProblems counts the others.
	Problems         []string `json:"problems,omitempty"`
	UnlistedProblems int      `json:"unlistedProblems,omitempty"`
}

// MaxListedReplayEvents is how many events a [ReplaySummary] lists.
const MaxListedReplayEvents = 10000

// maxListedReplayEvents is MaxListedReplayEvents; tests set it lower.
var maxListedReplayEvents = MaxListedReplayEvents

// ReplayedEvent names one event of a replay.
type ReplayedEvent struct {
	ID     string         `json:"id"`
	Reason schemas.Reason `json:"reason"`
	Object string         `json:"object"`
}

// ReplayDeadLetters re-delivers a subscription's dead-lettered events to that subscription
// only (SPEC §5): it reads the subscription's objects from its bucket, selects the records, and
// hands the events — with their original ids, as new publishes with a fresh attempt budget and
// time to live — to a replay actor that delivers them exactly as the subscription does
// (batching, retries, probation; an event that fails again is dead-lettered again, into a new
// object). Each event id is replayed once, from its newest record. Objects are never changed,
// so a replay can be repeated; receivers deduplicate by event id. One replay per subscription
// runs at a time; deleting or replacing the subscription stops it.
//
// Its memory does not grow with the objects selected. The selection reads them one at a time,
// newest first, and keeps of each only which records it takes (and their events, while those
// kept fit in the replay window of 64 MiB, [deadletter.DefaultReplayWindow]); the replay then
// reads each other object again when it comes to it, once the events of newer objects it
// still holds are under the window: an object's events wait for those of newer objects that
// keep failing until they end. An object changed or gone by then is reported in Problems, its
// events counted in Unread. A dry run keeps no events.
func (r *Router) ReplayDeadLetters(ctx context.Context, topic, name string, opts ReplayOptions) (*ReplaySummary, error) {
	key := replayKey(topic, name)
	if _, _, _, err := r.deadLetterSource(topic, name); err != nil {
		return nil, err
	}
	if !opts.DryRun && r.replayRunning(key) {
		return nil, fmt.Errorf("event subscription %q of topic %q: %w; wait for it to finish", name, topic, ErrReplayRunning)
	}
	var progress func(done, total int)
	if opts.Progress != nil {
		progress = func(done, total int) { opts.Progress(ReplayProgress{Stage: ReplayReading, Done: done, Total: total}) }
	}
	src, sum, err := r.selectReplay(ctx, topic, name, opts, progress)
	if err != nil {
		return nil, err
	}
	if opts.DryRun || sum.Replayed == 0 {
		sum.Completed = !opts.DryRun
		return sum, nil
	}
	return r.runReplay(ctx, topic, name, src, opts, sum)
}

// replaySource is what a replay re-delivers: the records it takes of each object, newest
// object first, one part of the replay actor's each ([deadletter.ReplayConfig.Read]).
type replaySource struct {
	store           sinks.ObjectStore
	bucket, topicID string
	schema          schemas.Schema
	limit           int64

	parts []replayPart // fixed once the selection is made, but for events

	mu       sync.Mutex
	problems []string // of the objects that could not be read again (the first few)
	unlisted int      // and how many more
	// failed is set once the store failed a read through all of replayReadBackoff: the
	// replay reads no more objects (left counts their events) and says how to take them.
	failed     *replayPart
	leftParts  int
	leftEvents int
}

// replayPart is the records a replay takes of one object.
type replayPart struct {
	key, etag string
	written   time.Time // the object's LastModified
	recs      []int32   // indexes of the records taken, in the object's array
	// events are the events taken, when the selection kept them (guarded by replaySource.mu);
	// the replay takes them, and reads the object again when they were not kept.
	events []*schemas.Event
}

// counts returns the number of events of each part.
func (s *replaySource) counts() []int {
	out := make([]int, len(s.parts))
	for i, p := range s.parts {
		out[i] = len(p.recs)
	}
	return out
}

// replayReadBackoff is the wait before each new try of an object read that failed while a
// replay goes on; after the last, its events are left out and reported.
var replayReadBackoff = []time.Duration{time.Second, 10 * time.Second, time.Minute}

// read returns the events of part i: kept from the selection, or read again from its object,
// which must be unchanged since. A store that cannot be reached is tried again after each of
// replayReadBackoff; once it has failed a read through all of them, the replay reads no more
// objects: each later part fails at once, and [replaySource.report] says how to take them.
func (s *replaySource) read(ctx context.Context, i int) ([]*schemas.Event, error) {
	p := &s.parts[i]
	s.mu.Lock()
	events, failed := p.events, s.failed
	p.events = nil
	if events == nil && failed != nil {
		s.leftParts++
		s.leftEvents += len(p.recs)
	}
	s.mu.Unlock()
	if events != nil {
		return events, nil
	}
	if failed != nil {
		return nil, fmt.Errorf("not read: the dead-letter store failed reading %s", failed.key)
	}
	events, unavailable, err := s.reread(ctx, p)
	if err != nil && ctx.Err() == nil {
		s.mu.Lock()
		listProblem(&s.problems, &s.unlisted, fmt.Sprintf("%s: not replayed: %v (%d events); replay again to take them", p.key, err, len(p.recs)))
		if unavailable {
			s.failed = p
		}
		s.mu.Unlock()
	}
	return events, err
}

// report adds the problems of the objects the replay could not read again to sum.
func (s *replaySource) report(sum *ReplaySummary) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.problems {
		listProblem(&sum.Problems, &sum.UnlistedProblems, p)
	}
	sum.UnlistedProblems += s.unlisted
	if s.leftParts > 0 { // listed however many are: it says how to take what was left
		sum.Problems = append(sum.Problems, fmt.Sprintf("%d older objects (%d events) not replayed: the dead-letter store failed reading %s; "+
			"once it answers, replay again with --until %s to take them and that object",
			s.leftParts, s.leftEvents, s.failed.key, s.failed.written.Add(time.Nanosecond).UTC().Format(time.RFC3339Nano)))
	}
}

// reread reads the events of p from its object again. unavailable says the store failed
// through every retry (rather than the object being gone, too large or changed).
func (s *replaySource) reread(ctx context.Context, p *replayPart) (events []*schemas.Event, unavailable bool, err error) {
	var body []byte
	var info sinks.ObjectInfo
	for try := 0; ; try++ {
		body, info, err = s.store.Get(ctx, s.bucket, p.key, s.limit)
		if err == nil || ctx.Err() != nil ||
			errors.Is(err, sinks.ErrObjectNotFound) || errors.Is(err, sinks.ErrBucketNotFound) || errors.Is(err, sinks.ErrObjectTooLarge) {
			break
		}
		if try == len(replayReadBackoff) {
			return nil, true, fmt.Errorf("reading the object again: %w", err)
		}
		select {
		case <-time.After(replayReadBackoff[try]):
		case <-ctx.Done():
		}
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading the object again: %w", err)
	}
	if info.ETag != p.etag {
		return nil, false, errors.New("the object changed after the replay selected its records")
	}
	recs, err := schemas.DecodeDeadLetters(body, s.schema, s.topicID)
	if err != nil {
		return nil, false, fmt.Errorf("decoding the object again: %w", err)
	}
	events = make([]*schemas.Event, len(p.recs))
	for j, k := range p.recs {
		if int(k) >= len(recs) {
			return nil, false, errors.New("the object changed after the replay selected its records")
		}
		events[j] = recs[k].Event
	}
	return events, false, nil
}

// selectReplay reads the objects a replay selects, one at a time and newest first, and
// returns the records it takes (each event id once, from its newest record) and its summary.
// It keeps the events taken from objects while they fit in the replay window, unless the
// replay is a dry run; the replay reads the other objects again.
func (r *Router) selectReplay(ctx context.Context, topic, name string, opts ReplayOptions, progress func(done, total int)) (*replaySource, *ReplaySummary, error) {
	t, spec, prefix, err := r.deadLetterSource(topic, name)
	if err != nil {
		return nil, nil, err
	}
	// Newest object first, so an event dead-lettered again after an earlier replay is taken
	// from its latest object (objects written at the same instant stay in key order). The
	// walk holds a page of the listing and an hour's objects, not the listing (dlWalk).
	walk, err := r.walkDeadLetters(ctx, t.name, spec.DeadLetterDestination.Properties.BlobContainerName, prefix,
		DeadLetterQuery{Since: opts.Since, Until: opts.Until}, true)
	if err != nil {
		return nil, nil, deadLettersUnavailable(name, err)
	}
	src := &replaySource{
		store: r.dead.store, bucket: spec.DeadLetterDestination.Properties.BlobContainerName,
		topicID: t.id, schema: t.load().schema, limit: r.dead.actorCfg.ReadLimit(),
	}
	sum := &ReplaySummary{DryRun: opts.DryRun}
	// The ids taken, as digests: a fixed few tens of bytes an event, however long its id.
	seen := map[[16]byte]struct{}{}
	kept := 0
	i := 0
	for o, err := range walk.all(ctx) {
		if err != nil {
			return nil, nil, deadLettersUnavailable(name, err)
		}
		if progress != nil {
			progress(i, walk.total)
		}
		i++
		obj, err := r.readDeadLetterObject(ctx, t, src.bucket, o.Key)
		if err != nil {
			return nil, nil, fmt.Errorf("reading the dead letters of %q: %w", name, err)
		}
		if obj.ours {
			sum.Objects++
		}
		if obj.problem != "" {
			listProblem(&sum.Problems, &sum.UnlistedProblems, obj.problem)
		}
		part := replayPart{key: o.Key, etag: obj.info.ETag, written: o.LastModified}
		var events []*schemas.Event
		size := 0
		for j, rec := range obj.recs {
			sum.Found++
			id := idDigest(rec.Event.ID)
			if _, dup := seen[id]; dup || (opts.Reason != "" && rec.Reason != opts.Reason) {
				sum.Skipped++
				continue
			}
			seen[id] = struct{}{}
			part.recs = append(part.recs, int32(j))
			if len(sum.Events) < maxListedReplayEvents {
				sum.Events = append(sum.Events, ReplayedEvent{ID: rec.Event.ID, Reason: rec.Reason, Object: o.Key})
			} else {
				sum.Unlisted++
			}
			events = append(events, rec.Event)
			size += rec.Event.Size()
		}
		if len(part.recs) == 0 {
			continue
		}
		sum.Replayed += len(part.recs)
		if !opts.DryRun && kept+size <= r.dead.replayWindow {
			part.events, kept = events, kept+size
		}
		src.parts = append(src.parts, part)
	}
	if progress != nil {
		progress(walk.total, walk.total)
	}
	return src, sum, nil
}

// idDigest is the digest a replay's selection keeps of an event id.
func idDigest(id string) [16]byte {
	sum := sha256.Sum256([]byte(id))
	return [16]byte(sum[:16])
}

func (r *Router) replayRunning(key string) bool {
	r.dead.mu.Lock()
	defer r.dead.mu.Unlock()
	_, ok := r.dead.replays[key]
	return ok
}

// runReplay spawns the replay actor and, with opts.Wait, waits for it.
//
// The lookup of the subscription and the registration of the replay happen in the topic's
// admin turn (turns.go), as a delete or replacement of the subscription does: an operation
// that stops the subscription's replays then either finds this one registered and stops it,
// or has removed the subscription before this lookup, which answers not found. Without the
// turn, a replay looked up just before a delete could register just after the delete had
// stopped the replays, and deliver to the endpoint of a subscription that no longer exists.
//
// [Router.Close] takes no turn: it refuses a replay's registration from the moment it takes
// the replays to stop (deadLetterRuntime.closed, under the same lock), so a replay that
// looked its subscription up before the router closed either is among those it stops or
// fails with [ErrClosed]. Without that, one registered just after would be spawned into an
// actor system nothing stops any more, delivering after Close returned.
func (r *Router) runReplay(ctx context.Context, topic, name string, src *replaySource, opts ReplayOptions, sum *ReplaySummary) (*ReplaySummary, error) {
	key := replayKey(topic, name)
	release, err := r.turns.acquire(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("starting the replay of event subscription %q: %w", name, err)
	}
	run, err := r.startReplay(key, topic, name, src, sum.Replayed)
	release()
	if err != nil {
		return nil, err
	}
	if !opts.Wait {
		return sum, nil
	}
	total := sum.Replayed
	report := func() {
		if opts.Progress != nil {
			opts.Progress(ReplayProgress{Stage: ReplayDelivering, Done: int(run.settled.Load()), Total: total})
		}
	}
	report()
	for {
		select {
		case <-run.notify:
			report()
		case res := <-run.done:
			sum.Delivered, sum.DeadLettered, sum.Dropped, sum.Unread = res.Delivered, res.DeadLettered, res.Dropped, res.Unread
			src.report(sum)
			sum.Completed = !res.Stopped
			report()
			return sum, nil
		case <-ctx.Done():
			return sum, nil // the replay goes on
		}
	}
}

// runningReplay is what runReplay watches of a replay it started.
type runningReplay struct {
	settled atomic.Int64  // events settled so far
	notify  chan struct{} // a token when settled changed
	done    chan deadletter.ReplayResult
}

// startReplay looks up the subscription, spawns its replay actor and registers it under key.
// Called in the topic's turn.
func (r *Router) startReplay(key, topic, name string, src *replaySource, events int) (*runningReplay, error) {
	r.mu.RLock()
	t, spec, display, err := r.lookupLocked(topic, name)
	closed := r.closed
	r.mu.RUnlock()
	if err != nil || closed {
		return nil, fmt.Errorf("event subscription %q of topic %q: %w", name, topic, ErrSubscriptionNotFound)
	}
	name = display
	if r.dead.replayLookedUp != nil {
		r.dead.replayLookedUp()
	}
	if spec.IsQueue() {
		// The replay actor delivers by push; putting events back into a queue is not built.
		return nil, fmt.Errorf("event subscription %q of topic %q is a queue subscription: replaying dead letters into a queue is not supported; publish the events again instead (--dry-run lists them)", name, topic)
	}
	sc, err := r.subscriptionConfig(t, name, spec)
	if err != nil {
		return nil, err
	}
	var (
		run      = &runningReplay{notify: make(chan struct{}, 1), done: make(chan deadletter.ReplayResult, 1)}
		d        = r.dead
		started  = make(chan struct{})
		spawnErr error
	)
	props := deadletter.ReplayProps(&deadletter.ReplayConfig{
		Subscription: sc, Parts: src.counts(), Read: src.read, Window: d.replayWindow, PublishTime: r.deps.Now(),
		OnProgress: func(settled, _ int) {
			run.settled.Store(int64(settled))
			select {
			case run.notify <- struct{}{}:
			default:
			}
		},
		// OnDone runs in the replay actor's Receive: what may wait (for the spawn below to
		// have registered the replay, for the lock) runs off its mailbox.
		OnDone: func(res deadletter.ReplayResult) {
			go func() {
				<-started
				d.mu.Lock()
				delete(d.replays, key)
				d.mu.Unlock()
				run.done <- res
			}()
		},
	})
	d.mu.Lock()
	_, running := d.replays[key]
	switch {
	case d.closed:
		spawnErr = fmt.Errorf("starting the replay of event subscription %q of topic %q: %w", name, topic, ErrClosed)
	case running:
		spawnErr = fmt.Errorf("event subscription %q of topic %q: %w; wait for it to finish", name, topic, ErrReplayRunning)
	default:
		d.replays[key] = r.system.Root.Spawn(props)
	}
	d.mu.Unlock()
	close(started)
	if spawnErr != nil {
		return nil, spawnErr
	}
	r.log.Info("dead-letter replay started", logattr.Topic, t.name, logattr.Subscription, name, "events", events, "objects", len(src.parts))
	return run, nil
}

// replayKey names a subscription's replay in deadLetterRuntime.replays.
func replayKey(topic, name string) string { return fold(topic) + "/" + fold(name) }

// stopReplays stops the replays of a subscription (all of a topic's when name is empty).
func (r *Router) stopReplays(topic, name string) {
	d := r.dead
	if d == nil {
		return
	}
	d.mu.Lock()
	var pids []*actor.PID
	for k, pid := range d.replays {
		if k == replayKey(topic, name) || (name == "" && strings.HasPrefix(k, fold(topic)+"/")) {
			pids = append(pids, pid)
		}
	}
	d.mu.Unlock()
	for _, pid := range pids {
		_ = r.system.Root.StopFuture(pid).Wait()
	}
}

// stopReplaysForDelete stops the replays of a subscription (all of a topic's when name is
// empty) about to be deleted, and writes out the delivery histories reported so far. A
// replay's attempts carry no epoch (deadletter.ReplayProps), so a replay's history written
// after the delete — of one stopped here, or of one that ended by itself with its history
// still queued — could show up under a subscription created again under the name; written
// before, the delete removes it. Without a dead-letter store there are no replays.
func (r *Router) stopReplaysForDelete(ctx context.Context, topic, name string) {
	if r.dead == nil {
		return
	}
	r.stopReplays(topic, name)
	_ = r.history.flush(ctx) // ends early only with ctx: histories are advisory
}

// CanReplay reports why a replay of a subscription's dead letters cannot start now, with the
// error [Router.ReplayDeadLetters] would return (nil: it can). A dry run needs only the
// subscription and its dead-letter destination; a replay also needs no other to be running.
func (r *Router) CanReplay(topic, name string, dryRun bool) error {
	if _, _, _, err := r.deadLetterSource(topic, name); err != nil {
		return err
	}
	if !dryRun && r.replayRunning(replayKey(topic, name)) {
		return fmt.Errorf("event subscription %q of topic %q: %w; wait for it to finish", name, topic, ErrReplayRunning)
	}
	return nil
}
