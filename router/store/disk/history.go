package disk

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas/clip"
)

// The delivery histories of a subscription's events live under H subID eventID, each value
// the format version, the expiry as 8-byte big-endian unix nanoseconds, and the router's
// opaque bytes. They are written without a sync, like subscription state, and deleted with the
// subscription.

// historyKey returns H + subID + eventID.
func historyKey(subID uint64, eventID string) []byte {
	return append(idKey(prefixHistory, subID), eventID...)
}

func appendHistory(dst []byte, r *store.HistoryRecord) []byte {
	dst = append(dst, formatV1)
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.Expires.UnixNano()))
	return append(dst, r.Payload...)
}

func decodeHistory(eventID string, b []byte) (store.HistoryRecord, error) {
	if len(b) < 9 || b[0] != formatV1 {
		return store.HistoryRecord{}, fmt.Errorf("history of event %q: %w", eventID, errCorruptHistory)
	}
	return store.HistoryRecord{
		EventID: eventID,
		Expires: time.Unix(0, int64(binary.BigEndian.Uint64(b[1:9]))),
		Payload: append([]byte(nil), b[9:]...),
	}, nil
}

// errCorruptHistory marks a stored history that does not decode. It matches
// [store.ErrCorrupt].
var errCorruptHistory = store.CorruptSentinel("malformed history record")

// PutHistory implements [store.Store]. The records are one batch committed without a sync.
// While the store is failed it returns the failure: histories are advisory, and are not kept
// in memory for the next instance like subscription state. The epoch is the subscription's
// id, held in memory; the call holds the subscription, so DeleteSubscription waits for it.
func (s *Store) PutHistory(ctx context.Context, topicName, name string, epoch uint64, recs []store.HistoryRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c, err := s.enter(topicName, name)
	if err != nil {
		return err
	}
	defer c.done()
	if epoch != 0 && epoch != c.sb.id {
		return fmt.Errorf("saving delivery history of subscription %q of topic %q: %w", name, topicName, store.ErrStaleEpoch)
	}
	if err := c.g.err(); err != nil {
		return fmt.Errorf("saving delivery history of subscription %q of topic %q: %w", name, topicName, err)
	}
	b := c.g.db.NewBatch()
	var buf []byte
	prefix := idKey(prefixHistory, c.sb.id)
	key := prefix
	for i := range recs {
		buf = appendHistory(buf[:0], &recs[i])
		key = append(key[:len(prefix)], recs[i].EventID...) // the batch copies key and value
		if err := b.Set(key, buf, nil); err != nil {
			_ = b.Close()
			return fmt.Errorf("saving delivery history of subscription %q of topic %q: %w", name, topicName, err)
		}
	}
	if b.Empty() {
		_ = b.Close()
		return nil
	}
	if err := c.g.commit(b, pebble.NoSync, s.onFail); err != nil {
		return fmt.Errorf("saving delivery history of subscription %q of topic %q: %w", name, topicName, err)
	}
	return nil
}

// History implements [store.Store]. A history in a damaged table block is an error wrapping
// [ErrCorrupt] (historyDamage).
func (s *Store) History(ctx context.Context, topicName, name, eventID string, now time.Time) (store.HistoryRecord, error) {
	if err := ctx.Err(); err != nil {
		return store.HistoryRecord{}, err
	}
	c, err := s.enter(topicName, name)
	if err != nil {
		return store.HistoryRecord{}, err
	}
	defer c.done()
	v, ok, err := get(c.g.db, historyKey(c.sb.id, eventID))
	if pebble.IsCorruptionError(err) {
		return store.HistoryRecord{}, s.historyDamage(topicName, name, eventID, err)
	}
	if err != nil {
		return store.HistoryRecord{}, fmt.Errorf("reading delivery history of event %q: %w", eventID, err)
	}
	var r store.HistoryRecord
	if ok {
		if r, err = decodeHistory(eventID, v); err != nil {
			return store.HistoryRecord{}, err
		}
	}
	if !ok || !now.Before(r.Expires) {
		return store.HistoryRecord{}, fmt.Errorf("history of event %q of subscription %q of topic %q: %w", eventID, name, topicName, store.ErrNotFound)
	}
	return r, nil
}

