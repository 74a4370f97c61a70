package jetstream

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/store"
)

// Damaged records of the meta bucket.
//
// A topic's definition, or a subscription's record whose head (cursor, epoch, definition)
// does not decode, is the loss of one definition, not of the store: the listings (Topics,
// Subscriptions, Cursors) go on without it, and it is logged once as an ERROR saying what is
// not served and what to do, and counted ([DamageDefinition]), as the disk store reports a
// damaged definition. Its name stays taken: PutTopic and PutSubscription refuse it with
// [store.ErrDamaged] rather than write a fresh definition over the remains, and DeleteTopic and
// DeleteSubscription remove it, so that the name can be created again.
//
// A subscription record whose head decodes but whose state (probation, parked events) does
// not has lost its state only: the load that finds it writes the record again, with its
// definition, a new epoch (so a late write of the old state is refused, [store.ErrStaleEpoch],
// or fenced by the record's revision) and its cursor just before the oldest event the topic's
// journal holds, nothing parked and no probation. So every event still in the journal is
// delivered again (at least once) and none past the old cursor is skipped, as the disk store
// restarts a subscription whose cursor does not decode. Logged once and counted
// ([DamageEntry]). Only a record of a format this release knows is written again: its head
// names the format.

// A key that does not decode into a name (natstoken.Unescape refuses it: not a token egrid
// writes, so something else wrote it, or it is damaged) names nothing egrid can serve, and
// decoding it anyway could alias another name's key: the listings (Topics, Subscriptions,
// Cursors, DeadLetters, ScanDeadLetters) go on without it, and it is logged once with its raw
// key, saying what to do, and counted (kind [DamageDefinition] in the meta bucket,
// [DamageEntry] in the dead-letter outbox). Before, one such key failed the whole listing,
// every time: in cluster mode no node read any definition any more.

// DamageDefinition is the kind of damage ([Options.OnCorruption], the metric
// egrid_store_corruption_count) of a topic or subscription definition in the meta bucket
// that does not decode. It is the disk store's kind of the same damage.
const DamageDefinition = "definition"

// damagedDefError is the error of a call on a name whose stored definition does not decode.
// It wraps [store.ErrDamaged] and errCorrupt (and so [store.ErrCorrupt]).
type damagedDefError struct {
	what string // `topic "orders"`, `subscription "billing" of topic "orders"`
	fix  string // the delete command
	rev  uint64 // the damaged value's revision
	err  error  // the decoding error
}

func (e *damagedDefError) Error() string {
	return "jetstream store: " + e.what + ": its stored definition is damaged (" + e.err.Error() +
		"), and the name stays taken by what is left of it: " + e.fix +
		" (which removes what is stored under it) and create it again, or restore the meta bucket from a backup"
}

func (e *damagedDefError) Is(target error) bool {
	return target == store.ErrDamaged || target == errCorrupt || target == store.ErrCorrupt
}

func topicDamaged(topic string, rev uint64, err error) *damagedDefError {
	return &damagedDefError{what: fmt.Sprintf("topic %q", topic), fix: "delete the topic (egrid topic delete --name " + topic + ")", rev: rev, err: err}
}

func subDamaged(topic, sub string, rev uint64, err error) *damagedDefError {
	return &damagedDefError{what: fmt.Sprintf("subscription %q of topic %q", sub, topic),
		fix: "delete the subscription (egrid event-subscription delete --topic " + topic + " --name " + sub + ")", rev: rev, err: err}
}

// firstReport reports whether the damage of key's value val is new to this store, and
// remembers it: each is logged and counted once.
func (s *Store) firstReport(key string, val []byte) bool {
	k := fmt.Sprintf("meta %s %08x %d", key, crc32.ChecksumIEEE(val), len(val))
	s.lostMu.Lock()
	defer s.lostMu.Unlock()
	if s.lost[k] {
		return false
	}
	if s.lost == nil {
		s.lost = make(map[string]bool)
	}
	s.lost[k] = true
	return true
}

