// Package jetstream is a [store.Store] on NATS JetStream: the foundation of egrid's cluster
// mode, where several router nodes share one JetStream domain (`egrid serve --cluster`,
// package router/cluster); the serve command uses the disk store otherwise.
//
// # Mapping
//
// Every name starts with [Options.Prefix] (default EGRID, below P). Topic, subscription and
// dead-letter names are escaped into tokens JetStream accepts (letters, digits and '-' stay,
// any other byte becomes '_' and two hex digits).
//
//   - Journal: one stream per topic, P_journal_<topic>, on the subject P.journal.<topic>, one
//     message per event (version byte, publish time, event). The sequence number of an entry
//     is the message's stream sequence: a stream numbers its messages from 1 without gaps and
//     keeps its last sequence number when messages are purged, which is exactly the journal's
//     numbering (Trim is a purge below a sequence and never moves LastSeq; DeleteTopic
//     deletes the stream, so a topic created again starts at 1). Limits policy, no age or
//     size limit: only Trim removes entries.
//   - Definitions and subscription state: the key-value bucket P_meta. topic.<topic> holds a
//     topic's spec, or the claim of a create or delete of the topic under way (below, "A
//     topic's lives"); sub.<topic>.<sub> holds everything of one subscription in one value —
//     spec, epoch, cursor, parked events (their attempts, times and last outcome) and
//     probation state — so [Store.UpdateSubscription] commits with one write, atomic by
//     construction. The epoch ([store.SubscriptionState.Epoch]) is a random number drawn
//     when the subscription is created; a record written before records carried one has
//     none and reads as epoch 1, and is written again in its own format.
//   - Parked events' copies of their events: the stream P_parked, one message per parked
//     event on P.parked.<topic>.<sub>.<seq>. An update writes the copies of newly parked
//     events before the record that names them, and purges the copies of events it unparked
//     after; a copy no record names is never read, so the record stays the one commit point
//     while it stays small. An update whose record write is fenced deletes the copies it
//     wrote, each by its sequence number: two nodes may park the same event while a
//     subscription changes hands, and the stream keeps every copy of a subject (Open changes
//     a stream of an earlier release, which kept one), so the delete leaves the copy of the
//     node whose record names it. A read takes a subject's last copy: every copy of one
//     event of one subscription holds that event. A store holds a subscription (against its own other calls of it) only
//     for the record's read or compare-and-set: copies are read and purged after, up to 16
//     at once, and a copy an update purged while it was being read leaves its event out, as
//     settled; an update that parks a Seq again while the purge of its earlier copy is under
//     way waits for that purge before it writes the new copy. A copy whose purge failed
//     stays until the subscription is deleted.
//   - Dead-letter outbox: the key-value bucket P_deadletters, one key per record ID.
//   - Delivery histories: their own key-value bucket, one key per event and subscription
//     (history.go). A history is written with a compare-and-set on its key and marked with
//     the newest revision of the subscription's record the writing store read or wrote, so
//     a node that lost the subscription cannot replace the history of the node that took it
//     over: its write fails with [store.ErrFenced].
//
// # Writes, fencing and ordering
//
// Every state write is a compare-and-set on the key's revision: the store remembers the
// revision it last read or wrote of each subscription record and writes on top of it. A write
// that finds another revision (another node wrote since) fails with [store.ErrFenced] and
// applies nothing; [Store.LoadSubscription] always reads and takes the revision it read, so
// the node that takes a subscription over loads it and from then on fences the old owner
// out. Topic definition changes are compare-and-sets on the revision just read, so of two
// concurrent changes one fails with [store.ErrFenced] rather than both passing silently.
// Subscription definition writes ([Store.PutSubscription], [Store.SwapSubscription],
// [Store.DeleteSubscription]) are compare-and-sets too, but a stale view of this store does
// not fail them: a write lost to another node's reads the record again and writes the
// definition on the state stored (PutSubscription creates a subscription deleted meanwhile
// anew), a bounded number of times, before failing with [store.ErrFenced]. Only the
// owner's state writes stay fenced on the revision it last read or wrote, and a create that
// lost to another node's create, which fails with [store.ErrFenced] at once and writes nothing.
// The creates ([Store.CreateTopic], [Store.CreateSubscription]) write with the bucket's
// Create (expected last subject sequence 0, or the revision of the name's delete marker),
// never a read and then a put: of two nodes creating one name exactly one write is stored,
// and the other fails with [store.ErrExists] and writes nothing. The router creates every
// name it found absent with them.
//
// # A topic's lives
//
// A topic's journal stream, subscription records, parked events and histories are named after
// the topic alone, with no mark of which life of the name they belong to, so what a delete
// cut short left looks like what a live topic holds. So only the store holding the name's
// key removes them. A create ([Store.CreateTopic], or [Store.PutTopic] of a new name) first
// writes a claim on the key with the bucket's Create (format 2: a kind, a random number and
// an expiry), then removes what an earlier life left, creates the journal stream, and writes
// the definition over its claim (a compare-and-set on the claim's revision). A store whose
// claim write loses to another node's write of the key removes nothing: it looks again, and
// a create fails with [store.ErrExists] (a put replaces the definition) once the other node's
// topic stands, with everything written to it since. Before, a create that found no key
// removed the topic's stream and records and only then wrote its key, so a node that looked
// just before another node created the topic deleted that node's journal and subscriptions,
// events answered 200 with them. A delete ([Store.DeleteTopic], and [Store.DeleteDamaged] of
// a topic) turns the definition into its claim (on the revision read: the commit point),
// removes what the topic held, and purges the key last, so a create of the name never starts
// while the delete is still removing things.
//
// A subscription's create ([Store.CreateSubscription], [Store.PutSubscription] of a new name)
// reads the topic's definition, then writes the record. A delete claimed in between lists the
// topic's records before that write lands and does not remove it: the record would be left to
// no topic, or to the topic created again after the delete, with a cursor in the old journal.
// So the create reads the topic's key again after its write: unchanged, or a definition whose
// journal stream is the one the create took the cursor from (the definition put again since),
// the record stands; else the create deletes the record it wrote (on its revision, or on the
// revision of a write since that kept its epoch, never another node's create) and starts
// again, which finds no topic ([store.ErrNotFound]) or the topic created again. Another node's
// listing can see the record for the moment between its write and its delete.
//
// Each record carries its topic's life, the creation time of the journal stream its cursor
// numbers (left out of the records of earlier releases, whose life is then not known). A
// definition write of an existing record ([Store.PutSubscription], [Store.SwapSubscription],
// [Store.DeleteSubscription]) looks at the topic's stream first and does not take over a record
// of an earlier life, one such a create wrote: it deletes that record and goes on as for a
// subscription that does not exist (a put creates it anew, on the topic that stands, and a
// create still taking its record back then finds the put's and stands aside, as a create that
// lost; a swap or a delete finds none, [store.ErrNotFound]). So a write the take-back removes
// is only one made while the topic's earlier life stood, which the topic's delete removes
// anyway, never a write another node answered on the topic that stands. The delete's
// marker is left to the next listing of the topic's subscriptions. A create whose delete fails
// (an outage) fails and may leave the record: a create of the topic removes it, as it removes
// what a delete cut short left.
//
// Every reader takes a claimed name for one without a topic: the listings leave it out, and
// subscription calls and DeleteTopic answer [store.ErrNotFound]; a create or put of it waits
// for the claim to end (a watch of the key, up to the call's deadline, after which it fails
// wrapping [store.ErrFenced], to be tried again). A claim's holder bounds its work by its
// [Options.Timeout]; the claim expires a minute after that (claimGrace: requests still on
// their way, clocks of nodes that differ by less). A claim left by a store that crashed or
// lost NATS in the middle is taken over by the next create after its expiry (a compare-and-set
// on its revision, so one store takes it), which removes what is left and creates the topic;
// until then the name can be neither used nor created again. A claim is format 2, which
// releases before it cannot read: they take it for a damaged definition (and leave the name
// alone), so upgrade every node of a cluster before creating or deleting topics.
//
// Appends to a topic go through one writer goroutine per topic and store. It knows the
// stream's last sequence number and publishes each Append's events pipelined: the first
// message of a pipeline carries Nats-Expected-Last-Sequence, each next one
// Nats-Expected-Last-Msg-Id naming the message before it. So an Append's events get
// consecutive numbers and concurrent Appends share one round of acknowledgements (as the disk
// store's share one fsync). When another node appended meanwhile, the pipeline's first
// message finds another last sequence number and the whole pipeline is refused (nothing of
// it is stored, never interleaved); the writer reads the stream's end again and publishes it
// after, up to 8 times before failing the Appends with [store.ErrFenced]. Append returns once JetStream acknowledged every
// event. The JetStream server in go.mod (2.10) has no atomic batch publish, so an Append that
// fails may have stored a prefix of its events (never a part with a hole), which the contract
// allows: "A failed Append may still be on disk"; publishers retry and delivery is at least
// once. Read returns a contiguous run of the stream and may include events of an Append still
// waiting for its acknowledgements: they are stored.
//
// # Durability, replicas and outages
//
// An acknowledged write is as durable as JetStream makes it. [Options.Replicas] 1 (the
// default) keeps one copy on one server; production runs 3 on a cluster of three or more
// servers: JetStream acknowledges a write once a majority of the replicas (two of three) has
// it, so losing one server loses nothing acknowledged and the store keeps working. A single
// server syncs its files every two minutes by default; give it sync_interval: always to make
// every acknowledged Append survive a power loss, as the disk store's do.
//
// When the connection to NATS is down, every call fails at once with [ErrNotConnected]
// (wrapped); a call that was waiting when the connection dropped fails within
// [Options.Timeout]. The router answers a publish whose Append failed with 503 and a
// Retry-After, so nothing is acknowledged that was not stored; other failed calls reach the
// router and its actors as a disk store's failed writes do. The NATS client reconnects by
// itself, and calls succeed again once it has.
//
// # Limits
//
// One event is one NATS message (a journal entry, a parked event's copy), and a topic
// accepts events up to 1 MiB, so [Open] refuses a server whose max_payload is below
// [MinMaxPayload]: configure max_payload: 4MB. A subscription's record holds about 45 bytes
// per parked event, so one subscription can keep some 90 000 parked events. Cursors,
// Subscriptions, Topics and DeadLetters read the bucket rather than memory, so every node
// sees every cursor: the keys the bucket's stream holds (one stream info), then one watch of
// the keys, then a get of each key the watch left out (a watch's end marker can come early
// while the bucket is written, or never, when a key it counted is purged before it is
// delivered: the watch is then left after half a second without a value; see scan).
// LoadSubscription reads one message per parked
// event, up to 16 at once. A deleted topic or subscription leaves no deletion marker in the
// meta bucket: its key is deleted with a key-value purge (a compare-and-set on the revision
// for a subscription), whose marker is then purged from the bucket's stream up to its own
// sequence number (a name created again meanwhile stays). Nothing in egrid watches the
// bucket's changes as they come — other nodes learn of a delete from a listing, where a key
// without messages is as absent as a marked one, and a write on a revision read before the
// delete is fenced all the same — so no marker is kept for them, and markers would grow the
// bucket and its listings with every name ever deleted. A marker a delete could not remove
// (an outage), or one an earlier release left, goes with the next listing of the meta
// bucket that finds it (see dropMarker). Delivery histories and dead-letter records go
// without a trace too (their subjects are purged from their bucket's stream), and an expiry
// of histories also removes the markers earlier releases left. An expiry holds a batch and a
// page of the history bucket at a time, whatever its size, and [Options.Timeout] bounds each
// of its requests rather than the whole (see [Store.ExpireHistory]). A journal message that
// does not decode (published to the journal's subject by something else: the store writes
// none) is passed over by reads and logged ([Store.Read]). A parked event's copy that does
// not decode, or that is gone although the subscription's record names the event, is left
// out of LoadSubscription and ParkedEvents: the event is lost to the subscription (neither
// retried nor dead-lettered, its event being unreadable), which goes on with its other
// events, as with the disk store's parked record that does not decode. Each such piece of
// damage is logged once as an ERROR saying what to do and counted by kind
// ([Options.OnCorruption], [DamageEntry]; [Store.Health]), as the disk store counts its own.
// A topic's definition, or a subscription's record whose definition does not decode, is left
// out of the listings, which list the others, and keeps its name until deleted
// ([store.ErrDamaged]; kind [DamageDefinition]); a subscription's record whose definition
// decodes but whose state does not loads as a fresh state, from the oldest event its topic's
// journal holds and with a new epoch, as the disk store restarts a subscription whose cursor
// does not decode (kind [DamageEntry]; see [Store.LoadSubscription]). A key that does not
// decode into a name (one egrid does not write: an escape cut short, or one no name escapes
// to, which would alias another name's key) is left out of the listings and logged once with
// its raw key (kind [DamageDefinition] in the meta bucket, [DamageEntry] in the dead-letter
// outbox).
//
// jetstream imports only router/store, router/store/internal/wire (the value encoding it
// shares with the disk store), schemas, router/internal/bucketkeys and
// router/internal/natstoken (the escape of names into tokens it shares with the cluster's
// leases) of egrid (and the NATS client).
package jetstream
