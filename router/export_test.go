package router

import "time"

// Trimming constants, for the black-box tests of journal trimming.
const (
	TrimStep    = trimStep
	TrimIdleMax = trimIdleMax
)

// OnReplayLookedUp makes r call hook in every replay's start, between looking up its
// subscription and registering the replay. Set it before the router's first replay.
func OnReplayLookedUp(r *Router, hook func()) { r.dead.replayLookedUp = hook }

// SetReplayWindow sets the bytes of events a replay of r holds before it reads on (the
// replay window, deadletter.DefaultReplayWindow by default). Set it before the router's first
// replay.
func SetReplayWindow(r *Router, n int) { r.dead.replayWindow = n }

// SetMaxListedReplayEvents sets how many events a replay summary lists, for the test's
// duration.
func SetMaxListedReplayEvents(t interface{ Cleanup(func()) }, n int) {
	old := maxListedReplayEvents
	maxListedReplayEvents = n
	t.Cleanup(func() { maxListedReplayEvents = old })
}

// SetMaxListedProblems sets how many problems a dead-letter read or replay summary lists, for
// the test's duration.
func SetMaxListedProblems(t interface{ Cleanup(func()) }, n int) {
	old := maxListedProblems
	maxListedProblems = n
	t.Cleanup(func() { maxListedProblems = old })
}

// OnDeadLetterWalk makes r call fn as each walk of a subscription's dead-letter objects
// (list, show, replay's selection, explain's search) ends, with the most objects the walk held
// at once and the objects it selected. Set it before the walks.
func OnDeadLetterWalk(r *Router, fn func(held, total int)) { r.dead.walked = fn }

// SetRunSubscriptionTimeout sets how long a router waits for a subscription's actor to start
// or stop, for the test's duration.
func SetRunSubscriptionTimeout(t interface{ Cleanup(func()) }, d time.Duration) {
	old := runSubscriptionTimeout
	runSubscriptionTimeout = d
	t.Cleanup(func() { runSubscriptionTimeout = old })
}

// SetMaxReplayIDs sets how many event ids a replay remembers to take each once, for the
// test's duration.
func SetMaxReplayIDs(t interface{ Cleanup(func()) }, n int) {
	old := maxReplayIDs
	maxReplayIDs = n
	t.Cleanup(func() { maxReplayIDs = old })
}

// OnReplayHeld makes r call fn as each replay's selection, and each of its walks of the
// objects, ends, with the most event ids it remembered. Set it before the replays.
func OnReplayHeld(r *Router, fn func(ids int)) { r.dead.replayHeld = fn }

// SetReplayReadBackoff sets the waits before each new try of a replay's object read or
// listing the store failed, for the test's duration.
func SetReplayReadBackoff(t interface{ Cleanup(func()) }, waits ...time.Duration) {
	old := replayReadBackoff
	replayReadBackoff = waits
	t.Cleanup(func() { replayReadBackoff = old })
}
