package jetstream

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/internal/bucketkeys"
	"github.com/egridio/egrid/router/internal/natstoken"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// ErrNotConnected is returned (wrapped) by every call made while the connection to NATS is
// down: the store fails at once rather than waiting for a server that is not there. The
// router answers a publish that gets it with 503 and a Retry-After; the NATS client keeps
// reconnecting, and calls succeed again once it has.
var ErrNotConnected = errors.New("jetstream store: not connected to NATS; retry once the server is reachable")

// MinMaxPayload is the smallest max_payload [Open] accepts from the NATS server: a journal
// message or a parked event's copy holds one event, which a topic accepts up to 1 MiB and
// which takes up to about twice that encoded (its attributes are stored beside its JSON).
// Configure the servers with max_payload: 4MB.
const MinMaxPayload = 4 << 20

// Options configures [Open] and [Dial]. The zero value is usable.
type Options struct {
	// Prefix starts the name of every stream, subject and bucket the store uses, so several
	// routers (or tests) can share one JetStream domain without seeing each other's state.
	// Letters, digits, '-' and '_' only. Default "EGRID".
	Prefix string
	// Replicas is the number of copies JetStream keeps of every stream and bucket: 1 (the
	// default) on a single server, 3 in production on a cluster of at least three servers, so
	// a write is acknowledged only once a majority of the replicas has it and the store
	// survives the loss of one server.
	Replicas int
	// Memory keeps streams and buckets in the servers' memory instead of files: for tests and
	// caches, not for a durable router.
	Memory bool
	// Timeout bounds every call whose context has no deadline (ExpireHistory: each of its
	// requests, see there). Default 10 seconds.
	Timeout time.Duration
	// Logger receives the damage a read passes over (a journal message that does not
	// decode, see [Store.Read]; a parked event's copy that does not decode or is missing, see
	// [Store.ParkedEvents]; a definition or a subscription's state in the meta bucket that
	// does not decode, see [Store.Topics] and [Store.LoadSubscription]), as ERROR. Default:
	// discarded.
	Logger *slog.Logger
	// OnCorruption, when set, is called once for each piece of damage the store finds, with
	// its kind ([DamageEntry], [DamageDefinition]), as the disk store's Options.OnCorruption is: egrid counts it
	// in the metric StoreCorruptionCount. [Store.Health] counts it too.
	OnCorruption func(kind string)
}

// DamageEntry is the kind of damage ([Options.OnCorruption], the metric
// egrid_store_corruption_count) of a stored message that does not decode — a journal message
// passed over, a parked event's copy, a subscription's state (its record's definition
// decoding) — or of a parked event's copy missing although the subscription's record names
// the event. It is the disk store's kind of the same damage.
const DamageEntry = "entry"

func (o Options) withDefaults() Options {
	if o.Prefix == "" {
		o.Prefix = "EGRID"
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Validate reports every problem of the options at once.
func (o Options) Validate() error {
	var errs []error
	if o.Prefix != "" && strings.TrimLeft(o.Prefix, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != "" {
		errs = append(errs, fmt.Errorf("jetstream store: prefix %q: use only letters, digits, '-' and '_'", o.Prefix))
	}
	if o.Replicas < 0 || o.Replicas > 5 {
		errs = append(errs, fmt.Errorf("jetstream store: replicas %d: JetStream keeps 1 to 5 replicas (3 in production)", o.Replicas))
	}
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("jetstream store: timeout %v: must not be negative", o.Timeout))
	}
	return errors.Join(errs...)
}

// Store is a [store.Store] on NATS JetStream: a stream per topic journal and key-value buckets
// for definitions, subscription state and the dead-letter outbox (see the package
// documentation). Open one with [Open] or [Dial]; several Stores (in one process or on
// several nodes) may be open on the same prefix, and every state write is a compare-and-set,
// so a Store whose view is stale gets [store.ErrFenced] instead of overwriting another's.
type Store struct {
	nc            *nats.Conn
	ownsNC        bool
	js            jetstream.JetStream
	meta          jetstream.KeyValue // topic definitions and subscription records
	metaStream    *bucketStream      // meta's stream, for complete listings (scan)
	deadStream    *bucketStream      // dead's stream, likewise
	historyStream *bucketStream      // history's stream, whose keys go without markers (purgeKey)
	parked        jetstream.Stream   // parked events' copies of their events
	dead          jetstream.KeyValue // the dead-letter outbox
	history       jetstream.KeyValue // delivery histories (history.go)
	opts          Options
	closed        atomic.Bool

	mu      sync.Mutex
	writers map[string]*writer   // journal writers by topic
	subs    map[string]*subEntry // subscription records this store last read or wrote, by key
	// purging holds the parked events' subjects whose copies an update is purging (dropBodies),
	// each with a channel closed when the purge is done: an update that parks one of them
	// again waits for it before it writes the new copy.
	purging map[string]chan struct{}
	stopped bool // set by Close: no new writers

	passedMu sync.Mutex
	passed   map[string]uint64 // by topic: the last journal message passed over (decodeJournal)

	corruptions atomic.Int64 // the damage found, for Health (damaged)
	lostMu      sync.Mutex
	lost        map[string]bool // the parked events' copies reported damaged, once each (copyDamage)

	readParkedHook func() // set by a test of this package only: called by readParked first
	dropBodiesHook func() // set by a test of this package only: called by dropBodies first
	purgeWaitHook  func() // set by a test of this package only: called before waiting for a purge
}

// subEntry is this store's view of one subscription record: the revision it last read or
// wrote and the decoded record. sem (capacity 1) serialises this store's writes of the key;
// rev and rec belong to whoever holds it.
type subEntry struct {
	sem chan struct{}
	rev uint64
	rec *subRecord // nil when not loaded
	// seen is the highest revision of the record this store read or wrote, readable without
	// sem: PutHistory marks the histories it writes with it (see history.go).
	seen atomic.Uint64
}

// setRev sets the revision e holds; sem is held.
func (e *subEntry) setRev(rev uint64) {
	e.rev = rev
	if rev > e.seen.Load() {
		e.seen.Store(rev)
	}
}

// Dial connects to the NATS server at url and opens the store on it; Close closes the
// connection too.
func Dial(ctx context.Context, url string, opts Options) (*Store, error) {
	nc, err := nats.Connect(url, nats.Name("egrid store"))
	if err != nil {
		return nil, fmt.Errorf("jetstream store: connecting to %s: %w", RedactURLs(url), RedactError(err))
	}
	s, err := Open(ctx, nc, opts)
	if err != nil {
		nc.Close()
		return nil, err
	}
	s.ownsNC = true
	return s, nil
}

// Open opens the store on an established connection, creating its key-value buckets and its
// parked-events stream when they do not exist (with [Options.Replicas] and storage); existing
// ones are used as they are, never updated (change their replicas with the nats CLI). Close
// leaves the connection open: the caller owns it.
func Open(ctx context.Context, nc *nats.Conn, opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if mp := nc.MaxPayload(); mp < MinMaxPayload {
		return nil, fmt.Errorf("jetstream store: the NATS server's max_payload is %d bytes, which cannot hold a 1 MiB event; set max_payload: 4MB in its configuration (at least %d bytes)", mp, MinMaxPayload)
	}
	opts = opts.withDefaults()
	// Writers pipeline up to maxPipeline events each, and one Append can hold a request's
	// 5000 events: leave room for many topics' pipelines before publishes stall.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1<<16))
	if err != nil {
		return nil, fmt.Errorf("jetstream store: %w", err)
	}
	s := &Store{nc: nc, js: js, opts: opts, writers: make(map[string]*writer), subs: make(map[string]*subEntry), purging: make(map[string]chan struct{})}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	for _, b := range []struct {
		kv   *jetstream.KeyValue
		name string
		desc string
	}{
		{&s.meta, opts.Prefix + "_meta", "egrid topic and subscription definitions and subscription state"},
		{&s.dead, opts.Prefix + "_deadletters", "egrid dead-letter outbox"},
		{&s.history, opts.Prefix + "_history", "egrid delivery histories of events"},
	} {
		*b.kv, err = js.KeyValue(ctx, b.name)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			*b.kv, err = s.createBucket(ctx, b.name, b.desc)
		}
		if err != nil {
			return nil, fmt.Errorf("jetstream store: creating bucket %s: %w", b.name, err)
		}
	}
	for _, b := range []struct {
		str  **bucketStream
		name string
	}{{&s.metaStream, opts.Prefix + "_meta"}, {&s.deadStream, opts.Prefix + "_deadletters"}, {&s.historyStream, opts.Prefix + "_history"}} {
		str, err := js.Stream(ctx, "KV_"+b.name)
		if err != nil {
			return nil, fmt.Errorf("jetstream store: opening the stream of bucket %s: %w", b.name, err)
		}
		*b.str = &bucketStream{js: js, name: "KV_" + b.name, str: str}
	}
	s.parked, err = js.Stream(ctx, opts.Prefix+"_parked")
	if isStreamNotFound(err) {
		s.parked, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name:              opts.Prefix + "_parked",
			Description:       "egrid parked events' copies of their events",
			Subjects:          []string{opts.Prefix + ".parked.>"},
			MaxMsgsPerSubject: -1, // see parkedCopies
			Discard:           jetstream.DiscardOld,
			Storage:           s.storage(),
			Replicas:          opts.Replicas,
			AllowDirect:       s.directReads(),
		})
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream store: creating stream %s_parked: %w", opts.Prefix, err)
	}
	if err := s.parkedCopies(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// parkedCopies lets the parked-events stream keep every copy of a subject, as streams of
// earlier releases (one message per subject) did not. Two nodes can park the same event at
// once while a subscription changes hands, each writing its copy before its record: the one
// whose record write is fenced deletes its own copy by its sequence number (see
// updateRecord), which must leave the other's, the one the committed record names. With one
// message per subject the later copy replaced the earlier, and the fenced node's delete could
// take the only copy the committed record has. Copies go when their event is unparked (a
// purge of the subject) or their subscription or topic is deleted.
func (s *Store) parkedCopies(ctx context.Context) error {
	info, err := s.parked.Info(ctx)
	if err != nil {
		return fmt.Errorf("jetstream store: reading stream %s_parked: %w", s.opts.Prefix, err)
	}
	if info.Config.MaxMsgsPerSubject == -1 {
		return nil
	}
	cfg := info.Config
	cfg.MaxMsgsPerSubject = -1
	if s.parked, err = s.js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("jetstream store: letting stream %s_parked keep every copy of a parked event: %w", s.opts.Prefix, err)
	}
	return nil
}

