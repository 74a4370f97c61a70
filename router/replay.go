package router

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"iter"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/schemas/clip"
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
	// DedupLimited is set when the replay took more events than [MaxReplayIDs]: it took each
	// id once as far as the newest MaxReplayIDs reach, and older records of ids taken past
	// them may have been replayed as well (receivers deduplicate by event id).
	DedupLimited bool `json:"dedupLimited,omitempty"`
	// Unread counts the replayed events that were not found when the replay read their
	// objects again (with Wait; Problems says why): replay again to take them. Once the store
	// failed a read through every retry, the replay reads no further objects and counts their
	// events here too.
	Unread int `json:"unread,omitempty"`
	// UnreadObjects counts the objects selected (listed) that the selection never read: the
	// store failed a read or a listing through every retry, and the selection read no further
	// objects. Their events are not counted anywhere else (they were never read).
	UnreadObjects int `json:"unreadObjects,omitempty"`
	// Incomplete is set when the replay did not take everything it selected: objects it never
	// read (UnreadObjects) or events it did not find again (Unread). IncompleteReason says why
	// and how to take the rest (also the last of Problems). Completed is then false.
	Incomplete       bool   `json:"incomplete,omitempty"`
	IncompleteReason string `json:"incompleteReason,omitempty"`
	// Completed is set when every event selected was replayed and settled before the call
	// returned: never when Incomplete.
	Completed bool `json:"completed"`
	// Events lists the replayed events, newest object first: at most the first 10 000
	// ([MaxListedReplayEvents]), so a summary stays small however many events a replay takes.
	Events []ReplayedEvent `json:"events,omitempty"`
	// Unlisted counts the replayed events left out of Events.
	Unlisted int `json:"unlisted,omitempty"`
	// Problems lists the objects that could not be read or decoded, and the records that
	// could not be decoded (their objects' other records are replayed): at most the first 100
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
// Its memory does not grow with the objects or events selected. The selection walks the
// objects newest first, reading one at a time, and counts what it takes, remembering the ids
// taken (up to [MaxReplayIDs]) and the events of the newest objects while they fit in the
// replay window of 64 MiB ([deadletter.DefaultReplayWindow]); the replay then walks the objects
// again, taking the same records, and reads each other object when it comes to it, once the
// events of newer objects it still holds are under the window: an object's events wait for
// those of newer objects that keep failing until they end. Events of an object changed or
// gone by then are counted in Unread. A dry run keeps no events.
func (r *Router) ReplayDeadLetters(ctx context.Context, topic, name string, opts ReplayOptions) (*ReplaySummary, error) {
	key := replayKey(topic, name)
	if _, _, _, err := r.deadLetterSource(topic, name); err != nil {
		return nil, err
	}
	if err := (DeadLetterQuery{Since: opts.Since, Until: opts.Until}).Check(); err != nil {
		return nil, err
	}
	if spec, err := r.Subscription(topic, name); err == nil && spec.IsQueue() && !opts.DryRun {
		return nil, replayIntoQueue(topic, name) // before reading any object
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
		sum.Completed = !opts.DryRun && !sum.Incomplete
		return sum, nil
	}
	return r.runReplay(ctx, topic, name, src, opts, sum)
}

// MaxReplayIDs bounds the event ids a replay remembers to take each id once (as 16-byte
// digests, some 40 bytes an id: about 40 MB at most). A replay that takes more events than
// that remembers the ids of the newest MaxReplayIDs it took, and says so
// ([ReplaySummary.DedupLimited]): an older record of an id taken after that point, an event
// dead-lettered again after an earlier replay whose newer record is that far back in the
// walk, is replayed too (receivers deduplicate by event id).
const MaxReplayIDs = 1 << 20

// maxReplayIDs is MaxReplayIDs; tests set it lower.
var maxReplayIDs = MaxReplayIDs

