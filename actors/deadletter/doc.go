// Package deadletter is dead-lettering (SPEC §5): the dead-letter actor, its outbox, the object
// key layout and replay.
//
// Subscription actors (package actors) end events that cannot be delivered. With a dead-letter
// destination each ending becomes a [Record] in the outbox: a subscription puts it there in the
// same store update that settles the event ([StoreOutbox.Handoff]), so a crash loses none. The
// dead-letter actor ([Props]), one per router, waits the delay after each event's last
// attempt and writes the records due together as one object per subscription per flush under
// [Key], retrying while the object store is down and dropping (counted, logged) what a try
// at or past four hours after the first attempt still fails to write — a try made by the
// running actor: after a restart, records are tried again before any is dropped. It saves an
// object's key and records in the outbox before the first write, so a retry writes that object
// again instead of adding a second one, and after a crash an object found under the key is
// kept: each ending is in exactly one object. Outbox writes and object writes both run off the
// mailbox, object writes at most [MaxConcurrentWrites] at once; results come back as messages.
// A stopping or restarting actor terminates at once and waits for those writes, and saves its
// last outbox changes, off its mailbox ([Stops]); the next incarnation reads the outbox after
// that.
//
// With a [StoreOutbox] (an [EventOutbox]) the actor keeps each pending record's metadata, not
// its event: an object write reads its records' events back from the store, so the actor's
// memory grows by a few hundred bytes per pending record and with the writes under way, not
// with the events waiting for an object store that is down. It reads the outbox once as it
// starts, a record at a time; what arrives meanwhile is put in the outbox at once and kept,
// bounded by [MaxEarlyRecords] (past it the outbox is read a second time), and [MaxFlushers]
// bounds the Flush requests waiting for their answer.
//
// An object holds at most [Config.MaxRecordsPerObject] records and [Config.MaxObjectBytes] of
// them (a record larger than that alone), so neither a write nor a reader builds more than that
// in memory; readers pass [Config.ReadLimit] to the store's Get. Each object names its topic in
// the [TopicMetadata] metadata: classic keys ([Prefix]) name only the subscription, and
// readers take a topic's objects by [BelongsTo].
//
// A replay ([ReplayProps]) re-delivers dead-lettered events to one subscription by running a
// second subscription actor over a private journal that holds just those events, fed a part
// (an object's events) at a time as the earlier ones settle ([ReplayConfig.Window]); the parts
// are read as the replay comes to them ([ReplayConfig.Read]), not listed in advance. A
// stopping or restarting replay returns from its last turn at once and waits for its part
// read off its mailbox, at most 5 s ([ReplayStops]); its next incarnation, or the next replay
// of the subscription, reads its first part only after that.
//
// The wire shapes of the records are schemas' (schemas.DeadLetterRecord); the record wire
// format is written by schemas.AppendDeadLetters.
//
// deadletter imports actors, schemas, router/retry, router/store, router/metrics and sinks; only
// router (and tests) import it.
package deadletter
