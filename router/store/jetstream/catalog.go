package jetstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/store"
)

// The catalogue: the topics' definitions (keys of the meta bucket, each topic with its journal
// stream) and the subscriptions' (in each subscription's record, with its state: substate.go),
// written, deleted and listed.

// topicExists reports whether the topic has a definition. A name claimed by a create or a
// delete under way (topicclaim.go) has none.
func (s *Store) topicExists(ctx context.Context, topic string) error {
	_, err := s.topicRev(ctx, topic)
	return err
}

// topicRev is topicExists that also returns the revision of the definition it read.
func (s *Store) topicRev(ctx context.Context, topic string) (uint64, error) {
	if err := checkName("topic", topic); err != nil {
		return 0, err
	}
	e, err := s.meta.Get(ctx, topicKey(topic))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return 0, topicNotFound(topic)
	case err != nil:
		return 0, fmt.Errorf("jetstream store: reading topic %q: %w", topic, err)
	}
	if v, err := decodeTopic(e.Value()); err == nil && v.claim != 0 {
		return 0, topicNotFound(topic)
	}
	return e.Revision(), nil
}

// PutTopic implements [store.Store]: the definition is a key of the meta bucket; a new topic
// also gets its journal stream, created before the definition so a topic that is listed
// always has one. A new topic's name is claimed first (topicclaim.go): only the store whose
// claim was written removes what an earlier life of the name left, so a create that another
// node's create beat removes nothing of that node's topic and writes the definition over it
// as a replacement. A name another node is creating or deleting is waited for (up to the
// call's deadline; past it the call fails wrapping [store.ErrFenced], to be tried again). A
// name whose stored definition does not decode is refused ([store.ErrDamaged]) until
// DeleteTopic removes it.
func (s *Store) PutTopic(ctx context.Context, name string, spec []byte) error {
	return s.putTopic(ctx, name, spec, false)
}

// CreateTopic implements [store.Store]: PutTopic for a name that holds no topic. The name's
// claim is written with the bucket's Create (on no revision, or on the delete marker the
// name's last delete left), which fails when another node claimed or created the topic since
// this one looked: this one then removes nothing, waits for that node's create to end, and
// fails with [store.ErrExists], so that node's create stands with everything written to the
// topic since.
func (s *Store) CreateTopic(ctx context.Context, name string, spec []byte) error {
	return s.putTopic(ctx, name, spec, true)
}

// putTopic is PutTopic, or CreateTopic when create is set.
func (s *Store) putTopic(ctx context.Context, name string, spec []byte, create bool) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := checkName("topic", name); err != nil {
		return err
	}
	val := appendOpaque(nil, spec)
	for try := 1; ; try++ {
		e, err := s.meta.Get(ctx, topicKey(name))
		var over uint64 // the revision of an expired claim to take over
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return fmt.Errorf("jetstream store: reading topic %q: %w", name, err)
		default:
			v, derr := decodeTopic(e.Value())
			switch {
			case derr != nil:
				return topicDamaged(name, e.Revision(), derr)
			case v.claim == 0 && create:
				return topicTaken(name)
			case v.claim == 0:
				if _, err := s.meta.Update(ctx, topicKey(name), val, e.Revision()); err != nil {
					if isWrongLastSeq(err) {
						return fenced("topic "+name, err)
					}
					return fmt.Errorf("jetstream store: writing topic %q: %w", name, err)
				}
				return nil
			case time.Now().Before(v.expires):
				if err := s.awaitClaim(ctx, name, e.Revision(), v); err != nil {
					return err
				}
				if try == claimTries {
					return fenced("topic "+name, errors.New("another node's claim on the name held through every look"))
				}
				continue
			default:
				over = e.Revision()
			}
		}
		c, err := s.claimTopic(ctx, name, over, claimCreate)
		if errors.Is(err, errKeyTaken) {
			if try < claimTries {
				continue // another node wrote the key since: look again, removing nothing
			}
			return fenced("topic "+name, err)
		}
		if err != nil {
			return err
		}
		return s.createTopic(ctx, name, val, c)
	}
}

// topicTaken is CreateTopic's error for a name that holds a topic.
func topicTaken(name string) error {
	return fmt.Errorf("jetstream store: creating topic %q: another writer created it: %w", name, store.ErrExists)
}