// defDamage reports, once, a definition of the meta bucket that does not decode: a topic's
// (sub "") or a subscription's.
func (s *Store) defDamage(key string, val []byte, topic, sub string, err error) {
	if !s.firstReport(key, val) {
		return
	}
	p := s.opts.Prefix
	why := " It is not a value egrid of this release wrote: one written by a newer release (upgrade this node), by something else (give put rights on $KV." + p + "_meta.> to egrid's NATS user only), or damage."
	if sub == "" {
		s.opts.Logger.Error("jetstream store: a topic's stored definition does not decode; the store goes on without it: the topic, its subscriptions and its journal are not served (publishes to it are refused as to an unknown topic), and the name stays taken. Delete the topic (egrid topic delete --name "+topic+"), which removes its journal and subscriptions, and create it again, or restore bucket "+p+"_meta from a backup."+why,
			"topic", topic, "bucket", p+"_meta", "key", key, "err", err)
	} else {
		s.opts.Logger.Error("jetstream store: a subscription's stored definition does not decode; the store goes on without it: the subscription is not served (its events are not delivered to it), its topic and the topic's other subscriptions go on, and the name stays taken. Delete the subscription (egrid event-subscription delete --topic "+topic+" --name "+sub+") and create it again, or restore bucket "+p+"_meta from a backup."+why,
			"topic", topic, "subscription", sub, "bucket", p+"_meta", "key", key, "err", err)
	}
	s.damaged(DamageDefinition)
}

// keyDamage reports, once, a key of bucket that does not decode into a name (err); what is
// what it would name ("a topic", "a subscription of topic \"orders\"", "a dead-letter
// record"). The listing that found it goes on without it.
func (s *Store) keyDamage(bucket, key, what string, err error) {
	if !s.firstReport(bucket+" key "+key, nil) {
		return
	}
	kind := DamageDefinition
	if bucket == s.dead.Bucket() {
		kind = DamageEntry
	}
	s.opts.Logger.Error("jetstream store: a key does not decode into the name of "+what+"; the listing goes on without it, and nothing stored under it is served. It is not a key egrid writes: something other than egrid wrote it (give put rights on $KV."+bucket+".> to egrid's NATS user only), or it is damaged. See what it holds (nats kv get "+bucket+" KEY), then remove it (nats kv purge "+bucket+" KEY), or restore bucket "+bucket+" from a backup",
		"bucket", bucket, "key", key, "err", err)
	s.damaged(kind)
}

// damagedRecord handles a subscription record kv that does not decode (err), found by load
// while holding e: a head that does not decode is a damaged definition (its error, wrapping
// store.ErrDamaged); a head that does is a lost state, which is written again afresh (see
// above) and taken into e.
func (s *Store) damagedRecord(ctx context.Context, e *subEntry, topic, sub string, kv jetstream.KeyValueEntry, err error) error {
	key, val := kv.Key(), kv.Value()
	_, _, spec, herr := decodeSubHead(val)
	if herr != nil {
		e.rec = nil
		s.defDamage(key, val, topic, sub, herr)
		return subDamaged(topic, sub, kv.Revision(), herr)
	}
	_, info, serr := s.streamInfo(ctx, topic)
	if serr != nil {
		e.rec = nil
		return serr
	}
	var floor uint64 // just before the oldest event the journal holds
	if info.State.FirstSeq > 0 {
		floor = info.State.FirstSeq - 1
	}
	rec := &subRecord{epoch: newEpoch(), spec: spec, cursor: floor, life: lifeOf(info)}
	rev, werr := s.meta.Update(ctx, key, appendSubRecord(nil, rec), kv.Revision())
	if werr != nil {
		e.rec = nil
		if isWrongLastSeq(werr) {
			return fenced(fmt.Sprintf("subscription %q of topic %q", sub, topic), werr)
		}
		return fmt.Errorf("jetstream store: writing the fresh state of subscription %q of topic %q, whose state does not decode: %w", sub, topic, werr)
	}
	e.setRev(rev)
	e.rec = rec
	if s.firstReport(key, val) {
		p := s.opts.Prefix
		s.opts.Logger.Error("jetstream store: a subscription's state does not decode (its definition does); the subscription starts again at the oldest event its topic's journal holds, with a new epoch, nothing parked and its endpoint taken as healthy: events it had delivered are delivered again (at least once), none is skipped, and its parked retries are lost where the journal no longer holds their events. A fresh state is written. Restore bucket "+p+"_meta from a backup to avoid the duplicates; give put rights on $KV."+p+"_meta.> to egrid's NATS user only",
			"topic", topic, "subscription", sub, "fromSeq", floor+1, "bucket", p+"_meta", "err", err)
		s.damaged(DamageEntry)
	}
	return nil
}