// directReads says whether the store's streams allow direct gets. A direct get may be
// answered by any replica, and a follower that has not caught up answers with what it has: a
// journal entry another node appended a moment ago "not found", a subscription state one
// revision old (whose next write is then fenced), a topic created a moment ago unknown. On a
// replicated store every read therefore goes to the stream's leader, which holds everything
// acknowledged; a single replica is its own leader and keeps the cheaper direct gets. Streams
// and buckets get this when they are created: changing it on a running cluster's streams
// while nodes start together made their reads time out.
func (s *Store) directReads() bool { return s.opts.Replicas <= 1 }

// createBucket creates a key-value bucket holding one value per key. nats.go creates buckets
// with direct gets on; a replicated store creates the bucket's stream itself, the same but
// for direct gets (see directReads), and binds it, so its reads go to the leader.
func (s *Store) createBucket(ctx context.Context, name, desc string) (jetstream.KeyValue, error) {
	if s.directReads() {
		return s.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: name, Description: desc, History: 1, Storage: s.storage(), Replicas: s.opts.Replicas,
		})
	}
	_, err := s.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "KV_" + name, Description: desc, Subjects: []string{"$KV." + name + ".>"},
		MaxMsgsPerSubject: 1, MaxBytes: -1, MaxMsgSize: -1, MaxMsgs: -1, MaxConsumers: -1,
		Storage: s.storage(), Replicas: s.opts.Replicas,
		AllowRollup: true, DenyDelete: true, Duplicates: 2 * time.Minute, Discard: jetstream.DiscardNew,
		AllowDirect: false,
	})
	if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return nil, err
	}
	return s.js.KeyValue(ctx, name)
}

func (s *Store) storage() jetstream.StorageType {
	if s.opts.Memory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// bound gives ctx the store's timeout when it has no deadline.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.opts.Timeout)
}

// enter checks the store is open and bounds ctx.
func (s *Store) enter(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if s.closed.Load() {
		return nil, nil, store.ErrClosed
	}
	if !s.nc.IsConnected() {
		return nil, nil, fmt.Errorf("%w (status %v)", ErrNotConnected, s.nc.Status())
	}
	ctx, cancel := s.bound(ctx)
	return ctx, cancel, nil
}

// Names. Topic, subscription and dead-letter names are escaped into tokens valid in stream
// names, subjects and keys (natstoken.Escape): letters, digits and '-' stay, every other byte
// becomes '_' and two hex digits. The cluster's leases spell names the same way.
func escape(name string) string { return natstoken.Escape(name) }

// unescape is the name of token tok, or an error wrapping errCorrupt (and so
// store.ErrCorrupt) for a token egrid does not write (natstoken.Unescape), which quotes it.
func unescape(tok string) (string, error) {
	name, err := natstoken.Unescape(tok)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errCorrupt, err)
	}
	return name, nil
}

func (s *Store) streamName(topic string) string { return s.opts.Prefix + "_journal_" + escape(topic) }
func (s *Store) subject(topic string) string    { return s.opts.Prefix + ".journal." + escape(topic) }
func topicKey(topic string) string              { return "topic." + escape(topic) }
func subKey(topic, sub string) string           { return "sub." + escape(topic) + "." + escape(sub) }
func subPattern(topic string) string            { return "sub." + escape(topic) + ".*" }

func (s *Store) parkedSubject(topic, sub string, seq uint64) string {
	return s.opts.Prefix + ".parked." + escape(topic) + "." + escape(sub) + "." + strconv.FormatUint(seq, 10)
}

func checkName(what, name string) error {
	if name == "" {
		return fmt.Errorf("jetstream store: empty %s name", what)
	}
	return nil
}

// Error mapping: what JetStream says, in the store's sentinels.

func isWrongLastSeq(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

func isStreamNotFound(err error) bool {
	var api *jetstream.APIError
	return errors.Is(err, jetstream.ErrStreamNotFound) ||
		errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamNotFound
}

func topicNotFound(topic string) error { return fmt.Errorf("topic %q: %w", topic, store.ErrNotFound) }

func subNotFound(topic, sub string) error {
	return fmt.Errorf("subscription %q of topic %q: %w", sub, topic, store.ErrNotFound)
}

func fenced(what string, err error) error {
	return fmt.Errorf("jetstream store: writing %s: %w (%v)", what, store.ErrFenced, err)
}

// scan calls fn with the latest value of every key of kv matching pattern, in key order.
//
// A key watch ends its initial values with a marker, and the marker can come before every key
// was delivered: the watcher sends it on the first message whose pending count is zero, and
// the server's count is not monotonic while keys of the bucket are written
// (nats-io/nats-server#4824; nats-io/nats.py#995 traced one on a three-node cluster with
// concurrent writes), which a subscription's state is all the time. The router takes the
// meta bucket's listings for the whole truth — a subscription left out of one is taken for
// deleted, and its cursor for none, which would let the trimmer trim what it has not
// delivered — and a node numbers its new dead-letter records after the highest it finds in
// the outbox's listing, so a record left out could be overwritten. For them str (the
// bucket's stream) is given: scan first reads which keys the stream holds (its subjects, a
// deleted key's marker included) and reads each one the watch did not deliver with a get
// (answered by the stream's leader with replicas). A key created after that first read may
// be missing, as from a listing made a moment earlier. With str nil (delivery histories,
// advisory, whose expiry a later listing catches up) the watch alone answers.
//
// marker, when not nil, is called with the key and revision of each deletion marker the watch
// delivered (see Store.scanMeta).
func scan(ctx context.Context, kv jetstream.KeyValue, str *bucketStream, pattern string, fn func(key string, val []byte) error, marker func(key string, rev uint64)) error {
	var want []string
	if str != nil {
		var err error
		if want, err = str.keys(ctx, kv, pattern); err != nil {
			return err
		}
	}
	w, err := kv.Watch(ctx, pattern)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	entries, err := watched(ctx, w)
	if err != nil {
		return err
	}
	if err := fillMissing(ctx, want, entries, kv.Get); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(entries)) {
		e := entries[k]
		if e.Operation() != jetstream.KeyValuePut {
			if marker != nil {
				marker(k, e.Revision())
			}
			continue
		}
		if err := fn(k, e.Value()); err != nil {
			return err
		}
	}
	return nil
}