// dropTopicData deletes a topic's journal stream and subscription records and forgets this
// store's writer and cached records of it. It runs only while this store holds the name's
// claim (topicclaim.go): they are named after the topic, not after one life of it, so run at
// any other time it would delete another node's live topic.
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

// DeleteTopic implements [store.Store]. Turning the definition into the name's delete claim
// (a compare-and-set on the revision read) is the commit point: from then on the topic is
// listed by no store, and its journal stream and subscription records go next, the key last
// (topicclaim.go), so no create of the name can start before they are gone. When that is cut
// short (an outage), the claim stays until it expires, and the next create of the name takes
// it over and removes the rest. A topic whose stored definition does not decode is deleted
// too; a name claimed by another node's create or delete is not found. A definition written
// by another node between the read and the claim is read again, up to putTries times.
func (s *Store) DeleteTopic(ctx context.Context, name string) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := checkName("topic", name); err != nil {
		return err
	}
	for try := 1; ; try++ {
		e, err := s.meta.Get(ctx, topicKey(name))
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			return topicNotFound(name)
		case err != nil:
			return fmt.Errorf("jetstream store: reading topic %q: %w", name, err)
		}
		if v, err := decodeTopic(e.Value()); err == nil && v.claim != 0 {
			return topicNotFound(name)
		}
		c, err := s.claimTopic(ctx, name, e.Revision(), claimDelete)
		if errors.Is(err, errKeyTaken) {
			if try < putTries {
				continue // another node wrote the definition since (its keys): read it again
			}
			return fenced("topic "+name, err)
		}
		if err != nil {
			return err
		}
		return s.deleteTopic(ctx, name, c)
	}
}

// Topics implements [store.Store]. A definition that does not decode is left out, logged
// once and counted ([DamageDefinition]): the others are listed. A name claimed by a create
// or a delete under way is left out.
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
		v, err := decodeTopic(val)
		if err != nil {
			s.defDamage(key, val, name, "", err) // left out: see metadamage.go
			return nil
		}
		if v.claim != 0 {
			return nil // being created or deleted: no topic yet, or any more
		}
		defs = append(defs, store.Definition{Name: name, Spec: v.spec})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream store: listing topics: %w", err)
	}
	slices.SortFunc(defs, func(a, b store.Definition) int { return strings.Compare(a.Name, b.Name) })
	return defs, nil
}

// PutSubscription implements [store.Store]. The definition and the state are one record, so
// a new subscription is created with its cursor and epoch in one write. A replaced one is
// written on the revision this store last read or wrote; when another node wrote the record
// since (its owner's state, or its definition, or it deleted it), this store's view of it is
// stale, not the definition: the write reads the record again and writes the new definition
// with the state read (or creates the subscription anew when it was deleted), up to putTries
// writes, past which it fails with [store.ErrFenced]. Only the owner's state writes
// (UpdateSubscription) stay fenced on a stale view. A create that finds the subscription
// created by another node since it looked is not retried: it fails with [store.ErrFenced] and
// writes nothing, so the other node's create, answered already, stands (the router reads the
// record then and answers 409, or success when the definitions are the same). A create whose
// topic was deleted meanwhile is taken back (createSub): it fails with [store.ErrNotFound], or
// is made again on the topic created again since. A record of an earlier life of the topic,
// which such a create wrote before taking it back, is not replaced: it is deleted and the
// subscription created anew (staleLife).
func (s *Store) PutSubscription(ctx context.Context, topic, name string, spec []byte) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	key, e, topicRev, err := s.definitionEntry(ctx, topic, name)
	if err != nil {
		return err
	}
	defer e.release()
	for try := 1; ; try++ {
		replacing, err := s.putSub(ctx, e, key, topic, name, spec, topicRev)
		if err == nil || !replacing || !errors.Is(err, store.ErrFenced) || try == putTries {
			return err
		}
		e.rec = nil // read again: another node wrote the record since
	}
}

// putTries bounds PutSubscription's writes: each one lost to another node's write reads the
// record again and tries once more.
const putTries = 3