// ExpireHistory implements [store.Store]: one scan of the history range, the expired records
// deleted in one batch committed without a sync. A damaged table block met on the way is gone
// past (scanHistories): the histories in it stay, and the others expire.
func (s *Store) ExpireHistory(ctx context.Context, now time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c, err := s.enter("", "")
	if err != nil {
		return err
	}
	defer c.done()
	if err := c.g.err(); err != nil {
		return fmt.Errorf("expiring delivery histories: %w", err)
	}
	b := c.g.db.NewBatch()
	_, err = s.scanHistories(c.g.db, func(k, v []byte) error {
		if len(v) < 9 || int64(binary.BigEndian.Uint64(v[1:9])) <= now.UnixNano() {
			return b.Delete(k, nil) // expired, or unreadable and so of no use to anyone
		}
		return nil
	})
	if err != nil {
		_ = b.Close()
		return fmt.Errorf("expiring delivery histories: %w", err)
	}
	if b.Empty() {
		_ = b.Close()
		return nil
	}
	if err := c.g.commit(b, pebble.NoSync, s.onFail); err != nil {
		return fmt.Errorf("expiring delivery histories: %w", err)
	}
	return nil
}

// historyDamage is History's error when pebble reports the history of event eventID (of
// subscription name of topic topicName) in a damaged table block (err): it wraps [ErrCorrupt]
// and says what is lost and what to do. The block is reported once per Store, as
// scanHistories reports it (an ERROR, a count of kind table), however often it is read.
func (s *Store) historyDamage(topicName, name, eventID string, err error) error {
	if s.lostBlock(err, lostHistory) {
		s.log.Error("disk store: delivery histories are in a damaged table block and cannot be read; the delivery histories of some events are lost (egrid explain finds none for them). No event is lost and delivery is not affected. Restore the data directory from a backup to recover them, or leave it; egrid store check --data-dir DIR lists the damage",
			"dir", s.dir, logattr.Topic, topicName, logattr.Subscription, name, logattr.EventID, clip.String(eventID), "err", err)
	}
	return fmt.Errorf("%w: the delivery history of event %q of subscription %q of topic %q is in a damaged table block and cannot be read (%v): it is lost (egrid explain finds none for it); no event is lost and delivery is not affected. Restore the directory from a backup to recover it, or leave it; egrid store check --data-dir %s lists the damage",
		ErrCorrupt, clip.String(eventID), name, topicName, err, s.dir)
}

// scanHistories calls fn for every delivery history record in db, going on past damaged table
// blocks (scanPastDamage). Failing instead would stop history expiry for good, each run meeting
// the block again, the range growing. Each block is reported once per start (an ERROR naming
// the subscriptions whose histories it may hold, and a count) and returned as a problem for
// egrid store check: histories are diagnostic, so what is lost is the delivery histories of
// some events (egrid explain finds none for them); no event, and nothing of delivery.
func (s *Store) scanHistories(db *pebble.DB, fn func(k, v []byte) error) (problems []error, err error) {
	err = scanPastDamage(db, []byte{prefixHistory}, []byte{prefixHistory + 1}, fn, func(bad, next []byte, err error) ([]byte, error) {
		names := s.idNames(spanIDs(bad, next))
		problems = append(problems, fmt.Errorf("%w: delivery histories of subscriptions %v are in a damaged table block: the delivery histories of some of their events are lost (egrid explain finds none for them); no event is lost and delivery is not affected (a running egrid goes past the block, and never expires what it holds). Restore the directory from a backup to recover them, or leave it", ErrCorrupt, names))
		if s.lostBlock(err, lostHistory) {
			s.log.Error("disk store: delivery histories are in a damaged table block and cannot be read; the delivery histories of some events are lost (egrid explain finds none for them), and the block is gone past: the others expire as due. No event is lost and delivery is not affected. Restore the data directory from a backup to recover them, or leave it; egrid store check --data-dir DIR lists the damage",
				"dir", s.dir, "subscriptions", names)
		}
		return next, nil
	})
	return problems, err
}