// scanMeta is scan of the meta bucket, which then removes the deletion markers the listing
// found (see dropMarker): those a delete cut short left, and those of earlier releases, which
// deleted with markers and kept them for good. The removal is best effort — a failed one is
// tried again by the next listing — and is not the listing's failure.
func (s *Store) scanMeta(ctx context.Context, pattern string, fn func(key string, val []byte) error) error {
	type marker struct {
		key string
		rev uint64
	}
	var markers []marker
	err := scan(ctx, s.meta, s.metaStream, pattern, fn, func(key string, rev uint64) {
		markers = append(markers, marker{key, rev})
	})
	if err != nil {
		return err
	}
	for _, m := range markers {
		_ = purgeKey(ctx, s.meta, s.metaStream, m.key, m.rev)
	}
	return nil
}

// dropMarker removes the deletion marker a purge of key just left in the meta bucket.
//
// A key-value delete leaves a marker, kept for good: a deployment that creates and deletes
// topics and subscriptions would grow the bucket, and every listing reading it, without
// bound. Nothing needs the markers. No part of egrid watches the bucket's changes as they
// come: other nodes learn of a deletion from a listing (after a notice, or the periodic poll
// of the definitions), where a key without messages is as absent as a deleted one. And the
// compare-and-sets fence as before: a write on a revision read before the delete finds the
// key's subject empty, which is another revision, and fails with [store.ErrFenced]; a
// create of the name succeeds, as it does on a marker. So the marker goes at once, its
// subject purged up to the marker's own sequence number, which leaves a value written
// meanwhile (the name created again). A purge the bucket's nats.go offers (PurgeDeletes)
// would not do: it reads every value of the bucket and purges each marker's whole subject,
// a value written after the marker included. It is best effort, and not the delete's
// failure: a marker it could not remove (an outage) the next listing removes (scanMeta).
func (s *Store) dropMarker(ctx context.Context, key string) {
	m, err := s.metaStream.str.GetLastMsgForSubject(ctx, "$KV."+s.meta.Bucket()+"."+key)
	if err != nil {
		return // gone already, or left to the next listing
	}
	if op := m.Header.Get("KV-Operation"); op != "PURGE" && op != "DEL" {
		return // written again meanwhile
	}
	_ = purgeKey(ctx, s.meta, s.metaStream, key, m.Sequence)
}

// stream is scan without holding the values: it calls fn with each key's value as the watch
// delivers it, in no particular order, then with those of the keys the watch left out (read
// with a get, as scan does). A key written while the watch delivers its initial values may
// be given twice, the newer last. An error of fn ends it, returned as it is.
func stream(ctx context.Context, kv jetstream.KeyValue, str *bucketStream, pattern string, fn func(key string, val []byte) error) error {
	want, err := str.keys(ctx, kv, pattern)
	if err != nil {
		return err
	}
	w, err := kv.Watch(ctx, pattern)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	seen := make(map[string]bool, len(want))
	for done := false; !done; {
		select {
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return errors.New("listing keys: the watch ended early")
			case e == nil:
				done = true
			default:
				seen[e.Key()] = true
				if e.Operation() == jetstream.KeyValuePut {
					if err := fn(e.Key(), e.Value()); err != nil {
						return err
					}
				}
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for _, k := range want {
		if seen[k] {
			continue
		}
		e, err := kv.Get(ctx, k)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return fmt.Errorf("listing keys: reading key %s, which the watch did not deliver: %w", k, err)
		case e.Operation() == jetstream.KeyValuePut:
			if err := fn(k, e.Value()); err != nil {
				return err
			}
		}
	}
	return nil
}

// bucketStream is a key-value bucket's stream. nats.go's Stream.Info keeps what it read in
// its handle, without a lock, so listings read which keys it holds through a handle of their
// own (bucketkeys.Stored: one more request, on a listing's path only); Purge and
// GetLastMsgForSubject keep nothing, and the shared handle serves them.
type bucketStream struct {
	js   jetstream.JetStream
	name string
	str  jetstream.Stream // shared: Purge and GetLastMsgForSubject only
}

// keys returns the keys of kv (whose stream str is) matching pattern that str holds a message
// for, deletion markers included (bucketkeys.Stored).
func (b *bucketStream) keys(ctx context.Context, kv jetstream.KeyValue, pattern string) ([]string, error) {
	return bucketkeys.Stored(ctx, b.js, kv.Bucket(), pattern)
}

// watched reads a key watch's initial values up to its end marker: the latest entry of each
// key it delivered, a deleted key's marker included.
func watched(ctx context.Context, w jetstream.KeyWatcher) (map[string]jetstream.KeyValueEntry, error) {
	entries := make(map[string]jetstream.KeyValueEntry)
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("listing keys: the watch ended early")
			}
			if e == nil {
				return entries, nil
			}
			entries[e.Key()] = e
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// fillMissing reads with get each key of want that the watch did not deliver, into entries;
// a key get does not find was deleted meanwhile.
func fillMissing(ctx context.Context, want []string, entries map[string]jetstream.KeyValueEntry, get func(context.Context, string) (jetstream.KeyValueEntry, error)) error {
	for _, k := range want {
		if _, ok := entries[k]; ok {
			continue
		}
		e, err := get(ctx, k)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return fmt.Errorf("listing keys: reading key %s, which the watch did not deliver: %w", k, err)
		default:
			entries[k] = e
		}
	}
	return nil
}

// topicExists reports whether the topic has a definition.
func (s *Store) topicExists(ctx context.Context, topic string) error {
	if err := checkName("topic", topic); err != nil {
		return err
	}
	_, err := s.meta.Get(ctx, topicKey(topic))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return topicNotFound(topic)
	case err != nil:
		return fmt.Errorf("jetstream store: reading topic %q: %w", topic, err)
	}
	return nil
}

// PutTopic implements [store.Store]: the definition is a key of the meta bucket; a new topic
// also gets its journal stream, created before the definition so a topic that is listed
// always has one. A name whose stored definition does not decode is refused
// ([store.ErrDamaged]) until DeleteTopic removes it.
func (s *Store) PutTopic(ctx context.Context, name string, spec []byte) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := checkName("topic", name); err != nil {
		return err
	}
	val := appendOpaque(nil, spec)
	e, err := s.meta.Get(ctx, topicKey(name))
	switch {
	case err == nil:
		if _, derr := decodeOpaque(e.Value()); derr != nil {
			return topicDamaged(name, e.Revision(), derr)
		}
		if _, err := s.meta.Update(ctx, topicKey(name), val, e.Revision()); err != nil {
			if isWrongLastSeq(err) {
				return fenced("topic "+name, err)
			}
			return fmt.Errorf("jetstream store: writing topic %q: %w", name, err)
		}
		return nil
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return fmt.Errorf("jetstream store: reading topic %q: %w", name, err)
	}
	// A new topic: remove what a DeleteTopic cut short may have left, so it starts empty.
	if err := s.dropTopicData(ctx, name); err != nil {
		return err
	}
	_, err = s.js.CreateStream(ctx, jetstream.StreamConfig{
		Name:        s.streamName(name),
		Description: "egrid journal of topic " + name,
		Subjects:    []string{s.subject(name)},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardNew,
		// The writer gives every message an ID only to chain a pipeline's messages
		// (Nats-Expected-Last-Msg-Id); a short window keeps the server's table of them small.
		Duplicates:  time.Second,
		Storage:     s.storage(),
		Replicas:    s.opts.Replicas,
		AllowDirect: s.directReads(),
	})
	if err != nil {
		return fmt.Errorf("jetstream store: creating the journal stream of topic %q: %w", name, err)
	}
	if _, err := s.meta.Create(ctx, topicKey(name), val); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return fenced("topic "+name, err)
		}
		return fmt.Errorf("jetstream store: writing topic %q: %w", name, err)
	}
	return nil
}