// putSub is one try of PutSubscription: it writes spec on the record as e holds it (read
// when e holds none), or creates the subscription when there is none; e's semaphore is held.
// replacing says which: a replacement fenced by a stale view is tried again, a create that
// lost to another node's is not. topicRev is the revision of the topic's definition the call
// read (createSub).
func (s *Store) putSub(ctx context.Context, e *subEntry, key, topic, name string, spec []byte, topicRev uint64) (replacing bool, err error) {
	if e.rec == nil {
		if err := s.load(ctx, e, topic, name); err != nil && !errors.Is(err, store.ErrNotFound) {
			return false, err
		}
	}
	if e.rec != nil {
		stale, err := s.staleLife(ctx, topic, e.rec)
		if err != nil {
			return true, err
		}
		if !stale {
			rec := *e.rec
			rec.spec = slices.Clone(spec)
			return true, s.write(ctx, e, topic, name, &rec)
		}
		if err := s.dropStale(ctx, e, key, topic, name); err != nil {
			return true, err // fenced: read again
		}
	}
	if err := s.createSub(ctx, e, key, topic, name, spec, topicRev); err != nil {
		if errors.Is(err, errKeyTaken) {
			return false, fenced(fmt.Sprintf("subscription %q of topic %q", name, topic), err)
		}
		return false, err
	}
	return false, nil
}

// createSub writes a new subscription record for spec (its cursor at the journal's end, a new
// epoch) with the bucket's Create, which succeeds only while the key holds no record (none,
// or the marker of its last delete): another node's create since fails it with an error
// wrapping errKeyTaken, and nothing is written. e's semaphore is held.
//
// The record is one of the topic's life whose definition the caller read (at revision
// topicRev), and a delete of the topic removes the records it lists after its claim: a delete
// claimed between that read and the write listed no record of the subscription, so the record
// written would be left to no topic, or to the topic created again after the delete, with a
// cursor in the old journal (and numbers the new one has not reached). So createSub looks at
// the topic again after the write (sameLife): when the definition may be of another life, it
// deletes the record it wrote (dropCreated) and starts again from the topic's definition,
// which a topic deleted does not have (store.ErrNotFound), up to putTries writes, past which
// it fails with store.ErrFenced. The record carries the life it was written for (its journal
// stream's creation time), so that until it is taken back no other definition write takes it
// over (staleLife).
func (s *Store) createSub(ctx context.Context, e *subEntry, key, topic, name string, spec []byte, topicRev uint64) error {
	for try := 1; ; try++ {
		_, info, err := s.streamInfo(ctx, topic)
		if err != nil {
			return err
		}
		rec := &subRecord{epoch: newEpoch(), spec: slices.Clone(spec), cursor: info.State.LastSeq, life: lifeOf(info)}
		rev, err := s.meta.Create(ctx, key, appendSubRecord(nil, rec))
		if err != nil {
			e.rec = nil // read again next time
			if errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSeq(err) {
				// The second form: the key's delete marker replaced between the bucket's look
				// at it and its write on it.
				err = fmt.Errorf("%w: %w", errKeyTaken, err)
			}
			return fmt.Errorf("jetstream store: writing subscription %q of topic %q: %w", name, topic, err)
		}
		same, err := s.sameLife(ctx, topic, topicRev, info.Created)
		if err == nil && same {
			e.setRev(rev)
			e.rec = rec
			return nil
		}
		e.rec = nil
		if derr := s.dropCreated(ctx, key, topic, name, rev, rec.epoch); derr != nil {
			return errors.Join(err, derr)
		}
		if err != nil {
			return err
		}
		if topicRev, err = s.topicRev(ctx, topic); err != nil {
			return err
		}
		if try == putTries {
			return fenced(fmt.Sprintf("subscription %q of topic %q", name, topic),
				errors.New("its topic was deleted and created again during every write"))
		}
	}
}

// sameLife reports whether the topic whose definition was read at revision rev, its journal
// stream created at created, is still that life after a write: its key unchanged since, or
// holding a definition whose journal is the same stream (a PutTopic of the topic since, not a
// delete and a create: a create makes the stream anew). A key claimed (a delete under way) or
// gone is another life.
func (s *Store) sameLife(ctx context.Context, topic string, rev uint64, created time.Time) (bool, error) {
	kv, err := s.meta.Get(ctx, topicKey(topic))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("jetstream store: reading topic %q again after writing a subscription of it: %w", topic, err)
	}
	if kv.Revision() == rev {
		return true, nil
	}
	if v, err := decodeTopic(kv.Value()); err == nil && v.claim != 0 {
		return false, nil
	}
	_, info, err := s.streamInfo(ctx, topic)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return info.Created.Equal(created), nil
}

