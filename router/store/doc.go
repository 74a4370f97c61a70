// Package store is egrid's durable state behind one small interface ([Store]): per topic a
// journal of accepted events, per subscription a cursor, the set of events parked for a
// later attempt and the endpoint's probation state, the topic and subscription definitions
// (DESIGN.md §4), and the router's dead-letter outbox. Probation state and outbox records are
// opaque bytes to the store: the actors encode them.
//
// The model: a topic's journal is an append-only sequence numbered from 1. A subscription's
// cursor says every event up to it is settled (delivered, parked, or ended); events after it
// are still to be looked at. A parked event carries its own copy of the event, so the journal
// can be trimmed up to the lowest cursor of a topic's subscriptions.
//
// Implementations: [Memory] (tests, embedding without durability), the disk store
// (router/store/disk) and the JetStream store (router/store/jetstream, the base of cluster
// mode, whose compare-and-set writes can fail with [ErrFenced]). All pass the conformance
// suite in package storetest.
//
// store imports only schemas.
package store