// dropTopicData deletes a topic's journal stream and subscription records and forgets this
// store's writer and cached records of it.
func (s *Store) dropTopicData(ctx context.Context, topic string) error {
	s.mu.Lock()
	w := s.writers[topic]
	delete(s.writers, topic)
	prefix := "sub." + escape(topic) + "."
	for k := range s.subs {
		if strings.HasPrefix(k, prefix) {
			delete(s.subs, k)
		}
	}
	s.mu.Unlock()
	if w != nil {
		w.stop(topicNotFound(topic))
	}
	if err := s.js.DeleteStream(ctx, s.streamName(topic)); err != nil && !isStreamNotFound(err) {
		return fmt.Errorf("jetstream store: deleting the journal stream of topic %q: %w", topic, err)
	}
	var keys []string
	if err := s.scanMeta(ctx, subPattern(topic), func(key string, _ []byte) error {
		keys = append(keys, key)
		return nil
	}); err != nil {
		return fmt.Errorf("jetstream store: listing subscriptions of topic %q: %w", topic, err)
	}
	for _, k := range keys {
		if err := s.meta.Purge(ctx, k); err != nil {
			return fmt.Errorf("jetstream store: deleting subscription record %s: %w", k, err)
		}
		s.dropMarker(ctx, k)
	}
	subj := s.opts.Prefix + ".parked." + escape(topic) + ".>"
	if err := s.parked.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
		return fmt.Errorf("jetstream store: deleting the parked events of topic %q: %w", topic, err)
	}
	return s.purgeHistory(ctx, "h."+escape(topic)+".>")
}

// DeleteTopic implements [store.Store]. Deleting the definition is the commit point; the
// journal stream and the subscription records go next. When that is cut short (an outage),
// the next PutTopic of the name removes the rest.
func (s *Store) DeleteTopic(ctx context.Context, name string) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := s.topicExists(ctx, name); err != nil {
		return err
	}
	if err := s.meta.Purge(ctx, topicKey(name)); err != nil {
		return fmt.Errorf("jetstream store: deleting topic %q: %w", name, err)
	}
	s.dropMarker(ctx, topicKey(name))
	return s.dropTopicData(ctx, name)
}

// Topics implements [store.Store]. A definition that does not decode is left out, logged
// once and counted ([DamageDefinition]): the others are listed.
func (s *Store) Topics(ctx context.Context) ([]store.Definition, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	defs := []store.Definition{}
	err = s.scanMeta(ctx, "topic.*", func(key string, val []byte) error {
		name, err := unescape(strings.TrimPrefix(key, "topic."))
		if err != nil {
			s.keyDamage(s.meta.Bucket(), key, "a topic", err) // left out: see metadamage.go
			return nil
		}
		spec, err := decodeOpaque(val)
		if err != nil {
			s.defDamage(key, val, name, "", err) // left out: see metadamage.go
			return nil
		}
		defs = append(defs, store.Definition{Name: name, Spec: spec})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream store: listing topics: %w", err)
	}
	slices.SortFunc(defs, func(a, b store.Definition) int { return strings.Compare(a.Name, b.Name) })
	return defs, nil
}

// entry returns this store's view of a subscription record, holding its semaphore; call
// release when done.
func (s *Store) entry(ctx context.Context, key string) (*subEntry, error) {
	s.mu.Lock()
	e, ok := s.subs[key]
	if !ok {
		e = &subEntry{sem: make(chan struct{}, 1)}
		s.subs[key] = e
	}
	s.mu.Unlock()
	select {
	case e.sem <- struct{}{}:
		return e, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (e *subEntry) release() { <-e.sem }

// load reads a subscription record into e (not found: store.ErrNotFound). A record that does
// not decode is a damaged definition (an error wrapping store.ErrDamaged) or a lost state,
// written again afresh (see damagedRecord).
func (s *Store) load(ctx context.Context, e *subEntry, topic, sub string) error {
	kv, err := s.meta.Get(ctx, subKey(topic, sub))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		e.rec = nil
		return subNotFound(topic, sub)
	case err != nil:
		return fmt.Errorf("jetstream store: reading subscription %q of topic %q: %w", sub, topic, err)
	}
	rec, err := decodeSubRecord(kv.Value())
	if err != nil {
		return s.damagedRecord(ctx, e, topic, sub, kv, err)
	}
	e.setRev(kv.Revision())
	e.rec = &rec
	return nil
}

// write stores rec on top of the revision e holds (compare-and-set); it loses against any
// other write since with store.ErrFenced.
func (s *Store) write(ctx context.Context, e *subEntry, topic, sub string, rec *subRecord) error {
	rev, err := s.meta.Update(ctx, subKey(topic, sub), appendSubRecord(nil, rec), e.rev)
	if err != nil {
		e.rec = nil // read again next time
		if isWrongLastSeq(err) {
			return fenced(fmt.Sprintf("subscription %q of topic %q", sub, topic), err)
		}
		return fmt.Errorf("jetstream store: writing subscription %q of topic %q: %w", sub, topic, err)
	}
	e.setRev(rev)
	e.rec = stripped(rec)
	return nil
}

// stripped drops the events of rec's parked events (in place: rec is the store's own), which
// the cache does not need: only LoadSubscription returns them, and it reads them.
func stripped(rec *subRecord) *subRecord {
	for i := range rec.parked {
		rec.parked[i].Event = nil
	}
	return rec
}

// putBodies stores the copies of the events of newly parked events, before the record that
// names them (a copy no record names is never read), and returns the stream sequence
// numbers of the copies JetStream acknowledged, those of a failed call included.
func (s *Store) putBodies(ctx context.Context, topic, sub string, ps []store.Parked) ([]uint64, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	fs := make([]jetstream.PubAckFuture, 0, len(ps))
	var perr error
	for _, p := range ps {
		f, err := s.js.PublishMsgAsync(&nats.Msg{Subject: s.parkedSubject(topic, sub, p.Seq), Data: appendBody(nil, p.Event)})
		if err != nil {
			perr = fmt.Errorf("jetstream store: storing parked event %d of subscription %q of topic %q: %w", p.Seq, sub, topic, err)
			break
		}
		fs = append(fs, f)
	}
	// Every acknowledgement is waited for, after a failure too, so that the caller can
	// delete each copy that was stored.
	var seqs []uint64
	for i, f := range fs {
		select {
		case ack := <-f.Ok():
			seqs = append(seqs, ack.Sequence)
		case err := <-f.Err():
			if perr == nil {
				perr = fmt.Errorf("jetstream store: storing parked event %d of subscription %q of topic %q: %w", ps[i].Seq, sub, topic, err)
			}
		case <-ctx.Done():
			return seqs, fmt.Errorf("jetstream store: storing parked events of subscription %q of topic %q: %w", sub, topic, ctx.Err())
		}
	}
	return seqs, perr
}

// dropCopies deletes the parked events' copies an update stored, by their sequence numbers,
// when the update applied nothing (its record write was fenced, or not every copy was
// stored): no record names them, and they would stay until the subscription is deleted —
// one update's new parks at each change of hands. Deleting by sequence number takes only
// this update's copies: another node that parked the same event meanwhile keeps its own
// (the stream keeps every copy of a subject; see parkedCopies). It is best effort: a copy
// whose delete failed (an outage) is never read, and goes with its subscription.
func (s *Store) dropCopies(ctx context.Context, seqs []uint64) {
	_ = each(ctx, len(seqs), func(ctx context.Context, i int) error {
		_ = s.parked.DeleteMsg(ctx, seqs[i]) // gone already when its event was unparked meanwhile
		return nil                           // the others are deleted all the same
	})
}

// dropBodies deletes the copies of events no longer parked, after the record that stopped
// naming them, up to bodyCalls at once and without the subscription's semaphore: a reader
// that finds a copy gone meanwhile leaves its event out as settled (readParked). It is best
// effort: a failure (or a crash before it) leaves copies no record names, which nothing reads
// and nothing cleans up but DeleteSubscription and DeleteTopic (the parked stream keeps one
// message per subject, with no age limit). The purges were registered (markPurging) while
// the update held the semaphore, and done ends them: an update of the same subscription that
// parks one of those Seqs again meanwhile waits for its purge before it writes the new copy
// (awaitPurges), which the purge would otherwise delete.
func (s *Store) dropBodies(ctx context.Context, topic, sub string, seqs []uint64, done func()) {
	defer done()
	if s.dropBodiesHook != nil {
		s.dropBodiesHook()
	}
	_ = each(ctx, len(seqs), func(ctx context.Context, i int) error {
		return s.parked.Purge(ctx, jetstream.WithPurgeSubject(s.parkedSubject(topic, sub, seqs[i])))
	})
}

// markPurging registers the purges of the copies of seqs, about to begin, and returns what
// ends them.
func (s *Store) markPurging(topic, sub string, seqs []uint64) func() {
	if len(seqs) == 0 {
		return func() {}
	}
	ch := make(chan struct{})
	subjs := make([]string, len(seqs))
	s.mu.Lock()
	for i, seq := range seqs {
		subjs[i] = s.parkedSubject(topic, sub, seq)
		s.purging[subjs[i]] = ch
	}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		for _, subj := range subjs {
			if s.purging[subj] == ch {
				delete(s.purging, subj)
			}
		}
		s.mu.Unlock()
		close(ch)
	}
}

// awaitPurges waits for the purges under way of the copies of ps' events.
func (s *Store) awaitPurges(ctx context.Context, topic, sub string, ps []store.Parked) error {
	for _, p := range ps {
		s.mu.Lock()
		ch := s.purging[s.parkedSubject(topic, sub, p.Seq)]
		s.mu.Unlock()
		if ch == nil {
			continue
		}
		if s.purgeWaitHook != nil {
			s.purgeWaitHook()
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("jetstream store: parked event %d of subscription %q of topic %q: waiting for the purge of its earlier copy: %w", p.Seq, sub, topic, ctx.Err())
		}
	}
	return nil
}

// PutSubscription implements [store.Store]. The definition and the state are one record, so
// a new subscription is created with its cursor and epoch in one write.
func (s *Store) PutSubscription(ctx context.Context, topic, name string, spec []byte) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := checkName("subscription", name); err != nil {
		return err
	}
	if err := s.topicExists(ctx, topic); err != nil {
		return err
	}
	key := subKey(topic, name)
	e, err := s.entry(ctx, key)
	if err != nil {
		return err
	}
	defer e.release()
	if e.rec == nil {
		if err := s.load(ctx, e, topic, name); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	if e.rec != nil {
		rec := *e.rec
		rec.spec = slices.Clone(spec)
		return s.write(ctx, e, topic, name, &rec)
	}
	last, err := s.lastSeq(ctx, topic)
	if err != nil {
		return err
	}
	rec := &subRecord{epoch: newEpoch(), spec: slices.Clone(spec), cursor: last}
	rev, err := s.meta.Create(ctx, key, appendSubRecord(nil, rec))
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return fenced(fmt.Sprintf("subscription %q of topic %q", name, topic), err)
		}
		return fmt.Errorf("jetstream store: writing subscription %q of topic %q: %w", name, topic, err)
	}
	e.setRev(rev)
	e.rec = rec
	return nil
}