// replayIDs is the set of event ids a replay took, newest object first, as digests: at most
// maxReplayIDs of them, the first taken.
type replayIDs struct {
	m map[[16]byte]struct{}
	// full is set once an id taken was not remembered.
	full bool
}

func newReplayIDs() *replayIDs { return &replayIDs{m: map[[16]byte]struct{}{}} }

// take says whether the replay takes the event id: not when it took it already (from a newer
// record). It remembers id while it holds fewer than maxReplayIDs.
func (s *replayIDs) take(id string) bool {
	d := idDigest(id)
	if _, dup := s.m[d]; dup {
		return false
	}
	if len(s.m) < maxReplayIDs {
		s.m[d] = struct{}{}
	} else {
		s.full = true
	}
	return true
}

// replaySource is what a replay re-delivers: the events it takes of each object, newest object
// first, one part of the replay actor's each ([deadletter.ReplayConfig.Read]). It holds no
// list of the objects or events selected: it walks the subscription's objects again as the
// replay actor asks for them, taking the records the selection took (the same walk and the
// same rules: each id once, from its newest record, and the query's reason), and hands out
// the events of the newest objects the selection kept (while they fit in the replay window)
// without reading them again.
type replaySource struct {
	store         sinks.ObjectStore
	bucket, topic string
	topicID       string
	schema        schemas.Schema
	limit         int64
	reason        schemas.Reason
	walk          *dlWalk
	until         time.Time // the selection's Until (zero: none)

	// kept are the events the selection kept of the newest objects it took records of, in
	// walk order: the first pass hands them out instead of reading the objects again (it
	// takes them under mu).
	kept []replayPart
	// held, when set, is called as a pass ends with the most event ids it remembered (tests).
	held func(ids int)

	mu sync.Mutex // guards kept and what follows; held for no I/O
	// The pass under way, owned by the read call under way ([replaySource.read]): the
	// replay actor calls read one part at a time, and the next reader of the source (the
	// restarted actor) asks for part 0 only once the calls of the one before have returned
	// ([deadletter.ReplayStops]). A call that ignored its context past the actor's 5 s is
	// abandoned, though, and may still be running then: so a call takes the pass out of the
	// source (under mu), reads with no lock held, and puts it back as it returns unless a
	// newer pass was opened meanwhile or the replay ended: it then closes it. Two calls never
	// share a pass, and no lock is held across the store's listings, reads or retry waits.
	cur    *replayPass // nil while a call has it out, or before the first pass
	opened uint64      // the passes opened: the latest is the one a call puts back
	ended  bool        // the replay ended: no pass is put back or opened

	problems []string // of the objects that could not be read again (the first few)
	unlisted int      // and how many more
	// failed says how the store failed a listing or a read through all of
	// replayReadBackoff: the replay read no more objects.
	failed string
	dedup  bool // a pass remembered fewer ids than it took

	// short is set when the selection stopped short of the objects it listed (the store
	// failed): a pass takes no object after last (nil: none), the last the selection read.
	// keptAll: the selection kept the events of every object it took records of, so the first
	// pass hands them out and walks no further. Set before the replay starts.
	short   bool
	last    *sinks.ObjectInfo
	keptAll bool
}

// replayPass is one pass of a replay over its source: what read carries from one part to
// the next. It belongs to one read call at a time (see replaySource.cur).
type replayPass struct {
	ids   *replayIDs
	parts []replayPart // kept parts still to hand out
	next  func() (sinks.ObjectInfo, error, bool)
	stop  func()
	past  *sinks.ObjectInfo // the last object of the walk taken or looked at
	// noWalk: the pass hands out its kept parts and ends (replaySource.keptAll).
	noWalk bool
}

// replayPart is the events a replay's selection kept of one object.
type replayPart struct {
	info   sinks.ObjectInfo
	events []*schemas.Event
}

// replayReadBackoff is the wait before each new try of an object read (or listing) that
// failed while a replay goes on; after the last, the replay reads no further objects.
var replayReadBackoff = []time.Duration{time.Second, 10 * time.Second, time.Minute}

