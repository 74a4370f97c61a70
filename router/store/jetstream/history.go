package jetstream

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/store"
)

// Delivery histories live in their own key-value bucket, one key per event of a subscription:
// h.<topic>.<subscription>.<sha256 of the event id>. The id is hashed because an event id may
// be up to 1 KiB of any bytes; the value holds the id itself, so a lookup checks it. A value
// is the format version (historyV2), the writer's mark (8 bytes, big endian), the expiry (8
// bytes, Unix nanoseconds, big endian), the id's length (uvarint), the id and the payload;
// format 1, which earlier releases wrote, has no mark (it reads as mark 0).
//
// The mark fences out a node that no longer runs the subscription. A history is read,
// extended and written again by the node running the subscription (router/history.go), and
// a node that lost the subscription can still have such a write queued: landing after the
// new owner's, it would replace that history with an older one (a delivered event shown as
// still being retried). So a history is written with a compare-and-set on its key's revision
// and marked with the highest revision of the subscription's record the writing store read
// or wrote (subEntry.seen): the store that took the subscription over has read the record at
// or past every revision the old owner wrote, and a write whose mark is below the stored
// history's applies nothing and fails with [store.ErrFenced]. A write of equal marks (the new
// owner has not written the subscription's state yet) replaces the history, as the old
// owner's next state write would still win over the new owner's.

const historyV2 = 2

func historyKey(topic, sub, eventID string) string {
	sum := sha256.Sum256([]byte(eventID))
	return historyPrefix(topic, sub) + hex.EncodeToString(sum[:])
}

func historyPrefix(topic, sub string) string { return "h." + escape(topic) + "." + escape(sub) + "." }

func encodeHistory(mark uint64, r store.HistoryRecord) []byte {
	b := make([]byte, 0, 1+8+8+binary.MaxVarintLen64+len(r.EventID)+len(r.Payload))
	b = append(b, historyV2)
	b = binary.BigEndian.AppendUint64(b, mark)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Expires.UnixNano()))
	b = binary.AppendUvarint(b, uint64(len(r.EventID)))
	b = append(b, r.EventID...)
	return append(b, r.Payload...)
}

// decodeHistory decodes a history and its writer's mark (0 for format 1).
func decodeHistory(b []byte) (store.HistoryRecord, uint64, error) {
	var mark uint64
	switch {
	case len(b) >= 9 && b[0] == historyV2:
		mark, b = binary.BigEndian.Uint64(b[1:9]), b[8:]
	case len(b) >= 1 && b[0] == formatV1:
	default:
		return store.HistoryRecord{}, 0, fmt.Errorf("%w: delivery history of an unknown format", errCorrupt)
	}
	if len(b) < 9 {
		return store.HistoryRecord{}, 0, fmt.Errorf("%w: delivery history cut short", errCorrupt)
	}
	expires := time.Unix(0, int64(binary.BigEndian.Uint64(b[1:9]))).UTC()
	n, k := binary.Uvarint(b[9:])
	if k <= 0 || uint64(len(b)-9-k) < n {
		return store.HistoryRecord{}, 0, fmt.Errorf("%w: delivery history cut short", errCorrupt)
	}
	rest := b[9+k:]
	return store.HistoryRecord{
		EventID: string(rest[:n]),
		Expires: expires,
		Payload: append([]byte(nil), rest[n:]...),
	}, mark, nil
}

// subscriptionEpoch returns the epoch of the subscription's record, read from the bucket,
// and the record's revision.
func (s *Store) subscriptionEpoch(ctx context.Context, topic, sub string) (epoch, rev uint64, err error) {
	e, err := s.meta.Get(ctx, subKey(topic, sub))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return 0, 0, subNotFound(topic, sub)
	case err != nil:
		return 0, 0, fmt.Errorf("jetstream store: reading subscription %q of topic %q: %w", sub, topic, err)
	}
	epoch, err = decodeEpoch(e.Value())
	if err != nil {
		return 0, 0, fmt.Errorf("jetstream store: subscription %q of topic %q: %w", sub, topic, err)
	}
	return epoch, e.Revision(), nil
}