// swapTries bounds SwapSubscription's tries: each write that loses to a state write of
// another node (its cursor moving: the definition still the one expected) reads the record
// again and tries once more.
const swapTries = 8

// SwapSubscription implements [store.Store]. The definition and the state are one record: it
// is read afresh (never from the cache) and written on the revision read, so a write of
// another node in between fails the write; the record is then read again, and the swap
// fails with [store.ErrChanged] only when its definition is another. Past swapTries writes
// lost to state writes it fails with [store.ErrFenced].
func (s *Store) SwapSubscription(ctx context.Context, topic, name string, old, spec []byte) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := s.topicExists(ctx, topic); err != nil {
		return err
	}
	e, err := s.entry(ctx, subKey(topic, name))
	if err != nil {
		return err
	}
	defer e.release()
	for try := 1; ; try++ {
		if err := s.load(ctx, e, topic, name); err != nil {
			return err
		}
		if !bytes.Equal(e.rec.spec, old) {
			return fmt.Errorf("jetstream store: subscription %q of topic %q: %w", name, topic, store.ErrChanged)
		}
		rec := *e.rec
		rec.spec = slices.Clone(spec)
		err := s.write(ctx, e, topic, name, &rec)
		if err == nil || !errors.Is(err, store.ErrFenced) || try == swapTries {
			return err
		}
	}
}

// DeleteSubscription implements [store.Store]. It deletes a subscription whose definition
// does not decode too, freeing the name.
func (s *Store) DeleteSubscription(ctx context.Context, topic, name string) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := s.topicExists(ctx, topic); err != nil {
		return err
	}
	key := subKey(topic, name)
	e, err := s.entry(ctx, key)
	if err != nil {
		return err
	}
	defer e.release()
	if err := s.load(ctx, e, topic, name); err != nil {
		d, ok := asDamagedDef(err)
		if !ok {
			return err
		}
		e.setRev(d.rev) // a damaged definition is deleted all the same
	}
	if err := s.meta.Purge(ctx, key, jetstream.LastRevision(e.rev)); err != nil {
		e.rec = nil
		if isWrongLastSeq(err) {
			return fenced(fmt.Sprintf("subscription %q of topic %q", name, topic), err)
		}
		return fmt.Errorf("jetstream store: deleting subscription %q of topic %q: %w", name, topic, err)
	}
	return s.dropSub(ctx, e, key, topic, name)
}

// dropSub removes what is stored for a subscription whose record (key, held as e) was just
// deleted: this store's cache of it, its parked events and its delivery histories.
func (s *Store) dropSub(ctx context.Context, e *subEntry, key, topic, name string) error {
	e.rec = nil
	s.mu.Lock()
	if s.subs[key] == e {
		delete(s.subs, key)
	}
	s.mu.Unlock()
	s.dropMarker(ctx, key)
	subj := s.opts.Prefix + ".parked." + escape(topic) + "." + escape(name) + ".*"
	if err := s.parked.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
		return fmt.Errorf("jetstream store: deleting the parked events of subscription %q of topic %q: %w", name, topic, err)
	}
	return s.purgeHistory(ctx, historyPrefix(topic, name)+"*")
}

