package jetstream

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/store"
)

// Delivery histories live in their own key-value bucket, one key per event of a subscription:
// h.<topic>.<subscription>.<sha256 of the event id>. The id is hashed because an event id may
// be up to 1 KiB of any bytes; the value holds the id itself, so a lookup checks it. A value
// is the format version, the expiry (8 bytes, Unix nanoseconds, big endian), the id's length
// (uvarint), the id and the payload.

func historyKey(topic, sub, eventID string) string {
	sum := sha256.Sum256([]byte(eventID))
	return historyPrefix(topic, sub) + hex.EncodeToString(sum[:])
}

func historyPrefix(topic, sub string) string { return "h." + escape(topic) + "." + escape(sub) + "." }

func encodeHistory(r store.HistoryRecord) []byte {
	b := make([]byte, 0, 1+8+binary.MaxVarintLen64+len(r.EventID)+len(r.Payload))
	b = append(b, formatV1)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Expires.UnixNano()))
	b = binary.AppendUvarint(b, uint64(len(r.EventID)))
	b = append(b, r.EventID...)
	return append(b, r.Payload...)
}

func decodeHistory(b []byte) (store.HistoryRecord, error) {
	if len(b) < 9 || b[0] != formatV1 {
		return store.HistoryRecord{}, fmt.Errorf("%w: delivery history of an unknown format", errCorrupt)
	}
	expires := time.Unix(0, int64(binary.BigEndian.Uint64(b[1:9]))).UTC()
	n, k := binary.Uvarint(b[9:])
	if k <= 0 || uint64(len(b)-9-k) < n {
		return store.HistoryRecord{}, fmt.Errorf("%w: delivery history cut short", errCorrupt)
	}
	rest := b[9+k:]
	return store.HistoryRecord{
		EventID: string(rest[:n]),
		Expires: expires,
		Payload: append([]byte(nil), rest[n:]...),
	}, nil
}

// subscriptionExists reports whether the subscription has a record.
func (s *Store) subscriptionExists(ctx context.Context, topic, sub string) error {
	_, err := s.meta.Get(ctx, subKey(topic, sub))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return subNotFound(topic, sub)
	case err != nil:
		return fmt.Errorf("jetstream store: reading subscription %q of topic %q: %w", sub, topic, err)
	}
	return nil
}

// PutHistory implements [store.Store]: one key per event in the history bucket. Like the
// subscription records it is acknowledged by JetStream, which is more than the contract asks.
func (s *Store) PutHistory(ctx context.Context, topic, sub string, recs []store.HistoryRecord) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := s.subscriptionExists(ctx, topic, sub); err != nil {
		return err
	}
	for _, r := range recs {
		if _, err := s.history.Put(ctx, historyKey(topic, sub, r.EventID), encodeHistory(r)); err != nil {
			return fmt.Errorf("jetstream store: writing the delivery history of event %q: %w", r.EventID, err)
		}
	}
	return nil
}

// History implements [store.Store].
func (s *Store) History(ctx context.Context, topic, sub, eventID string, now time.Time) (store.HistoryRecord, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return store.HistoryRecord{}, err
	}
	defer cancel()
	notFound := fmt.Errorf("delivery history of event %q of subscription %q of topic %q: %w", eventID, sub, topic, store.ErrNotFound)
	e, err := s.history.Get(ctx, historyKey(topic, sub, eventID))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return store.HistoryRecord{}, notFound
	case err != nil:
		return store.HistoryRecord{}, fmt.Errorf("jetstream store: reading the delivery history of event %q: %w", eventID, err)
	}
	r, err := decodeHistory(e.Value())
	if err != nil {
		return store.HistoryRecord{}, fmt.Errorf("jetstream store: event %q: %w", eventID, err)
	}
	if r.EventID != eventID || !now.Before(r.Expires) {
		return store.HistoryRecord{}, notFound
	}
	return r, nil
}

// ExpireHistory implements [store.Store]: it reads the whole bucket, so the router calls it
// seldom (hourly).
func (s *Store) ExpireHistory(ctx context.Context, now time.Time) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	return s.purgeHistory(ctx, ">", func(r store.HistoryRecord) bool { return !now.Before(r.Expires) })
}

// purgeHistory deletes the histories whose keys match pattern and for which drop says so
// (every one when drop is nil).
func (s *Store) purgeHistory(ctx context.Context, pattern string, drop func(store.HistoryRecord) bool) error {
	var keys []string
	err := scan(ctx, s.history, nil, pattern, func(key string, val []byte) error {
		if drop != nil {
			r, err := decodeHistory(val)
			if err == nil && !drop(r) {
				return nil
			}
		}
		keys = append(keys, key)
		return nil
	})
	if err != nil {
		return fmt.Errorf("jetstream store: listing delivery histories: %w", err)
	}
	for _, k := range keys {
		if err := s.history.Purge(ctx, k); err != nil {
			return fmt.Errorf("jetstream store: deleting delivery history %s: %w", k, err)
		}
	}
	return nil
}
