// Package disk is egrid's embedded durable [store.Store]: one pebble database
// (github.com/cockroachdb/pebble/v2, pure Go) in a directory (DESIGN.md §4, SPEC.md §6).
//
// # Durability
//
// Append writes its events in one batch committed with a sync, so a publish is answered only
// once its events are on disk. Pebble puts concurrent synced commits behind one fsync of its
// write-ahead log (group commit): the publish path at one event per request gets far beyond
// the disk's fsync rate when requests are concurrent (BenchmarkAppend1 against
// BenchmarkRawFsync). Definitions (PutTopic, DeleteTopic, PutSubscription,
// DeleteSubscription) and dead-letter outbox writes are synced as well. UpdateSubscription and Trim are not: after a crash
// the newest of them may be missing, but the log is replayed in commit order, so they are
// never reordered, and any later synced write makes them durable too. Close flushes
// everything.
//
// # Sequence numbers
//
// Each topic's newest sequence number is kept in memory (found at Open from the newest
// journal key or the trim floor, whichever is higher) and handed out under the topic's lock;
// the commits themselves run in parallel. Read and LastSeq only go as far as the gapless
// prefix of committed Appends, and an Append returns only once its numbers are in that
// prefix, so nobody reads past a number that may still come. A failed write fails the whole
// store ([ErrFailed]; pebble cannot go on after a failed log write) and the process should
// restart: numbers are never handed out twice in one run, and a restart continues after the
// newest entry on disk.
//
// # Key layout
//
// Every key starts with one byte naming its kind; ids and sequence numbers are 8-byte
// big-endian, so that byte order is numeric order. Topics and subscriptions get ids from one
// counter that never goes back, so a topic created again after DeleteTopic shares no key with
// the old one and numbers its journal from 1 again.
//
//	N                  highest id handed out (8 bytes)
//	T name             topic definition: version, uvarint id, spec
//	S topicID name     subscription definition: version, uvarint id, spec
//	J topicID seq      journal entry: version, publish time, event
//	F topicID          trim floor: highest trimmed seq (8 bytes)
//	C subID            cursor (8 bytes)
//	P subID seq        parked event: version, attempts, four times, outcome, status, event
//	B subID            probation state: version, the subscription actor's opaque bytes
//	D id               dead-letter outbox record: version, the dead-letter actor's opaque bytes
//
// Names are the rest of the key, so Topics and Subscriptions list in name order with one
// range scan. DeleteTopic and DeleteSubscription are range deletions over the ids.
//
// # Trimming and releasing space
//
// Cursors are kept in memory (loaded at Open), so [Store.Cursors] — asked by the router each
// time it considers trimming a journal — reads no disk. Trim writes one range deletion from
// the previous trim floor, so tombstones never nest; DeleteTopic and DeleteSubscription are
// range deletions too. Pebble drops the deleted keys when it flushes or compacts them, and
// deletes outright the table files a range deletion wholly covers (delete-only compactions),
// so space comes back without rewriting what is kept. TestDeletesReleaseSpace measures it.
//
// # Values
//
// Values start with a format version byte (1) so the format can change and old data still
// be read; testdata/format_v1.golden pins it. Times are varint Unix seconds and uvarint
// nanoseconds (decoded in UTC: compare with Equal). An event is a presence byte, its eight
// string lengths as uvarints, the strings back to back and Raw as the rest of the value; an
// empty Raw decodes as nil.
//
// # Failures
//
// A failed write returns an error wrapping [ErrFailed] and the cause (the router answers 503),
// and so does every later call until the process restarts; reopening the directory recovers
// every acknowledged Append from the log. Pebble reports a failed log write by calling its
// logger's Fatalf; this package's logger panics there and the committing call turns the panic
// into that error. Failures pebble meets in its background work (a failed MANIFEST write,
// corruption found) end the process, as pebble intends.
//
// disk imports store, schemas and pebble.
package disk
