// Package router is egrid's public, embeddable API: [New] builds a [Router] on an actor system
// and a store; topics and event subscriptions are created with Event Grid's property names;
// [Router.Publish] accepts events from Go, and package router/httpapi serves the same data
// plane over HTTP (SPEC §1.1) together with the admin plane (SPEC §1.2), through the exported
// API of this package only.
//
// Publishing: a request is decoded and validated against the topic's input schema, appended to
// the topic's journal by the topic's committer — one goroutine per topic that gathers the
// requests waiting at that moment into one durable append, so concurrent publishers share one
// sync — and answered only once its events are durable. The topic actor then fans the entries
// out to the subscription actors (package actors).
//
// Subscriptions (SPEC §1.2, §2.4, §2.5): [Router.CreateSubscription] checks a spec against its
// topic and reports every problem at once; a WebHook endpoint is then validated without
// holding the router's lock (the Event Grid validation event, or the CloudEvents OPTIONS
// request), and only a validated subscription gets a delivery actor. One whose endpoint
// answered without the code waits AwaitingManualAction until its validationUrl — served by
// router/httpapi and completed by [Router.CompleteValidation], token in the URL — is fetched, for [ManualValidationWindow], then becomes
// Failed. The store keeps each subscription's provisioning record next to its spec (the
// token's hash, the window's deadline, a CloudEvents endpoint's WebHook-Allowed-Rate), and the
// timers that close validation windows and delete subscriptions at their expirationTimeUtc are
// rebuilt from it when a router starts. In cluster mode every node rebuilds them from the
// stored deadline, the node holding the cluster's duty closes the windows, and closing or
// completing a validation swaps the stored record only while it still awaits that
// validation (store.Store.SwapSubscription). Admin reads hide secrets: the endpoint's query string
// and secret static header values.
//
// Concurrency: a topic's definition is immutable and replaced whole (an update that rotates
// its keys swaps it atomically), so a publish reads it without a lock. The router's mutex
// guards only its maps and is never held across I/O or across waiting on an actor; admin
// operations of one topic (create, update, delete, and those of its subscriptions) take that
// topic's turn instead, so a slow store write stalls neither publishes nor other topics.
//
// Egress (SPEC §9): a WebHook endpoint passes the egress policy [Deps.Egress] (package
// sinks/egress) before anything connects to it, handshake included, and every connection of
// the router's HTTP client passes it again on the address the name resolved to. The embedded
// default allows loopback and http:// so Go programs and tests can use httptest servers; egrid
// serve denies loopback unless --insecure-dev and sets [Config.RequireHTTPS] (see egress.go).
//
// Shutdown order ([Router.Close]): stop the broker sources and the subscription timers, refuse
// new publishes, finish the appends in progress, stop the trimmer, stop the topic actors (each
// subscription actor cancels its attempts and queues its last state update), wait for their
// stop work (each actor's sink calls and last state write, waited for off its mailbox, each
// at most its stop grace: [actors.Stops]) and for the stopped replays' last object reads (off
// their mailboxes, each at most 5 s: deadletter.ReplayStops), flush the dead letters that are
// waiting, stop the dead-letter actor and wait for its last outbox save (off its mailbox, each wait at most its
// write timeout: deadletter.Stops), stop the actor system, and close the store when the
// router opened it.
//
// Its exported API names no type of package actors: [Status], [DeadLetterStatus],
// [DeadLetter] and [AttemptRecord] are the router's own, converted from the actors' messages.
//
// router imports every other egrid package except cmd, testkit, examples and router/httpapi
// (which imports router).
package router