// read returns the events of part i, the next object of the walk with records to take (part 0
// starts the walk again, after a restart of the replay actor too), or io.EOF after the last.
// A store that cannot be reached is tried again after each of replayReadBackoff; once it has
// failed through all of them, the replay reads no more objects: read answers io.EOF, and
// [replaySource.report] says how to take the rest.
func (s *replaySource) read(ctx context.Context, i int) ([]*schemas.Event, error) {
	p, id := s.checkout(ctx, i)
	if p == nil {
		return nil, io.EOF // the replay ended (or no pass was opened)
	}
	defer s.checkin(p, id)
	if len(p.parts) > 0 {
		kept := p.parts[0]
		p.parts[0] = replayPart{}
		p.parts = p.parts[1:]
		for _, ev := range kept.events {
			p.ids.take(ev.ID)
		}
		p.past = &kept.info
		return kept.events, nil
	}
	if p.next == nil || p.noWalk {
		s.closePass(p)
		return nil, io.EOF
	}
	for try := 0; ; {
		o, err, ok := p.next()
		if !ok {
			s.closePass(p)
			return nil, io.EOF
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if !s.retry(ctx, &try) {
				until := s.until
				if p.past != nil {
					until = p.past.LastModified.Add(time.Nanosecond)
				}
				s.fail(p, fmt.Sprintf("listing the dead letters again: %v", err), until)
				return nil, io.EOF
			}
			p.restart(ctx, s.walk) // from the top, past the objects already taken
			continue
		}
		if p.past != nil && !walkedPast(o, *p.past) {
			continue
		}
		if s.short && (s.last == nil || walkedPast(o, *s.last)) { // the selection read no further
			s.closePass(p)
			return nil, io.EOF
		}
		events, unavailable, err := s.take(ctx, p, o)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if unavailable {
				s.fail(p, fmt.Sprintf("%s: not replayed: %v", o.Key, err), o.LastModified.Add(time.Nanosecond))
				return nil, io.EOF
			}
			s.problem(fmt.Sprintf("%s: not replayed: %v; replay again to take its events", o.Key, err))
		}
		p.past = &o
		if len(events) > 0 {
			return events, nil
		}
	}
}

// checkout hands the call reading part i the pass it reads, and the pass's number: for part
// 0 a new pass (the kept parts first, only on the first pass: a restarted replay reads them
// again; then the walk past them), closing the one before if it was put back; else the pass
// under way, taken out of the source. nil: the replay ended.
func (s *replaySource) checkout(ctx context.Context, i int) (*replayPass, uint64) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return nil, 0
	}
	p := s.cur
	s.cur = nil
	if i > 0 {
		id := s.opened
		s.mu.Unlock()
		return p, id
	}
	s.opened++
	id, kept := s.opened, s.kept
	s.kept = nil
	s.mu.Unlock()
	if p != nil {
		s.closePass(p)
	}
	p = &replayPass{ids: newReplayIDs(), parts: kept, noWalk: kept != nil && s.short && s.keptAll}
	if !p.noWalk {
		p.restart(ctx, s.walk)
	}
	return p, id
}