// Subscriptions implements [store.Store]. A record whose definition does not decode is left
// out, logged once and counted ([DamageDefinition]); one whose definition decodes is listed,
// its state being another matter (see LoadSubscription). Each definition carries its record's
// epoch as its [store.Definition.Life].
func (s *Store) Subscriptions(ctx context.Context, topic string) ([]store.Definition, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if err := s.topicExists(ctx, topic); err != nil {
		return nil, err
	}
	defs := []store.Definition{}
	err = s.scanSubs(ctx, topic, func(name string, val []byte) error {
		_, epoch, spec, err := decodeSubHead(val)
		if err != nil {
			s.defDamage(subKey(topic, name), val, topic, name, err) // left out: see metadamage.go
			return nil
		}
		defs = append(defs, store.Definition{Name: name, Spec: spec, Life: epoch})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(defs, func(a, b store.Definition) int { return strings.Compare(a.Name, b.Name) })
	return defs, nil
}

func (s *Store) scanSubs(ctx context.Context, topic string, fn func(name string, val []byte) error) error {
	prefix := "sub." + escape(topic) + "."
	err := s.scanMeta(ctx, subPattern(topic), func(key string, val []byte) error {
		name, err := unescape(strings.TrimPrefix(key, prefix))
		if err != nil {
			s.keyDamage(s.meta.Bucket(), key, fmt.Sprintf("a subscription of topic %q", topic), err) // left out: see metadamage.go
			return nil
		}
		if err := fn(name, val); err != nil {
			return fmt.Errorf("subscription %q: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("jetstream store: listing subscriptions of topic %q: %w", topic, err)
	}
	return nil
}

// Cursors implements [store.Store]. Unlike the memory and disk stores it reads the bucket
// (one watch of the topic's subscription keys), so every node sees every cursor. A
// subscription whose definition does not decode is left out, as Subscriptions leaves it out.
func (s *Store) Cursors(ctx context.Context, topic string) (map[string]uint64, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if err := s.topicExists(ctx, topic); err != nil {
		return nil, err
	}
	cursors := make(map[string]uint64)
	err = s.scanSubs(ctx, topic, func(name string, val []byte) error {
		c, _, _, err := decodeSubHead(val)
		if err != nil {
			s.defDamage(subKey(topic, name), val, topic, name, err) // not served: see metadamage.go
			return nil
		}
		cursors[name] = c
		return nil
	})
	if err != nil {
		return nil, err
	}
	return cursors, nil
}

// LoadSubscription implements [store.Store]. It always reads the bucket and takes the
// revision it read as the base of this store's next write of the subscription: a node taking
// a subscription over loads it first. A parked event whose copy cannot be read is left out of the
// state, as [Store.ParkedEvents] leaves it out: one damaged copy does not stop the
// subscription from loading. A record whose state does not decode (its definition does)
// loads as a fresh state written back — its cursor just before the oldest event the topic's
// journal holds, nothing parked, no probation, a new epoch — logged once and counted
// ([DamageEntry]); one whose definition does not decode fails with [store.ErrDamaged] (see
// metadamage.go).
func (s *Store) LoadSubscription(ctx context.Context, topic, sub string) (store.SubscriptionState, error) {
	return s.loadSubscription(ctx, topic, sub, true)
}

// LoadSubscriptionIndex implements [store.Store]: LoadSubscription without reading the
// parked events' messages.
func (s *Store) LoadSubscriptionIndex(ctx context.Context, topic, sub string) (store.SubscriptionState, error) {
	return s.loadSubscription(ctx, topic, sub, false)
}

func (s *Store) loadSubscription(ctx context.Context, topic, sub string, bodies bool) (store.SubscriptionState, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return store.SubscriptionState{}, err
	}
	defer cancel()
	st, err := s.loadState(ctx, topic, sub)
	if err != nil {
		return store.SubscriptionState{}, err
	}
	if bodies {
		if st.Parked, err = s.readParked(ctx, topic, sub, st.Epoch, st.Parked); err != nil {
			return store.SubscriptionState{}, err
		}
	}
	return st, nil
}

// loadState reads a subscription's record into this store's view, the base of its next
// write, and returns a copy of it without the parked events' bodies. It holds the
// subscription's semaphore for the record's read only: the bodies are read after.
func (s *Store) loadState(ctx context.Context, topic, sub string) (store.SubscriptionState, error) {
	e, err := s.entry(ctx, subKey(topic, sub))
	if err != nil {
		return store.SubscriptionState{}, err
	}
	defer e.release()
	if err := s.load(ctx, e, topic, sub); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			if terr := s.topicExists(ctx, topic); terr != nil {
				return store.SubscriptionState{}, terr
			}
		}
		return store.SubscriptionState{}, err
	}
	return store.SubscriptionState{
		Epoch:     e.rec.epoch,
		Cursor:    e.rec.cursor,
		Parked:    slices.Clone(e.rec.parked),
		Probation: slices.Clone(e.rec.probation),
	}, nil
}

// ParkedEvents implements [store.Store]. It reads the subscription's record when this store
// holds none (as UpdateSubscription does), then one message per parked event asked for,
// after letting the record go: an update of the subscription meanwhile is not held up.
// A parked event whose copy does not decode, or is missing, although the record names it is
// left out, lost, logged and counted (see readParked): the subscription forgets it and goes
// on with its other events.
func (s *Store) ParkedEvents(ctx context.Context, topic, sub string, seqs []uint64) ([]store.Parked, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	epoch, out, err := s.parkedIndex(ctx, topic, sub, seqs)
	if err != nil {
		return nil, err
	}
	return s.readParked(ctx, topic, sub, epoch, out)
}

// parkedIndex returns the subscription's epoch and a copy of its parked events among seqs,
// without their bodies, holding the subscription's semaphore only while it reads the record.
func (s *Store) parkedIndex(ctx context.Context, topic, sub string, seqs []uint64) (uint64, []store.Parked, error) {
	e, err := s.entry(ctx, subKey(topic, sub))
	if err != nil {
		return 0, nil, err
	}
	defer e.release()
	if e.rec == nil {
		if err := s.load(ctx, e, topic, sub); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				if terr := s.topicExists(ctx, topic); terr != nil {
					return 0, nil, terr
				}
			}
			return 0, nil, err
		}
	}
	want := make(map[uint64]bool, len(seqs))
	for _, seq := range seqs {
		want[seq] = true
	}
	var out []store.Parked
	for _, p := range e.rec.parked { // ordered by Seq; copies, Event nil (stripped)
		if want[p.Seq] {
			out = append(out, p)
		}
	}
	return e.rec.epoch, out, nil
}

// bodyCalls bounds the NATS calls readParked, dropBodies and putDeadLetters have under way at
// once for one store call: a few round trips' time for a batch of hundreds, without flooding
// the server.
const bodyCalls = 16

// each calls fn(ctx, i) for i in [0, n), up to bodyCalls at once, and returns the first error
// one returned (the others then see ctx cancelled), or ctx's error when it ended before every
// call was made.
func each(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, bodyCalls)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ferr error
	)
	made := 0
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		made++
		wg.Go(func() {
			defer func() { <-sem }()
			if err := fn(ctx, i); err != nil {
				mu.Lock()
				if ferr == nil {
					ferr = err
				}
				mu.Unlock()
				cancel(err)
			}
		})
	}
	wg.Wait()
	if ferr == nil && made < n {
		return context.Cause(ctx)
	}
	return ferr
}

