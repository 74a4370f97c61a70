package jetstream

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/internal/bucketkeys"
)

// Listings of a bucket's keys: scan and stream read a key watch's initial values and, given
// the bucket's stream, each key the watch left out; scanMeta and dropMarker remove the
// deletion markers of the meta bucket.

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
// the outbox's listing, so a record left out could be overwritten. So scan first reads which
// keys str (the bucket's stream) holds (its subjects, a deleted key's marker included) and
// reads each one the watch did not deliver with a get (answered by the stream's leader with
// replicas). A key created after that first read may be missing, as from a listing made a
// moment earlier.
//
// The marker can also never come: see watched. The listing then ends bucketkeys.WatchIdle
// after the watch's last value, with gets as above.
//
// marker, when not nil, is called with the key and revision of each deletion marker the watch
// delivered (see Store.scanMeta).
func scan(ctx context.Context, kv jetstream.KeyValue, str *bucketStream, pattern string, fn func(key string, val []byte) error, marker func(key string, rev uint64)) error {
	want, err := str.keys(ctx, kv, pattern)
	if err != nil {
		return err
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
// be given twice, the newer last. An error of fn ends it, returned as it is. A watch that
// stalls ends as scan's does (see watched).
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
	err = bucketkeys.InitialValues(ctx, w, func(e jetstream.KeyValueEntry) error {
		seen[e.Key()] = true
		if e.Operation() != jetstream.KeyValuePut {
			return nil
		}
		return fn(e.Key(), e.Value())
	})
	if err != nil {
		return err
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
// key it delivered, a deleted key's marker included. It stops early when no value came for
// bucketkeys.WatchIdle (bucketkeys.InitialValues), the listing then reading the keys left
// out with gets (fillMissing).
//
// The marker can never come. nats.go's watcher sends it on the message that says nothing
// more is pending, or once it received more messages than the first one said were pending;
// a key purged after the watch's consumer counted it and before it was delivered (a
// subscription or topic deleted, a deletion marker removed, by this node or another) is never
// delivered, so the message saying nothing more is pending never comes, and the watcher waits
// for the next write of a key the watch matches, which may never come either: a listing of a
// deleted topic's subscriptions waited out its whole deadline and failed.
func watched(ctx context.Context, w jetstream.KeyWatcher) (map[string]jetstream.KeyValueEntry, error) {
	entries := make(map[string]jetstream.KeyValueEntry)
	err := bucketkeys.InitialValues(ctx, w, func(e jetstream.KeyValueEntry) error {
		entries[e.Key()] = e
		return nil
	})
	if err != nil {
		return nil, err
	}
	return entries, nil
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