// checkin puts pass id back for the next part, or closes it: the replay ended, or a newer
// pass was opened (this call ran past its reader's stop and was abandoned).
func (s *replaySource) checkin(p *replayPass, id uint64) {
	s.mu.Lock()
	if id == s.opened && !s.ended {
		s.cur = p
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.closePass(p)
}

// walkedPast says whether a newest-first walk comes to o after p (objects written at one
// instant in key order).
func walkedPast(o, p sinks.ObjectInfo) bool {
	c := o.LastModified.Compare(p.LastModified)
	return c < 0 || (c == 0 && o.Key > p.Key)
}

// restart walks the objects again from the newest; read skips those up to p.past.
func (p *replayPass) restart(ctx context.Context, walk *dlWalk) {
	if p.stop != nil {
		p.stop()
	}
	p.next, p.stop = iter.Pull2(walk.all(ctx))
}

// end ends the pass under way, if any, once the replay has ended: at once when no read call
// has it out, else as that call returns.
func (s *replaySource) end() {
	s.mu.Lock()
	s.ended = true
	p := s.cur
	s.cur = nil
	s.mu.Unlock()
	if p != nil {
		s.closePass(p)
	}
}

// closePass ends pass p: its walk, and what it remembered. Called by its owner.
func (s *replaySource) closePass(p *replayPass) {
	if p.stop != nil {
		p.stop()
		p.next, p.stop = nil, nil
	}
	if p.ids != nil {
		s.mu.Lock()
		s.dedup = s.dedup || p.ids.full
		s.mu.Unlock()
		if s.held != nil {
			s.held(len(p.ids.m))
		}
		p.ids = nil
	}
}

// retry waits the next of replayReadBackoff and says whether to try again.
func (s *replaySource) retry(ctx context.Context, try *int) bool {
	if *try == len(replayReadBackoff) {
		return false
	}
	select {
	case <-time.After(replayReadBackoff[*try]):
	case <-ctx.Done():
	}
	*try++
	return ctx.Err() == nil
}

// take reads object o again and returns the events the replay takes of it. unavailable says
// the store failed through every retry (rather than the object being gone, too large or not
// decodable).
func (s *replaySource) take(ctx context.Context, p *replayPass, o sinks.ObjectInfo) (events []*schemas.Event, unavailable bool, err error) {
	var body []byte
	var info sinks.ObjectInfo
	for try := 0; ; {
		body, info, err = s.store.Get(ctx, s.bucket, o.Key, s.limit)
		if err == nil || ctx.Err() != nil ||
			errors.Is(err, sinks.ErrObjectNotFound) || errors.Is(err, sinks.ErrBucketNotFound) || errors.Is(err, sinks.ErrObjectTooLarge) {
			break
		}
		if !s.retry(ctx, &try) {
			return nil, true, fmt.Errorf("reading the object again: %w", err)
		}
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading the object again: %w", err)
	}
	if !deadletter.BelongsTo(info, s.topic) {
		return nil, false, nil
	}
	// The records that cannot be decoded were reported by the selection.
	recs, _, err := schemas.DecodeDeadLetterRecords(body, s.schema, s.topicID)
	if err != nil {
		return nil, false, fmt.Errorf("decoding the object again: %w", err)
	}
	for _, rec := range recs {
		if (s.reason == "" || rec.Reason == s.reason) && p.ids.take(rec.Event.ID) {
			events = append(events, rec.Event)
		}
	}
	return events, false, nil
}

func (s *replaySource) problem(p string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	listProblem(&s.problems, &s.unlisted, p)
}

// fail ends pass p: the store failed through every retry. A replay until until takes what
// is left.
func (s *replaySource) fail(p *replayPass, why string, until time.Time) {
	s.closePass(p)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failed = why + "; the replay read no further objects: once the dead-letter store answers, replay again"
	if !until.IsZero() {
		s.failed += " with --until " + until.UTC().Format(time.RFC3339Nano)
	}
	s.failed += " to take what is left"
}

// report adds the problems of the replay's passes to sum, whose Unread counts the events
// selected that were not replayed.
func (s *replaySource) report(sum *ReplaySummary) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.problems {
		listProblem(&sum.Problems, &sum.UnlistedProblems, p)
	}
	sum.UnlistedProblems += s.unlisted
	sum.DedupLimited = sum.DedupLimited || s.dedup
	switch {
	case sum.Incomplete: // the selection stopped short: its reason is listed already, and the pass read no further
	case s.failed != "": // listed however many problems there are: it says how to take the rest
		sum.Problems = append(sum.Problems, s.failed)
		sum.Incomplete, sum.IncompleteReason = true, fmt.Sprintf("%d events selected were not replayed: %s", sum.Unread, s.failed)
	case sum.Unread > 0:
		why := fmt.Sprintf("%d events selected were not found when the replay read their objects again "+
			"(objects changed or removed since the selection); replay again to take what is there now", sum.Unread)
		sum.Problems = append(sum.Problems, why)
		sum.Incomplete, sum.IncompleteReason = true, why
	}
}