// historyMark returns the mark of this store's history writes of a subscription: the highest
// revision of its record this store read or wrote, or rev (the one just read) when it has
// neither (it never loaded the subscription).
func (s *Store) historyMark(topic, sub string, rev uint64) uint64 {
	s.mu.Lock()
	e := s.subs[subKey(topic, sub)]
	s.mu.Unlock()
	if e != nil {
		if seen := e.seen.Load(); seen > 0 {
			return seen
		}
	}
	return rev
}

// PutHistory implements [store.Store]: one key per event in the history bucket, each written
// with a compare-and-set and marked with this store's view of the subscription's record, so
// that a store that no longer runs the subscription cannot replace a history the one running
// it wrote (see the top of this file; such a write fails with [store.ErrFenced]). Like the
// subscription records it is acknowledged by JetStream, which is more than the contract asks.
// The epoch is checked against the subscription's record, read from the bucket (not this
// store's copy, which another node's delete and create leave stale) by the same read that
// checks the subscription exists. JetStream has no transaction across the record and the
// history bucket, and the writes do not hold the record's semaphore (state writes would wait
// behind them): a delete and create of the subscription between that read and the writes
// can still let them land under the new subscription.
func (s *Store) PutHistory(ctx context.Context, topic, sub string, epoch uint64, recs []store.HistoryRecord) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	stored, rev, err := s.subscriptionEpoch(ctx, topic, sub)
	if err != nil {
		return err
	}
	if epoch != 0 && epoch != stored {
		return fmt.Errorf("delivery history of subscription %q of topic %q: %w", sub, topic, store.ErrStaleEpoch)
	}
	mark := s.historyMark(topic, sub, rev)
	for _, r := range recs {
		if err := s.putHistory(ctx, historyKey(topic, sub, r.EventID), mark, r); err != nil {
			return fmt.Errorf("jetstream store: writing the delivery history of event %q of subscription %q of topic %q: %w", r.EventID, sub, topic, err)
		}
	}
	return nil
}

// historyTries bounds the compare-and-sets of one history: each lost to another write of the
// key reads it again.
const historyTries = 8

// putHistory writes one history under key on top of the one stored, unless that one's mark
// is above mark (store.ErrFenced).
func (s *Store) putHistory(ctx context.Context, key string, mark uint64, r store.HistoryRecord) error {
	val := encodeHistory(mark, r)
	for range historyTries {
		_, err := s.history.Create(ctx, key, val) // an event's first history: one round trip
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return err
		}
		e, err := s.history.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			continue // deleted meanwhile (expired): create it
		case err != nil:
			return err
		}
		if _, theirs, err := decodeHistory(e.Value()); err == nil && theirs > mark {
			return fmt.Errorf("%w: the subscription's state was written by another node since this one last read or wrote it", store.ErrFenced)
		}
		_, err = s.history.Update(ctx, key, val, e.Revision())
		switch {
		case err == nil:
			return nil
		case !isWrongLastSeq(err):
			return err
		}
	}
	return fmt.Errorf("%w: the history kept being written by another node", store.ErrFenced)
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
	r, _, err := decodeHistory(e.Value())
	if err != nil {
		return store.HistoryRecord{}, fmt.Errorf("jetstream store: event %q: %w", eventID, err)
	}
	if r.EventID != eventID || !now.Before(r.Expires) {
		return store.HistoryRecord{}, notFound
	}
	return r, nil
}