// lifeOf is the life a record created for the topic whose journal stream info describes
// carries: the stream's creation time, in Unix nanoseconds.
func lifeOf(info *jetstream.StreamInfo) uint64 { return uint64(info.Created.UnixNano()) }

// staleLife reports whether rec is a record of an earlier life of topic: created for a
// journal stream that is not the topic's now (its cursor numbering another journal), which a
// create that raced the topic's delete and create wrote (createSub). Such a record is not the
// subscription of the topic that stands, and a definition write must not take it over: its
// creator takes it back (dropCreated), and so does the write (dropStale). A record whose life
// is not known (written by an earlier release) is not stale; a topic whose stream is gone is
// not found.
func (s *Store) staleLife(ctx context.Context, topic string, rec *subRecord) (bool, error) {
	if rec.life == 0 {
		return false, nil
	}
	_, info, err := s.streamInfo(ctx, topic)
	if err != nil {
		return false, err
	}
	return lifeOf(info) != rec.life, nil
}

// dropStale deletes the record of subscription name (key) that e holds, of an earlier life of
// its topic (staleLife), on the revision e holds, and what the record's owner may have stored
// of it (parked events, delivery histories). A write of the record since fails it with
// store.ErrFenced: the caller reads the record again. e's semaphore is held; e holds no
// record after.
func (s *Store) dropStale(ctx context.Context, e *subEntry, key, topic, name string) error {
	e.rec = nil
	if err := s.meta.Purge(ctx, key, jetstream.LastRevision(e.rev)); err != nil {
		if isWrongLastSeq(err) {
			return fenced(fmt.Sprintf("subscription %q of topic %q", name, topic), err)
		}
		return fmt.Errorf("jetstream store: deleting subscription %q of topic %q, a record of the topic before it was deleted and created again: %w", name, topic, err)
	}
	return s.dropSubData(ctx, topic, name)
}

// dropCreated deletes the record of subscription name (key) that createSub wrote at revision
// rev with epoch, for a topic life that was gone: on its revision, or on the revision of a
// write of another node since that kept its epoch (a definition or state written on it), so a
// record another node created after it (another epoch) stays. A record already gone (the
// delete of the topic, or a create of it, removed it) is done. A definition write keeps the
// record's epoch only when it found the record's life the topic's current one (staleLife):
// then it read that life before the topic's delete, and the delete removes what it wrote
// anyway; one that came to the topic created again deleted the record instead and created its
// own, another epoch, which stays. A state write of the record's owner goes with the record.
func (s *Store) dropCreated(ctx context.Context, key, topic, name string, rev, epoch uint64) error {
	for try := 1; ; try++ {
		err := s.meta.Purge(ctx, key, jetstream.LastRevision(rev))
		if err == nil {
			return nil
		}
		if !isWrongLastSeq(err) || try == putTries {
			return fmt.Errorf("jetstream store: deleting subscription %q, written as its topic %q was deleted: %w; "+
				"a create of the topic removes it, and if the topic stands, delete the subscription", name, topic, err)
		}
		kv, gerr := s.meta.Get(ctx, key)
		if errors.Is(gerr, jetstream.ErrKeyNotFound) {
			return nil
		}
		if gerr != nil {
			return fmt.Errorf("jetstream store: reading subscription %q of topic %q to delete it (written as its topic was deleted): %w", name, topic, gerr)
		}
		if _, e, _, derr := decodeSubHead(kv.Value()); derr != nil || e != epoch {
			return nil // another record: another node created the subscription since
		}
		rev = kv.Revision()
	}
}

// definitionEntry is what a subscription's definition write starts with: the name checked,
// the topic found (the revision of its definition), and the subscription's key with its entry
// held (the caller releases it).
func (s *Store) definitionEntry(ctx context.Context, topic, name string) (string, *subEntry, uint64, error) {
	if err := checkName("subscription", name); err != nil {
		return "", nil, 0, err
	}
	topicRev, err := s.topicRev(ctx, topic)
	if err != nil {
		return "", nil, 0, err
	}
	key := subKey(topic, name)
	e, err := s.entry(ctx, key)
	if err != nil {
		return "", nil, 0, err
	}
	return key, e, topicRev, nil
}

// errKeyTaken is wrapped by createSub's error when the key holds a record.
var errKeyTaken = errors.New("the key holds a record")