// readParked reads the event of each of parked (events of the subscription's life epoch)
// from its message and returns them, ordered as given. It runs without the subscription's
// semaphore, so an update of the subscription may settle a parked event and purge its message
// meanwhile: such an event is left out, as settled events are, per [store.Store.ParkedEvents]
// ("a seq that is not parked any more is left out"); a loaded state is then the record as
// read but for the events settled since, which the caller must not attempt again anyway. A
// subscription deleted meanwhile is store.ErrNotFound.
//
// A copy that is missing, or that does not decode, is taken for settled only when a fresh
// read of the record shows it. One the record still names (read again after that read, as an
// update stores a copy before the record naming it) is damage: the event is left out too, as
// the disk store leaves out a parked event whose record does not decode, and is lost to the
// subscription — neither retried nor dead-lettered, its event being unreadable — which goes
// on with its other events (a subscription actor forgets a parked event ParkedEvents leaves
// out, and its next update purges the copy). It is logged once as an ERROR naming the topic,
// the subscription, the event and what to do, and counted ([DamageEntry], [Store.Health]).
// Failing the read instead would fail the subscription at every start, for good. A copy of
// a format this release does not know is an error: it may be a newer release's; upgrade the
// node.
func (s *Store) readParked(ctx context.Context, topic, sub string, epoch uint64, parked []store.Parked) ([]store.Parked, error) {
	if len(parked) == 0 {
		return parked, nil
	}
	if s.readParkedHook != nil {
		s.readParkedHook()
	}
	bad := make([]bool, len(parked)) // missing, or not decoding
	err := each(ctx, len(parked), func(ctx context.Context, i int) error {
		p := &parked[i]
		ev, _, err := s.readCopy(ctx, topic, sub, p.Seq)
		if err != nil {
			return err
		}
		p.Event, bad[i] = ev, ev == nil
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !slices.Contains(bad, true) {
		return parked, nil
	}
	// Some copies are gone or damaged: read the record afresh (not this store's view, which
	// only the semaphore's holder may touch) to tell settled events from lost ones.
	kv, err := s.meta.Get(ctx, subKey(topic, sub))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, subNotFound(topic, sub)
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream store: reading subscription %q of topic %q: %w", sub, topic, err)
	}
	rec, err := decodeSubRecord(kv.Value())
	if err != nil {
		return nil, fmt.Errorf("jetstream store: subscription %q of topic %q: %w", sub, topic, err)
	}
	if rec.epoch != epoch { // deleted and created again: the life asked about is gone
		return nil, subNotFound(topic, sub)
	}
	named := make(map[uint64]bool, len(rec.parked))
	for _, p := range rec.parked {
		named[p.Seq] = true
	}
	out := parked[:0]
	for i, p := range parked {
		if !bad[i] {
			out = append(out, p)
			continue
		}
		if !named[p.Seq] {
			continue // settled meanwhile
		}
		// Parked again meanwhile, its copy stored before the record read above: read it again.
		ev, damage, err := s.readCopy(ctx, topic, sub, p.Seq)
		if err != nil {
			return nil, err
		}
		if ev != nil {
			p.Event = ev
			out = append(out, p)
			continue
		}
		s.copyDamage(topic, sub, epoch, p.Seq, damage)
	}
	return out, nil
}

// copyLoss is what [Store.readParked] found wrong with the copy of a parked event the
// subscription's record names: err is the decoding error of a copy that does not decode
// (streamSeq its message), nil for a missing copy.
type copyLoss struct {
	streamSeq uint64
	err       error
}

// readCopy reads the copy of parked event seq of the subscription: its event, or nil and what
// is wrong with it when it is missing or does not decode. Its error is a failed read, or a copy
// of a format this release does not know.
func (s *Store) readCopy(ctx context.Context, topic, sub string, seq uint64) (*schemas.Event, copyLoss, error) {
	m, err := s.parked.GetLastMsgForSubject(ctx, s.parkedSubject(topic, sub, seq))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, copyLoss{}, nil
	}
	if err != nil {
		return nil, copyLoss{}, fmt.Errorf("jetstream store: reading parked event %d of subscription %q of topic %q: %w", seq, sub, topic, err)
	}
	ev, err := decodeBody(m.Data)
	switch {
	case err == nil:
		return ev, copyLoss{}, nil
	case (len(m.Data) == 0 || m.Data[0] == formatV1) && errors.Is(err, errCorrupt):
		return nil, copyLoss{streamSeq: m.Sequence, err: err}, nil
	default:
		return nil, copyLoss{}, fmt.Errorf("jetstream store: parked event %d of subscription %q of topic %q (a newer release's format? upgrade this node): %w", seq, sub, topic, err)
	}
}

// copyDamage reports, once, the copy of parked event seq of the subscription (of life epoch)
// that is missing or does not decode although the record names the event: an ERROR naming
// the topic, the subscription, the event and what to do, and a count ([DamageEntry]).
func (s *Store) copyDamage(topic, sub string, epoch, seq uint64, d copyLoss) {
	key := fmt.Sprintf("%s %d %d", s.parkedSubject(topic, sub, seq), epoch, d.streamSeq)
	s.lostMu.Lock()
	seen := s.lost[key]
	if !seen {
		if s.lost == nil {
			s.lost = make(map[string]bool)
		}
		s.lost[key] = true
	}
	s.lostMu.Unlock()
	if seen {
		return
	}
	p := s.opts.Prefix
	if d.err != nil {
		s.opts.Logger.Error("jetstream store: a parked event's copy does not decode; the event is lost to the subscription (neither retried nor dead-lettered: its event cannot be read), which goes on with its other events. It is not a copy egrid stored (a message published to the parked events' subjects by something else, or damage): give publish rights on "+p+".parked.> to egrid's NATS user only, and recover the event from a backup of stream "+p+"_parked if one holds it",
			"topic", topic, "subscription", sub, "seq", seq, "stream", p+"_parked", "streamSeq", d.streamSeq, "err", d.err)
	} else {
		s.opts.Logger.Error("jetstream store: a parked event's copy is missing although the subscription's record names the event; the event is lost to the subscription (neither retried nor dead-lettered: its event cannot be read), which goes on with its other events. Something other than egrid deleted it: give delete and purge rights on stream "+p+"_parked to egrid's NATS user only, and recover the event from a backup of the stream if one holds it",
			"topic", topic, "subscription", sub, "seq", seq, "stream", p+"_parked")
	}
	s.damaged(DamageEntry)
}

// damaged counts one piece of damage of kind.
func (s *Store) damaged(kind string) {
	s.corruptions.Add(1)
	if s.opts.OnCorruption != nil {
		s.opts.OnCorruption(kind)
	}
}

// Health implements [store.HealthReporter]. The store keeps nothing on a disk of its own, so
// it is always Healthy (a call made while NATS is unreachable fails with [ErrNotConnected]);
// Corruptions counts the damage it found, each logged as an ERROR: journal messages passed
// over ([Store.Read]), parked events' copies lost ([Store.ParkedEvents]), definitions left out
// of the listings ([Store.Topics], [Store.Subscriptions]) and subscriptions' states lost
// ([Store.LoadSubscription]).
func (s *Store) Health() store.Health {
	return store.Health{State: store.Healthy, Corruptions: int(s.corruptions.Load())}
}

var _ store.HealthReporter = (*Store)(nil)

// UpdateSubscription implements [store.Store]: one compare-and-set of the subscription's
// record on the revision this store last read or wrote. A record another store wrote since
// makes it fail with [store.ErrFenced], and nothing of u's state is applied. An update of
// another epoch than the record's (as this store last read or wrote it) fails with
// [store.ErrStaleEpoch] before anything is written, its dead letters included.
//
// JetStream has no transaction across the record and the dead-letter bucket, so
// [store.Update.DeadLetters] are written first, each acknowledged, and the record second: a
// failure between the two (an outage, or a fenced record) leaves dead letters in the outbox
// whose events are still unsettled. Those events end again later, so an ending is never lost
// but may be dead-lettered twice (at least once, as every delivery). The copies of the events
// it settles are purged after the write, without holding the subscription (dropBodies); the
// copies of the events it parks are stored before it, and deleted again when the write is
// fenced (dropCopies).
func (s *Store) UpdateSubscription(ctx context.Context, topic, sub string, u store.Update) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	gone, done, err := s.updateRecord(ctx, topic, sub, u)
	if err != nil {
		return err
	}
	s.dropBodies(ctx, topic, sub, gone, done)
	return nil
}