// asDamagedDef returns the damaged definition err reports, if it does.
func asDamagedDef(err error) (*damagedDefError, bool) {
	var d *damagedDefError
	ok := errors.As(err, &d)
	return d, ok
}

// DefinitionDamaged implements [store.DamageProber]: whether the definition stored under the
// topic (sub "") or the subscription does not decode, and the revision of that value. A
// cluster node uses it to delete a damaged name it does not run, which it cannot tell from one
// another node created a moment ago by its absence alone.
func (s *Store) DefinitionDamaged(ctx context.Context, topic, sub string) (bool, uint64, error) {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return false, 0, err
	}
	defer cancel()
	key := topicKey(topic)
	if sub != "" {
		key = subKey(topic, sub)
	}
	e, err := s.meta.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return false, 0, nil
	case err != nil:
		return false, 0, fmt.Errorf("jetstream store: reading %s: %w", key, err)
	}
	var derr error
	if sub == "" {
		_, derr = decodeTopic(e.Value()) // a claim is no damage
	} else {
		_, _, _, derr = decodeSubHead(e.Value())
	}
	if derr != nil {
		return true, e.Revision(), nil
	}
	return false, 0, nil
}

// DeleteDamaged implements [store.DamageProber]: the delete of the damaged value is the
// commit point, made only on top of revision rev (compare-and-set), so a definition another
// node wrote since is never deleted; what is stored under the name goes after it, as
// DeleteTopic and DeleteSubscription remove it (a topic's damaged value becomes the name's
// delete claim, and the key goes last: topicclaim.go).
func (s *Store) DeleteDamaged(ctx context.Context, topic, sub string, rev uint64) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := checkName("topic", topic); err != nil {
		return err
	}
	if sub == "" {
		// As DeleteTopic: the damaged value becomes the name's delete claim, so no create of
		// the name starts before what it held is gone (topicclaim.go).
		c, err := s.claimTopic(ctx, topic, rev, claimDelete)
		if errors.Is(err, errKeyTaken) {
			return s.damagedGone(ctx, topicKey(topic), fmt.Sprintf("topic %q", topic))
		}
		if err != nil {
			return err
		}
		return s.deleteTopic(ctx, topic, c)
	}
	if err := s.topicExists(ctx, topic); err != nil {
		return err
	}
	key := subKey(topic, sub)
	e, err := s.entry(ctx, key)
	if err != nil {
		return err
	}
	defer e.release()
	e.rec = nil // read again next time, whatever happens here
	if err := s.purgeDamaged(ctx, key, fmt.Sprintf("subscription %q of topic %q", sub, topic), rev); err != nil {
		return err
	}
	return s.dropSub(ctx, e, key, topic, sub)
}

// purgeDamaged deletes key, the damaged definition of what, on top of revision rev: an error
// wrapping store.ErrChanged when another writer replaced the value since, store.ErrNotFound
// when the key holds nothing any more.
func (s *Store) purgeDamaged(ctx context.Context, key, what string, rev uint64) error {
	err := s.meta.Purge(ctx, key, jetstream.LastRevision(rev))
	switch {
	case err == nil:
		return nil
	case !isWrongLastSeq(err):
		return fmt.Errorf("jetstream store: deleting %s: %w", what, err)
	}
	return s.damagedGone(ctx, key, what)
}

// damagedGone is the error of a delete of the damaged definition of what, under key, that
// another writer's write of the key beat: store.ErrNotFound when the key holds nothing any
// more, store.ErrChanged otherwise.
func (s *Store) damagedGone(ctx context.Context, key, what string) error {
	if _, gerr := s.meta.Get(ctx, key); errors.Is(gerr, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("jetstream store: deleting %s, whose stored definition was damaged: it was deleted meanwhile: %w", what, store.ErrNotFound)
	}
	return fmt.Errorf("jetstream store: deleting %s: its stored definition was damaged, and another writer (another node) replaced it since, so nothing was deleted: %w", what, store.ErrChanged)
}
