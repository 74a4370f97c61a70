package router

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/schemas"
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
	// Completed is set when every replayed event settled before the call returned.
	Completed bool `json:"completed"`
	// Events lists the replayed events.
	Events []ReplayedEvent `json:"events,omitempty"`
	// Problems lists the objects that could not be read or decoded.
	Problems []string `json:"problems,omitempty"`
}

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
	read, err := r.readDeadLetters(ctx, topic, name, DeadLetterQuery{Since: opts.Since, Until: opts.Until}, progress)
	if err != nil {
		return nil, err
	}
	sum := &ReplaySummary{DryRun: opts.DryRun, Objects: read.Objects, Found: len(read.Entries), Problems: read.Problems}
	// Newest record first, so an event dead-lettered again after an earlier replay is taken
	// from its latest object.
	entries := slices.Clone(read.Entries)
	slices.SortStableFunc(entries, func(a, b DeadLetterEntry) int { return b.Written.Compare(a.Written) })
	seen := map[string]bool{}
	var events []*schemas.Event
	for _, e := range entries {
		if (opts.Reason != "" && e.Reason != opts.Reason) || seen[e.Event.ID] {
			sum.Skipped++
			continue
		}
		seen[e.Event.ID] = true
		events = append(events, e.Event)
		sum.Events = append(sum.Events, ReplayedEvent{ID: e.Event.ID, Reason: e.Reason, Object: e.Object})
	}
	sum.Replayed = len(events)
	if opts.DryRun || len(events) == 0 {
		sum.Completed = !opts.DryRun
		return sum, nil
	}
	return r.runReplay(ctx, topic, name, events, opts, sum)
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
func (r *Router) runReplay(ctx context.Context, topic, name string, events []*schemas.Event, opts ReplayOptions, sum *ReplaySummary) (*ReplaySummary, error) {
	key := replayKey(topic, name)
	release, err := r.turns.acquire(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("starting the replay of event subscription %q: %w", name, err)
	}
	run, err := r.startReplay(key, topic, name, events)
	release()
	if err != nil {
		return nil, err
	}
	if !opts.Wait {
		return sum, nil
	}
	total := len(events)
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
			sum.Delivered, sum.DeadLettered, sum.Dropped = res.Delivered, res.DeadLettered, res.Dropped
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
func (r *Router) startReplay(key, topic, name string, events []*schemas.Event) (*runningReplay, error) {
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
		Subscription: sc, Events: events, PublishTime: r.deps.Now(),
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
	if _, running := d.replays[key]; running {
		spawnErr = fmt.Errorf("event subscription %q of topic %q: %w; wait for it to finish", name, topic, ErrReplayRunning)
	} else {
		d.replays[key] = r.system.Root.Spawn(props)
	}
	d.mu.Unlock()
	close(started)
	if spawnErr != nil {
		return nil, spawnErr
	}
	r.log.Info("dead-letter replay started", logattr.Topic, t.name, logattr.Subscription, name, "events", len(events))
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