// updateRecord is UpdateSubscription but for dropping the messages of the events it settled,
// whose Seqs it returns with what ends their purges (registered while it holds the
// subscription's semaphore, which the purges, one call per event, need not: see dropBodies).
func (s *Store) updateRecord(ctx context.Context, topic, sub string, u store.Update) ([]uint64, func(), error) {
	e, err := s.entry(ctx, subKey(topic, sub))
	if err != nil {
		return nil, nil, err
	}
	defer e.release()
	if e.rec == nil {
		if err := s.load(ctx, e, topic, sub); err != nil {
			return nil, nil, err
		}
	}
	if u.Epoch != 0 && u.Epoch != e.rec.epoch {
		return nil, nil, fmt.Errorf("subscription %q of topic %q: %w", sub, topic, store.ErrStaleEpoch)
	}
	if len(u.DeadLetters) > 0 {
		if err := s.putDeadLetters(ctx, u.DeadLetters); err != nil {
			return nil, nil, err
		}
	}
	old := e.rec
	rec := applyUpdate(old, u)
	had := make(map[uint64]bool, len(old.parked))
	for _, p := range old.parked {
		had[p.Seq] = true
	}
	var fresh []store.Parked
	has := make(map[uint64]bool, len(rec.parked))
	for _, p := range rec.parked {
		has[p.Seq] = true
		if !had[p.Seq] {
			fresh = append(fresh, p)
		}
	}
	if err := s.awaitPurges(ctx, topic, sub, fresh); err != nil {
		return nil, nil, err
	}
	copies, err := s.putBodies(ctx, topic, sub, fresh)
	if err != nil {
		s.dropCopies(ctx, copies)
		return nil, nil, err
	}
	if err := s.write(ctx, e, topic, sub, rec); err != nil {
		if errors.Is(err, store.ErrFenced) { // nothing of it applied: no record names them
			s.dropCopies(ctx, copies)
		}
		return nil, nil, err
	}
	var gone []uint64
	for _, p := range old.parked {
		if !has[p.Seq] {
			gone = append(gone, p.Seq)
		}
	}
	return gone, s.markPurging(topic, sub, gone), nil
}

// newEpoch returns a new subscription's epoch: random, so that nodes creating subscriptions
// need no shared counter, and above legacyEpoch. Two lives of one name share an epoch with a
// chance of 2⁻⁶⁴.
func newEpoch() uint64 {
	for {
		if e := rand.Uint64(); e > legacyEpoch {
			return e
		}
	}
}

// applyUpdate returns a new record: cur with u applied (Delete before Put).
func applyUpdate(cur *subRecord, u store.Update) *subRecord {
	rec := &subRecord{epoch: cur.epoch, spec: cur.spec, cursor: max(cur.cursor, u.Cursor), probation: cur.probation}
	switch {
	case u.Probation == nil:
	case len(u.Probation) == 0:
		rec.probation = nil
	default:
		rec.probation = slices.Clone(u.Probation)
	}
	if len(u.Put) == 0 && len(u.Delete) == 0 {
		rec.parked = cur.parked
		return rec
	}
	drop := make(map[uint64]bool, len(u.Delete)+len(u.Put))
	for _, seq := range u.Delete {
		drop[seq] = true
	}
	for _, p := range u.Put {
		drop[p.Seq] = true
	}
	rec.parked = make([]store.Parked, 0, len(cur.parked)+len(u.Put))
	for _, p := range cur.parked {
		if !drop[p.Seq] {
			rec.parked = append(rec.parked, p)
		}
	}
	put := make(map[uint64]store.Parked, len(u.Put))
	for _, p := range u.Put {
		put[p.Seq] = p // the last of equal Seqs wins
	}
	for _, p := range put {
		rec.parked = append(rec.parked, p)
	}
	slices.SortFunc(rec.parked, func(a, b store.Parked) int { return cmp.Compare(a.Seq, b.Seq) })
	return rec
}

// PutDeadLetters implements [store.Store]: one key per record in the dead-letter bucket, each
// written once JetStream acknowledged it (stored on a majority of the replicas). The keys are
// written up to bodyCalls at once (a batch of endings costs a few round trips, not one each),
// after every record's id is checked: a bad id writes none of them.
func (s *Store) PutDeadLetters(ctx context.Context, recs []store.DeadLetterRecord) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	return s.putDeadLetters(ctx, recs)
}

func (s *Store) putDeadLetters(ctx context.Context, recs []store.DeadLetterRecord) error {
	for _, r := range recs {
		if err := checkName("dead-letter record", r.ID); err != nil {
			return err
		}
	}
	return each(ctx, len(recs), func(ctx context.Context, i int) error {
		r := recs[i]
		if _, err := s.dead.Put(ctx, escape(r.ID), appendOpaque(nil, r.Payload)); err != nil {
			return fmt.Errorf("jetstream store: writing dead-letter record %q: %w", r.ID, err)
		}
		return nil
	})
}

// DeadLetters implements [store.Store].
func (s *Store) DeadLetters(ctx context.Context) ([]store.DeadLetterRecord, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	recs := []store.DeadLetterRecord{}
	err = scan(ctx, s.dead, s.deadStream, ">", func(key string, val []byte) error {
		id, err := unescape(key)
		if err != nil {
			s.keyDamage(s.dead.Bucket(), key, "a dead-letter record", err) // left out: see metadamage.go
			return nil
		}
		p, err := decodeOpaque(val)
		if err != nil {
			return fmt.Errorf("dead-letter record %q: %w", id, err)
		}
		recs = append(recs, store.DeadLetterRecord{ID: id, Payload: p})
		return nil
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("jetstream store: listing dead-letter records: %w", err)
	}
	slices.SortFunc(recs, func(a, b store.DeadLetterRecord) int { return strings.Compare(a.ID, b.ID) })
	return recs, nil
}

// ScanDeadLetters implements [store.Store]: a key watch of the dead-letter bucket, each
// record handed to fn as it arrives.
func (s *Store) ScanDeadLetters(ctx context.Context, fn func(store.DeadLetterRecord) error) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	var fnErr error
	err = stream(ctx, s.dead, s.deadStream, ">", func(key string, val []byte) error {
		id, err := unescape(key)
		if err != nil {
			s.keyDamage(s.dead.Bucket(), key, "a dead-letter record", err) // left out: see metadamage.go
			return nil
		}
		p, err := decodeOpaque(val)
		if err != nil {
			return fmt.Errorf("dead-letter record %q: %w", id, err)
		}
		if err := fn(store.DeadLetterRecord{ID: id, Payload: p}); err != nil {
			fnErr = err
			return err
		}
		return nil
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return fmt.Errorf("jetstream store: listing dead-letter records: %w", err)
	}
	return nil
}

// DeadLettersByID implements [store.Store]: a get of each id's key.
func (s *Store) DeadLettersByID(ctx context.Context, ids []string) ([]store.DeadLetterRecord, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	recs := make([]store.DeadLetterRecord, 0, len(ids))
	for _, id := range ids {
		if checkName("dead-letter record", id) != nil {
			continue // no such key can be stored
		}
		e, err := s.dead.Get(ctx, escape(id))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("jetstream store: reading dead-letter record %q: %w", id, err)
		}
		if e.Operation() != jetstream.KeyValuePut {
			continue
		}
		p, err := decodeOpaque(e.Value())
		if err != nil {
			return nil, fmt.Errorf("dead-letter record %q: %w", id, err)
		}
		recs = append(recs, store.DeadLetterRecord{ID: id, Payload: p})
	}
	return recs, nil
}

// DeleteDeadLetters implements [store.Store].
func (s *Store) DeleteDeadLetters(ctx context.Context, ids []string) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	for _, id := range ids {
		if id == "" {
			continue
		}
		// Its messages, leaving no deletion marker: the outbox takes one key per dead letter,
		// and markers, kept for good, would make every later listing longer.
		if err := purgeKey(ctx, s.dead, s.deadStream, escape(id), 0); err != nil {
			return fmt.Errorf("jetstream store: deleting dead-letter record %q: %w", id, err)
		}
	}
	return nil
}

// Close implements [store.Store]: it stops the journal writers (an Append waiting in one
// fails with [store.ErrClosed]) and closes the connection when [Dial] made it. Data stays
// in JetStream.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.mu.Lock()
	s.stopped = true
	ws := s.writers
	s.writers = make(map[string]*writer)
	s.mu.Unlock()
	for _, w := range ws {
		w.stop(store.ErrClosed)
	}
	if s.ownsNC {
		s.nc.Close()
	}
	return nil
}

var _ store.Store = (*Store)(nil)
