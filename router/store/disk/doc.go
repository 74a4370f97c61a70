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
// DeleteSubscription) and dead-letter outbox writes (an UpdateSubscription that carries dead
// letters included) are synced as well. Other UpdateSubscription and Trim calls are not: after a crash
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
// pebble instance ([ErrFailed]; pebble cannot go on after a failed log write) and stops the
// numbering until the store has reopened itself: numbers are never handed out twice, and the
// reopened store continues after the newest entry on disk.
//
// # Key layout
//
// Every key starts with one byte naming its kind; ids and sequence numbers are 8-byte
// big-endian, so that byte order is numeric order. Topics and subscriptions get ids from one
// counter that never goes back, so a topic created again after DeleteTopic shares no key with
// the old one and numbers its journal from 1 again. A subscription's id is its epoch
// ([store.SubscriptionState.Epoch]): one created again under a name gets a new id, and an
// update of the deleted one's epoch is refused, so stores of every format carry epochs
// without a change of format.
//
//	N                  highest id handed out (8 bytes)
//	T name             topic definition: version, uvarint id, spec
//	S topicID name     subscription definition: version, uvarint id, spec
//	J topicID seq      journal block ending at seq: 2, count, entries (format 1: one entry)
//	F topicID          trim floor: highest trimmed seq (8 bytes)
//	C subID            cursor (8 bytes)
//	P subID seq        parked event: version, attempts, four times, outcome, status, event
//	B subID            probation state: version, the subscription actor's opaque bytes
//	D id               dead-letter outbox record: version, the dead-letter actor's opaque bytes
//	H subID eventID    delivery history: version, expiry (unix ns), the router's opaque bytes
//	V                  the store's format version (8 bytes; format.go)
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
// be read; testdata/format_v1.golden pins it. The store as a whole records its format under
// V (format.go): format 2 keeps a journal as blocks, the consecutive entries of one Append
// (up to 16, about 16 KiB) in one value keyed by the last one's seq, each entry encoded as in format 1
// behind its length (testdata/format_v2_block.golden). Pebble's per-key work then comes once
// per block; a format-1 entry reads as a block of one, so a format-1 store opens as it is. Times are varint Unix seconds and uvarint
// nanoseconds (decoded in UTC: compare with Equal). An event is a presence byte, its eight
// string lengths as uvarints, the strings back to back and Raw as the rest of the value; an
// empty Raw decodes as nil. Pebble's own files are kept in a pinned pebble format
// (pebbleFormat, format.go), raised only together with the store's format.
//
// # Failures
//
// No write failure crashes the process. Commits run in goroutines of their own: pebble
// panics in the committing goroutine when a log write fails (through its logger's Fatalf, or
// with the raw writer error for a commit that finds the log already failed, leaving its
// commit pipeline locked), and the store turns any such panic into a failure of that pebble
// instance (a generation, generation.go). Callers waiting on a failed instance return with
// an error wrapping [ErrFailed] and the cause. Pebble's Fatalf elsewhere (a MANIFEST write in
// a flush) fails the instance too and parks its goroutine instead of ending the process.
//
// While failed: Appends, definition and dead-letter writes are refused (the router answers
// 503, or 507 when the write failed because the disk is full: ENOSPC or EDQUOT in the
// cause's chain, on Windows ERROR_DISK_FULL or ERROR_HANDLE_DISK_FULL, and the refusal wraps [store.ErrDiskFull]); reads go on, so stored events are still delivered; UpdateSubscription (dead letters
// it hands over included: they are lost with the settlement they came with) and Trim are
// kept in memory, in order (LoadSubscription and Cursors see them). A recovery loop waits for
// free space (Options.MinFreeBytes, at least 16 MiB), fences the failed instance (its file
// system refuses every write, so it can never touch the new instance's files), opens a new
// instance on the directory — which replays the write-ahead log: every acknowledged Append
// and definition is there — copies over the subscription
// state the failed instance held in memory (cursors, parked events, probation, trim floors)
// in one synced batch, writes the state kept in memory in order, and only then switches
// calls to it (recover.go). Journal numbering continues after the newest entry on disk.
//
// The directory's lock (pebble's LOCK file) belongs to the Store, not to one instance: the
// first instance takes it and every later one shares it (fs.go, dirLock), so from Open to
// Close no other store can open the directory — a second egrid, or egrid store check — also
// while the store is failed and a reopening fails and waits to be tried again.
//
// Options.MinFreeBytes refuses Appends with [store.ErrInsufficientStorage] (the router
// answers 507) while the disk is below the floor, before pebble fails at all; below it, once
// the journal has been trimmed, the store flushes and compacts to get the space back, and on a
// small volume pebble neither preallocates nor recycles its write-ahead logs (walspace.go).
// [Store.Health] reports the state for status APIs.
//
// No lock is held across I/O: Store.mu guards the in-memory catalogue and is taken only to
// read or change it; calls register in wait groups, so DeleteTopic, DeleteSubscription and
// Close wait for the calls under way without blocking anyone else. Catalogue changes
// (definitions, rare admin calls) are ordered against each other by one owner goroutine
// (catalogLoop), which runs them one at a time, each with its reads of the catalogue and its
// synced commit; a caller hands its change over and waits for the answer, and one still
// waiting for its turn (behind a commit a slow or full disk holds up) gives up when its ctx
// ends, its change not made. A mutex, or a one-slot channel taken with a select on ctx, would
// have given the same order and the same cancellable wait, but held by the change across its
// fsync: a lock across I/O by another name. The owner holds nothing the callers wait on but
// their own answer; the order is the order it takes the changes in. A delete does not keep
// its turn while it waits for the calls under way on what it deletes: it marks the name
// instead, and only a catalogue change naming that topic or subscription waits for the
// delete to end (it then finds it gone, or back when the delete failed); the delete's commit
// is a second turn. A delete
// whose synced write failed may still have its batch on disk (the log written, the sync
// failed): it puts back what it took out of memory, and the recovery that reopens the store
// reads whether the batch is on disk and, if it is, takes it out again (settleDeletes); a
// definition it finds in a damaged table block is taken as still there (the delete failed, as
// it answered), the block reported once.
//
// # Damage
//
// Open takes the directory's lock, then looks for damage pebble would take in silently
// (CheckDir: a missing marker file or MANIFEST, a write-ahead log that pebble replays damaged
// before acknowledged appends, cut short, or missing commits that the sequence numbers show,
// walreplay.go) and refuses to start, with an error
// wrapping [ErrCorrupt] that says what would be lost and how to recover; so it does when
// pebble refuses to open a store whose table file is cut short or missing (its own error
// says neither what is lost nor what to do). Read skips a damaged
// table block, logging once which journal entries are lost, and reads the entries before it
// that other table files hold (readableBefore). A damaged table block of a
// subscription's state costs only what it holds, logged once: a cursor starts again at the
// journal's oldest entry (delivered again, none skipped), parked retries in it are lost, a
// probation state is dropped; the subscription loads the rest. A topic or subscription
// definition that does not decode is left out, logged once, its name kept from PutTopic and
// PutSubscription ([store.ErrDamaged]) until DeleteTopic or DeleteSubscription removes it
// (defdamage.go); a subscription stored under a topic id that no definition holds, or under a
// key too short to name a topic, belongs to nothing the store serves: the start that reports
// it removes it, with its state, unless it may be a damaged topic's whose id cannot be told (it
// then goes at the first start after that topic's delete); a damaged table block in the
// definitions refuses Open. A cursor that does not
// decode is handled as one in a damaged block; a trim floor or the next id that does not
// decode, or that a damaged block holds, is recomputed from the journal and the keys stored,
// logged once and written back (valdamage.go). A damaged block holding a topic's newest
// journal entries does not refuse Open either: numbering goes on past every number the block
// may hold, or, when the block reaches past the journal so that no new entry could be read
// back, the topic refuses Append until it is deleted (readJournalEnd). Each piece of damage
// goes to Options.OnCorruption and [Store.Health]. [Check] verifies a store offline (egrid
// store check). See corruption.go.
//
// A compaction that fails on a damaged table file in level 0, which pebble would try again at
// once for as long as the process runs, is tried again after 1 s, doubling up to a minute;
// flushes go on. If level 0 then grows to pebble's limit, which only that compaction could
// lift, the store fails (writes refused with [ErrFailed] wrapping [ErrCorrupt], naming the
// file and the remedy) and does not reopen itself. See compactions.go.
//
// # Encryption and permissions
//
// The directory is created 0700 and every file 0600 (fs.go); Options.PrivateDir refuses a
// directory open to group or others. Options.SecretKey seals definitions (secret.go).
//
// disk imports store, store/internal/wire (the value encoding it shares with the JetStream
// store), schemas and pebble.
package disk