// stopShort records in sum that the selection read no further objects than those before
// walked (the objects of the walk it did not read: total in all, walked so far): the store
// failed as why says. The replay takes only what the selection read: its passes stop after
// the last object read (last; nil: none).
func (s *replaySource) stopShort(sum *ReplaySummary, why string, last *sinks.ObjectInfo, until time.Time, total, walked int) {
	s.short, s.last = true, last
	sum.UnreadObjects = max(total-walked, 1)
	why = fmt.Sprintf("%s; the selection read no further objects: %d objects selected were not read, and their events not replayed; "+
		"once the dead-letter store answers, replay again", why, sum.UnreadObjects)
	if !until.IsZero() {
		why += " with --until " + until.UTC().Format(time.RFC3339Nano)
	}
	why += " to take them"
	sum.Problems = append(sum.Problems, why) // listed however many problems there are
	sum.Incomplete, sum.IncompleteReason = true, why
}

// selectReplay reads the objects a replay selects, one at a time and newest first, and
// counts the records it takes (each event id once, from its newest record, as far as
// [MaxReplayIDs] reaches): it holds the walk, one object and the ids taken, not the list of
// what it selected. Unless the replay is a dry run, it keeps the events of the newest objects
// while they fit in the replay window, and returns the source the replay reads the rest from
// by walking the objects again.
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
		store: r.dead.store, bucket: spec.DeadLetterDestination.Properties.BlobContainerName, topic: t.name,
		topicID: t.id, schema: t.load().schema, limit: r.dead.actorCfg.ReadLimit(), reason: opts.Reason,
		walk: walk, until: opts.Until, held: r.dead.replayHeld,
	}
	sum := &ReplaySummary{DryRun: opts.DryRun}
	ids := newReplayIDs()
	kept, keeping := 0, !opts.DryRun
	i := 0
	// A store that fails a listing or a read is tried again after each of replayReadBackoff,
	// as a pass does; once it has failed through all of them, the selection reads no further
	// objects and the replay takes only those read: its summary says so (stopShort).
	next, stop := iter.Pull2(walk.all(ctx))
	defer func() { stop() }()
	var last *sinks.ObjectInfo // the last object read
	listTry := 0
	for {
		o, err, ok := next()
		if !ok {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil, deadLettersUnavailable(name, err)
			}
			if src.retry(ctx, &listTry) {
				stop()
				next, stop = iter.Pull2(walk.all(ctx)) // from the top, past the objects read
				continue
			}
			if ctx.Err() != nil {
				return nil, nil, deadLettersUnavailable(name, ctx.Err())
			}
			until := opts.Until
			if last != nil {
				until = last.LastModified.Add(time.Nanosecond)
			}
			src.stopShort(sum, fmt.Sprintf("listing the dead letters: %v", err), last, until, walk.total, i)
			break
		}
		if last != nil && !walkedPast(o, *last) {
			continue // read before the listing was tried again
		}
		if progress != nil {
			progress(i, walk.total)
		}
		obj, err := r.readDeadLetterObject(ctx, t, src.bucket, o.Key)
		for try := 0; err == nil && obj.unavailable != nil; {
			if !src.retry(ctx, &try) {
				if ctx.Err() != nil {
					err = ctx.Err()
				}
				break
			}
			obj, err = r.readDeadLetterObject(ctx, t, src.bucket, o.Key)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("reading the dead letters of %q: %w", name, err)
		}
		if obj.unavailable != nil {
			src.stopShort(sum, fmt.Sprintf("%s: not read: %v", o.Key, obj.unavailable), last, o.LastModified.Add(time.Nanosecond), walk.total, i)
			break
		}
		i++
		last = &o
		if obj.ours {
			sum.Objects++
		}
		for _, p := range obj.problems {
			listProblem(&sum.Problems, &sum.UnlistedProblems, p)
		}
		var events []*schemas.Event
		size := 0
		for _, rec := range obj.recs {
			sum.Found++
			if (opts.Reason != "" && rec.Reason != opts.Reason) || !ids.take(rec.Event.ID) {
				sum.Skipped++
				continue
			}
			if len(sum.Events) < maxListedReplayEvents {
				sum.Events = append(sum.Events, ReplayedEvent{ID: rec.Event.ID, Reason: rec.Reason, Object: o.Key})
			} else {
				sum.Unlisted++
			}
			events = append(events, rec.Event)
			size += rec.Event.Size()
		}
		sum.Replayed += len(events)
		if len(events) == 0 {
			continue
		}
		// The newest objects' events, while they fit: a replay of a few objects reads them
		// once. Only a run of the newest: the replay's walk takes up after the last kept.
		if keeping = keeping && kept+size <= r.dead.replayWindow; keeping {
			src.kept, kept = append(src.kept, replayPart{info: o, events: events}), kept+size
		}
	}
	if progress != nil && !src.short {
		progress(walk.total, walk.total)
	}
	src.keptAll = keeping
	sum.DedupLimited = ids.full
	if r.dead.replayHeld != nil {
		r.dead.replayHeld(len(ids.m))
	}
	return src, sum, nil
}