// ExpireHistory implements [store.Store]. It reads the history bucket's stream once, in
// batches of expireBatch messages through a consumer of its own, collects the keys of the
// expired histories, unreadable values and deletion markers of earlier releases into a page
// of about expirePage, deletes the consumer and purges the page with up to expirePurges
// purges in flight, then reads on from where it stopped. Its memory is bounded by a batch
// and a page, not by the size of the bucket, and a purge's round trip overlaps the others'.
//
// A cluster can hold far more expired histories than fit in one call's Timeout (a purge is a
// round trip and a stream write: one at a time, ten seconds expired some 6 000 histories, and
// an hourly expiry that falls behind never catches up). So when ctx has no deadline, Timeout
// bounds each request of the expiry, not the expiry as a whole: it goes on while the server
// answers, and fails when a request does not get its answer in time or the store is closed.
// Each purge reaches only up to the message read, so a history written again meanwhile
// stays; one that expires during the sweep goes in the next. Every purge lasts, so an expiry
// cut short (ctx, an outage) leaves less for the next, which reads the stream from the start.
//
// Why JetStream does not age histories out itself (a MaxAge on the bucket; a TTL per
// message needs nats-server 2.11): a history's Expires is set by the router per event (the
// retention after the next retry's due time while the event is retried), not a fixed age
// after its last write, so one stream-wide age would drop a retried event's history before
// its Expires; and Expires is judged against the router's now, which a stream's age is not.
func (s *Store) ExpireHistory(ctx context.Context, now time.Time) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	if !s.nc.IsConnected() {
		return fmt.Errorf("%w (status %v)", ErrNotConnected, s.nc.Status())
	}
	n, err := s.expireHistory(ctx, now)
	if err != nil {
		return fmt.Errorf("jetstream store: expiring delivery histories (%d deleted; the next expiry goes on with the rest): %w", n, err)
	}
	return nil
}

// An expiry reads expireBatch histories at a time, collects the expired ones' keys into a
// page of about expirePage, and purges a page with up to expirePurges purges in flight.
const (
	expireBatch  = 256
	expirePage   = 4096
	expirePurges = 32
)

// doomedHistory is a history an expiry purges: its key and the stream sequence of the message
// it read (the purge reaches up to there).
type doomedHistory struct {
	key string
	seq uint64
}

// expireHistory purges the histories expired at now, the unreadable ones and the deletion
// markers, page by page, and returns how many it purged; see ExpireHistory.
func (s *Store) expireHistory(ctx context.Context, now time.Time) (int, error) {
	info, err := s.historyInfo(ctx)
	if err != nil || info.State.Msgs == 0 {
		return 0, err
	}
	last := info.State.LastSeq // the sweep ends there: what is written later is not expired
	purged := 0
	for from := info.State.FirstSeq; ; {
		if s.closed.Load() {
			return purged, store.ErrClosed
		}
		page, next, err := s.expiredPage(ctx, from, last, now)
		if err != nil {
			return purged, err
		}
		n, err := s.purgeHistories(ctx, page)
		purged += n
		if err != nil || next == 0 {
			return purged, err
		}
		from = next
	}
}

// expiredPage reads the history bucket's stream from sequence from through last (or its end)
// with a consumer of its own, until it has found about expirePage histories to purge, and
// returns them and the sequence to go on from (0 at the end). The consumer is deleted before
// the page is purged: a purge recounts every consumer's pending messages, which made each
// purge cost a walk of the bucket's keys while one was open.
func (s *Store) expiredPage(ctx context.Context, from, last uint64, now time.Time) (page []doomedHistory, next uint64, err error) {
	name := s.historyStream.name
	rctx, rcancel := s.bound(ctx)
	cons, err := s.js.CreateConsumer(rctx, name, jetstream.ConsumerConfig{
		Description: "egrid delivery history expiry",
		AckPolicy:   jetstream.AckNonePolicy, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from,
		InactiveThreshold: max(time.Minute, 2*s.opts.Timeout), // gone by itself if this node stops reading
		Replicas:          1, MemoryStorage: true,
	})
	rcancel()
	if err != nil {
		return nil, 0, fmt.Errorf("reading the history bucket: %w", err)
	}
	defer func() {
		dctx, dcancel := s.bound(context.WithoutCancel(ctx))
		defer dcancel()
		_ = s.js.DeleteConsumer(dctx, name, cons.CachedInfo().Name)
	}()
	prefix := "$KV." + s.history.Bucket() + "."
	for len(page) < expirePage {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		batch, err := cons.FetchNoWait(expireBatch) // answered at once, at the end with none
		if err != nil {
			return nil, 0, fmt.Errorf("reading the history bucket: %w", err)
		}
		got, end := 0, false
		for m := range batch.Messages() {
			got++
			meta, err := m.Metadata()
			if err != nil {
				continue
			}
			next = meta.Sequence.Stream + 1
			end = end || meta.Sequence.Stream >= last || meta.NumPending == 0
			if expiredHistory(m, now) {
				page = append(page, doomedHistory{strings.TrimPrefix(m.Subject(), prefix), meta.Sequence.Stream})
			}
		}
		if err := batch.Error(); err != nil {
			return nil, 0, fmt.Errorf("reading the history bucket: %w", err)
		}
		if end {
			return page, 0, nil
		}
		if got == 0 { // the end, or a fetch the server left unanswered
			ictx, icancel := s.bound(ctx)
			ci, err := cons.Info(ictx)
			icancel()
			switch {
			case err != nil:
				return nil, 0, fmt.Errorf("reading the history bucket: %w", err)
			case ci.NumPending > 0:
				return nil, 0, fmt.Errorf("reading the history bucket: a fetch got no answer with %d histories left to read", ci.NumPending)
			}
			return page, 0, nil
		}
	}
	return page, next, nil
}

