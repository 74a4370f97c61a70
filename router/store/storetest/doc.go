// Package storetest is the conformance suite for [store.Store] implementations: every store
// (the in-memory reference and the disk store) runs the same tests, so a fake used by other
// packages' tests behaves like the real thing (DESIGN.md §4).
//
// [Run] checks the whole contract on a fresh store per subtest: journal numbering and reads,
// Trim, topic and subscription definitions, subscription state and Cursors, DeleteTopic,
// concurrent Appends and Close. [RunReopen] checks, for durable stores, that everything written
// before Close is there after the store is opened again on the same directory.
//
// Where store.go is silent the suite fixes the behaviour, and the tests name it:
//   - Append with no events appends nothing and returns the topic's LastSeq.
//   - Read with max <= 0 returns no entries; from 0 reads from the first entry.
//   - Trim never changes LastSeq: after trimming everything the next Append continues the
//     numbering (a durable store keeps this across a reopen).
//   - PutTopic and PutSubscription on an existing name replace only the spec; journal, cursor
//     and parked events stay. The store copies spec: changing the slice afterwards changes
//     nothing stored.
//   - DeleteTopic, DeleteSubscription, LoadSubscription, UpdateSubscription and Subscriptions
//     return an error matching [store.ErrNotFound] (errors.Is) for an unknown name, as do the
//     journal methods for an unknown topic.
//   - After DeleteTopic a topic created again under the same name starts empty: LastSeq 0, no
//     subscriptions, and the first Append gets sequence number 1.
//   - UpdateSubscription applies Delete before Put, so a Seq in both ends up parked.
//   - A subscription deleted and created again under its name gets a new epoch also when its
//     topic was deleted and created again; an update of an earlier epoch applies none of
//     its parts, dead letters included, and its error matches both [store.ErrStaleEpoch]
//     and [store.ErrNotFound]. An update of epoch zero applies to the current subscription.
//   - UpdateSubscription puts Update.DeadLetters in the same write as the state change: both
//     or neither; an update holding only dead letters puts them.
//   - The dead-letter outbox reads the same records whichever way it is read: DeadLetters,
//     ScanDeadLetters (each record once when nothing changes meanwhile) and DeadLettersByID
//     (ids not stored, or asked twice, left out or given once), each reader owning what it is
//     given; an error of ScanDeadLetters' callback is returned as it is.
//   - SwapSubscription compares the stored definition byte for byte; a state write does not
//     change it, and of concurrent swaps from one definition exactly one wins.
//   - CreateTopic and CreateSubscription of a name that holds a definition fail with
//     [store.ErrExists] and change nothing (the definition, journal, state and epoch stored
//     first stay); of concurrent creates of one name exactly one wins; a deleted name can
//     be created again.
//   - A subscription created while its topic is deleted and created again is refused
//     ([store.ErrNotFound]) or belongs to the topic created again, its cursor within that
//     topic's journal: never one of the deleted topic left behind.
//   - Cursors of a topic without subscriptions is an empty map, not nil.
//   - Every method fails after Close; a second Close returns nil.
//
// storetest imports only store and schemas (and testing).
package storetest