// idDigest is the digest a replay keeps of an event id.
func idDigest(id string) [16]byte {
	sum := sha256.Sum256([]byte(id))
	return [16]byte(sum[:16])
}

// runningReplays returns the replays running, by topic and subscription.
func (r *Router) runningReplays() []ReplayStatus {
	d := r.dead
	d.mu.Lock()
	out := make([]ReplayStatus, 0, len(d.runs))
	for _, run := range d.runs {
		out = append(out, ReplayStatus{Topic: run.topic, Subscription: run.name, Started: run.started, Events: run.events, Settled: int(run.settled.Load())})
	}
	d.mu.Unlock()
	slices.SortFunc(out, func(a, b ReplayStatus) int {
		return cmp.Or(strings.Compare(fold(a.Topic), fold(b.Topic)), strings.Compare(fold(a.Subscription), fold(b.Subscription)))
	})
	return out
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
			sum.Completed = !res.Stopped && !sum.Incomplete
			report()
			return sum, nil
		case <-ctx.Done():
			return sum, nil // the replay goes on
		}
	}
}

// runningReplay is what runReplay watches of a replay it started, and what
// [Router.DeadLetterStatus] shows of it.
type runningReplay struct {
	topic, name string
	started     time.Time
	events      int
	settled     atomic.Int64  // events settled so far
	notify      chan struct{} // a token when settled changed
	done        chan deadletter.ReplayResult
}

