// Package actors is egrid's runtime on protoactor-go: one topic actor per topic and, as its
// supervised children, one subscription actor per event subscription (DESIGN.md §3).
//
// The router appends a publish to the topic's journal and then tells the topic actor
// ([Appended]); the topic actor evaluates each subscription's filter and hands the matching
// entries to the subscription actors ([Deliver]). A subscription actor owns everything about
// delivery to its destination: the window of events it has taken in, batching, the attempts in
// flight (run off the mailbox, results come back as messages), per-event attempt counts and due
// times, the retry timer and the endpoint's probation state. It keeps at most a bounded window in
// memory; when it falls behind it reads the journal from its cursor instead, so a dead endpoint
// makes the journal grow on disk, not the heap.
//
// Failure and restart: the state that matters (cursor, parked retries, probation) is in the
// store. A [StateWriter] per topic writes it off the mailboxes, in order, so the store always
// holds a prefix of what an actor decided: after a crash an event is at worst attempted again,
// never lost. A subscription actor that panics — or whose sink panics — is restarted by its topic actor's supervisor with back-off, reloads its state and
// goes on; its siblings never notice. A failed state write is its own subscription's too: the
// writer stops writing that subscription alone, and a write that finds its subscription deleted
// is dropped ([StateWriter]) — also when a subscription was created again under its name
// meanwhile: each update carries the epoch of the subscription its actor loaded
// ([store.SubscriptionState.Epoch]), and the store refuses one of an earlier epoch. Timers only send a message to the actor itself; due times
// are data, so timers are rebuilt after a restart. A stopping or restarting actor blocks
// nothing: it terminates at once and waits for its sink calls and its last state write off
// its mailbox, each at most its stop grace; its next incarnation (a restart, or the actor an
// update starts in its place) loads its state only after that wait, and the router waits for
// it before it closes the store ([Stops]).
//
// Events a subscription ends without delivery go, with a dead-letter destination, to the
// dead-letter outbox in the same store update that settles them ([DeadLetterHandoff]); the
// dead-letter actor, its outbox, the object key layout and replay are package
// actors/deadletter.
//
// actors imports schemas, router/filter, router/retry, router/store, router/metrics and sinks.
package actors
