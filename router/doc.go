// Package router is egrid's public, embeddable API: [New] builds a [Router] on an actor system
// and a store; topics and event subscriptions are created with Event Grid's property names;
// [Router.Publish] accepts events from Go and [Router.Handler] serves the same data plane over
// HTTP (SPEC §1.1) together with the admin plane (SPEC §1.2).
//
// Publishing: a request is decoded and validated against the topic's input schema, appended to
// the topic's journal by the topic's committer — one goroutine per topic that gathers the
// requests waiting at that moment into one durable append, so concurrent publishers share one
// sync — and answered only once its events are durable. The topic actor then fans the entries
// out to the subscription actors (package actors).
//
// Shutdown order ([Router.Close]): refuse new publishes, finish the appends in progress, stop the
// topic actors (each subscription actor lets its attempts finish or cancels them), stop the
// actor system, and close the store when the router opened it.
//
// router imports every other egrid package except cmd, testkit and examples.
package router