// CreateSubscription implements [store.Store]: the record is written with createSub alone,
// with no read before it, so there is no moment between a look and the write for another
// node's create to land in: when the key holds a record the write fails and CreateSubscription
// reads it only to tell a damaged definition ([store.ErrDamaged], as PutSubscription) from one
// that stands ([store.ErrExists]). A create whose topic was deleted meanwhile is taken back
// and made again, as PutSubscription's (createSub).
func (s *Store) CreateSubscription(ctx context.Context, topic, name string, spec []byte) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	key, e, topicRev, err := s.definitionEntry(ctx, topic, name)
	if err != nil {
		return err
	}
	defer e.release()
	err = s.createSub(ctx, e, key, topic, name, spec, topicRev)
	if !errors.Is(err, errKeyTaken) {
		return err
	}
	if lerr := s.load(ctx, e, topic, name); errors.Is(lerr, store.ErrDamaged) {
		return lerr
	}
	return fmt.Errorf("jetstream store: creating subscription %q of topic %q: another writer created it: %w", name, topic, store.ErrExists)
}

// swapTries bounds SwapSubscription's tries: each write that loses to a state write of
// another node (its cursor moving: the definition still the one expected) reads the record
// again and tries once more.
const swapTries = 8

// SwapSubscription implements [store.Store]. The definition and the state are one record: it
// is read afresh (never from the cache) and written on the revision read, so a write of
// another node in between fails the write; the record is then read again, and the swap
// fails with [store.ErrChanged] only when its definition is another. Past swapTries writes
// lost to state writes it fails with [store.ErrFenced]. A record of an earlier life of the
// topic (staleLife), written by a create that raced the topic's delete and create, is no
// subscription of the topic: it is deleted, and the swap fails with [store.ErrNotFound].
func (s *Store) SwapSubscription(ctx context.Context, topic, name string, old, spec []byte) error {
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
	for try := 1; ; try++ {
		if err := s.load(ctx, e, topic, name); err != nil {
			return err
		}
		stale, err := s.staleLife(ctx, topic, e.rec)
		if err != nil {
			return err
		}
		if stale {
			err := s.dropStale(ctx, e, key, topic, name)
			if err == nil {
				return subNotFound(topic, name)
			}
			if !errors.Is(err, store.ErrFenced) || try == swapTries {
				return err
			}
			continue
		}
		if !bytes.Equal(e.rec.spec, old) {
			return fmt.Errorf("jetstream store: subscription %q of topic %q: %w", name, topic, store.ErrChanged)
		}
		rec := *e.rec
		rec.spec = slices.Clone(spec)
		err = s.write(ctx, e, topic, name, &rec)
		if err == nil || !errors.Is(err, store.ErrFenced) || try == swapTries {
			return err
		}
	}
}

// DeleteSubscription implements [store.Store]. It deletes a subscription whose definition
// does not decode too, freeing the name. It reads the record afresh and deletes it on the
// revision read; a write of another node in between (its owner's state) makes it read the
// record again and try once more, up to putTries tries, past which it fails with
// [store.ErrFenced]. A record of an earlier life of the topic (staleLife) is deleted too, but
// the delete answers [store.ErrNotFound]: the topic that stands had no such subscription.
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
	for try := 1; ; try++ {
		stale := false
		if err := s.load(ctx, e, topic, name); err != nil {
			d, ok := asDamagedDef(err)
			if !ok {
				return err
			}
			e.setRev(d.rev) // a damaged definition is deleted all the same
		} else if stale, err = s.staleLife(ctx, topic, e.rec); err != nil {
			return err
		}
		err := s.meta.Purge(ctx, key, jetstream.LastRevision(e.rev))
		if err == nil {
			if err := s.dropSub(ctx, e, key, topic, name); err != nil || !stale {
				return err
			}
			return subNotFound(topic, name) // deleted as a record of the topic's earlier life
		}
		e.rec = nil
		if !isWrongLastSeq(err) {
			return fmt.Errorf("jetstream store: deleting subscription %q of topic %q: %w", name, topic, err)
		}
		if try == putTries {
			return fenced(fmt.Sprintf("subscription %q of topic %q", name, topic), err)
		}
	}
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
	return s.dropSubData(ctx, topic, name)
}

// dropSubData removes a subscription's parked events and delivery histories, its record
// deleted.
func (s *Store) dropSubData(ctx context.Context, topic, name string) error {
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