// purgeHistories purges the histories of page, up to expirePurges at once, and returns how
// many it purged; it stops at the first failure.
func (s *Store) purgeHistories(ctx context.Context, page []doomedHistory) (int, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		wg     sync.WaitGroup
		purged atomic.Int64
		slots  = make(chan struct{}, expirePurges)
	)
	for _, h := range page {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			pctx, pcancel := s.bound(ctx)
			defer pcancel()
			if err := purgeKey(pctx, s.history, s.historyStream, h.key, h.seq); err != nil {
				cancel(fmt.Errorf("deleting delivery history %s: %w", h.key, err))
				return
			}
			purged.Add(1)
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return int(purged.Load()), context.Cause(ctx)
	}
	return int(purged.Load()), nil
}

// expiredHistory reports whether m, a message of the history bucket, is to go: a history
// expired at now, an unreadable one (of no use to anyone), or a deletion marker.
func expiredHistory(m jetstream.Msg, now time.Time) bool {
	if op := m.Headers().Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return true
	}
	r, _, err := decodeHistory(m.Data())
	return err != nil || !now.Before(r.Expires)
}

// historyInfo reads the history bucket's stream's state through a handle of its own (see
// bucketStream).
func (s *Store) historyInfo(ctx context.Context) (*jetstream.StreamInfo, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	str, err := s.js.Stream(ctx, s.historyStream.name)
	if err != nil {
		return nil, fmt.Errorf("reading the history bucket: %w", err)
	}
	return str.CachedInfo(), nil
}

// purgeHistory deletes every history whose key matches pattern (a subscription's, a
// topic's): one purge of the pattern's subjects from the bucket's stream, which leaves
// nothing. A key-value purge leaves a marker, which a bucket with one key per event and
// subscription kept for good — a message per delivered event, the bucket's growth without
// bound, every later expiry reading them all again.
func (s *Store) purgeHistory(ctx context.Context, pattern string) error {
	if err := purgeKey(ctx, s.history, s.historyStream, pattern, 0); err != nil {
		return fmt.Errorf("jetstream store: deleting delivery histories %s: %w", pattern, err)
	}
	return nil
}

// purgeKey removes the messages of key (of every key it matches, for a pattern) up to
// revision rev from kv's stream str, leaving no deletion marker (rev 0: all of them).
func purgeKey(ctx context.Context, kv jetstream.KeyValue, str *bucketStream, key string, rev uint64) error {
	opts := []jetstream.StreamPurgeOpt{jetstream.WithPurgeSubject("$KV." + kv.Bucket() + "." + key)}
	if rev > 0 {
		opts = append(opts, jetstream.WithPurgeSequence(rev+1))
	}
	return str.str.Purge(ctx, opts...)
}