// startReplay looks up the subscription, spawns its replay actor and registers it under key.
// Called in the topic's turn.
func (r *Router) startReplay(key, topic, name string, src *replaySource, events int) (*runningReplay, error) {
	r.mu.RLock()
	t, spec, display, err := r.lookupLocked(topic, name)
	closed := r.closed
	r.mu.RUnlock()
	if err != nil || closed {
		return nil, fmt.Errorf("event subscription %q of topic %q: %w", clip.String(name), clip.String(topic), ErrSubscriptionNotFound)
	}
	name = display
	if r.dead.replayLookedUp != nil {
		r.dead.replayLookedUp()
	}
	if spec.IsQueue() { // made a queue subscription while the replay read its objects
		return nil, replayIntoQueue(topic, name)
	}
	sc, err := r.subscriptionConfig(t, name, spec)
	if err != nil {
		return nil, err
	}
	var (
		run      = &runningReplay{topic: t.name, name: name, started: r.deps.Now(), events: events, notify: make(chan struct{}, 1), done: make(chan deadletter.ReplayResult, 1)}
		d        = r.dead
		started  = make(chan struct{})
		spawnErr error
	)
	props := deadletter.ReplayProps(&deadletter.ReplayConfig{
		Subscription: sc, Total: events, Read: src.read, Window: d.replayWindow, PublishTime: r.deps.Now(),
		Stops: &d.replayStops, StopKey: key,
		OnProgress: func(settled, _ int) {
			run.settled.Store(int64(settled))
			select {
			case run.notify <- struct{}{}:
			default:
			}
		},
		// OnDone runs in the replay actor's Receive: what may wait (for the spawn below to
		// have registered the replay, for the lock) runs off its mailbox. A stopped replay's
		// last read may still run: src.end leaves its pass to it, and a new replay of the
		// subscription reads after it (d.replayStops).
		OnDone: func(res deadletter.ReplayResult) {
			go func() {
				<-started
				src.end()
				d.mu.Lock()
				delete(d.replays, key)
				delete(d.runs, key)
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
		d.runs[key] = run
	}
	d.mu.Unlock()
	close(started)
	if spawnErr != nil {
		return nil, spawnErr
	}
	r.log.Info("dead-letter replay started", logattr.Topic, t.name, logattr.Subscription, name, "events", events)
	return run, nil
}

// replayKey names a subscription's replay in deadLetterRuntime.replays.
func replayKey(topic, name string) string { return fold(topic) + "/" + fold(name) }

// stopReplays stops the replays of a subscription (all of a topic's when name is empty), and
// returns once they have stopped reading objects and their subscription actors have written
// their last state.
func (r *Router) stopReplays(topic, name string) {
	d := r.dead
	if d == nil {
		return
	}
	d.mu.Lock()
	var pids []*actor.PID
	var keys []string
	for k, pid := range d.replays {
		if k == replayKey(topic, name) || (name == "" && strings.HasPrefix(k, fold(topic)+"/")) {
			pids = append(pids, pid)
			keys = append(keys, k)
		}
	}
	d.mu.Unlock()
	for _, pid := range pids {
		r.stopActor(pid, "a dead-letter replay") // its subscription actor's stop work has begun then
	}
	for _, k := range keys {
		// A stopped replay waits for its object read under way off its mailbox: at most 5 s.
		_ = d.replayStops.WaitKey(context.Background(), k)
	}
	if len(pids) > 0 {
		// A replay's subscription actor writes its last state (and hands its dead letters to
		// the dead-letter actor) off its mailbox once it has terminated: bounded by its stop
		// grace.
		_ = r.stops.WaitTopic(context.Background(), topic)
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

// replayIntoQueue is the error of a replay into queue subscription name: the replay actor
// delivers by push, and putting events back into a queue is not built.
func replayIntoQueue(topic, name string) error {
	return fmt.Errorf("event subscription %q of topic %q is a queue subscription: %w; publish the events again instead (a dry run lists them)", clip.String(name), clip.String(topic), ErrReplayIntoQueue)
}

// CanReplay reports why a replay of a subscription's dead letters cannot start now, with the
// error [Router.ReplayDeadLetters] would return (nil: it can). A dry run needs only the
// subscription and its dead-letter destination; a replay also needs no other to be running.
func (r *Router) CanReplay(topic, name string, dryRun bool) error {
	if _, _, _, err := r.deadLetterSource(topic, name); err != nil {
		return err
	}
	if spec, err := r.Subscription(topic, name); err == nil && spec.IsQueue() && !dryRun {
		return replayIntoQueue(topic, name)
	}
	if !dryRun && r.replayRunning(replayKey(topic, name)) {
		return fmt.Errorf("event subscription %q of topic %q: %w; wait for it to finish", name, topic, ErrReplayRunning)
	}
	return nil
}
