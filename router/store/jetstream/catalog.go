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
	if err := checkName("topic", topic); err != nil {
		return err
	}
	e, err := s.meta.Get(ctx, topicKey(topic))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return topicNotFound(topic)
	case err != nil:
		return fmt.Errorf("jetstream store: reading topic %q: %w", topic, err)
	}
	if v, err := decodeTopic(e.Value()); err == nil && v.claim != 0 {
		return topicNotFound(topic)
	}
	return nil
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
// record then and answers 409, or success when the definitions are the same).
func (s *Store) PutSubscription(ctx context.Context, topic, name string, spec []byte) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	key, e, err := s.definitionEntry(ctx, topic, name)
	if err != nil {
		return err
	}
	defer e.release()
	for try := 1; ; try++ {
		replacing, err := s.putSub(ctx, e, key, topic, name, spec)
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
// lost to another node's is not.
func (s *Store) putSub(ctx context.Context, e *subEntry, key, topic, name string, spec []byte) (replacing bool, err error) {
	if e.rec == nil {
		if err := s.load(ctx, e, topic, name); err != nil && !errors.Is(err, store.ErrNotFound) {
			return false, err
		}
	}
	if e.rec != nil {
		rec := *e.rec
		rec.spec = slices.Clone(spec)
		return true, s.write(ctx, e, topic, name, &rec)
	}
	if err := s.createSub(ctx, e, key, topic, name, spec); err != nil {
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
func (s *Store) createSub(ctx context.Context, e *subEntry, key, topic, name string, spec []byte) error {
	last, err := s.lastSeq(ctx, topic)
	if err != nil {
		return err
	}
	rec := &subRecord{epoch: newEpoch(), spec: slices.Clone(spec), cursor: last}
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
	e.setRev(rev)
	e.rec = rec
	return nil
}

// definitionEntry is what a subscription's definition write starts with: the name checked,
// the topic found, and the subscription's key with its entry held (the caller releases it).
func (s *Store) definitionEntry(ctx context.Context, topic, name string) (string, *subEntry, error) {
	if err := checkName("subscription", name); err != nil {
		return "", nil, err
	}
	if err := s.topicExists(ctx, topic); err != nil {
		return "", nil, err
	}
	key := subKey(topic, name)
	e, err := s.entry(ctx, key)
	if err != nil {
		return "", nil, err
	}
	return key, e, nil
}

// errKeyTaken is wrapped by createSub's error when the key holds a record.
var errKeyTaken = errors.New("the key holds a record")

// CreateSubscription implements [store.Store]: the record is written with createSub alone,
// with no read before it, so there is no moment between a look and the write for another
// node's create to land in: when the key holds a record the write fails and CreateSubscription
// reads it only to tell a damaged definition ([store.ErrDamaged], as PutSubscription) from one
// that stands ([store.ErrExists]).
func (s *Store) CreateSubscription(ctx context.Context, topic, name string, spec []byte) error {
	ctx, cancel, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	key, e, err := s.definitionEntry(ctx, topic, name)
	if err != nil {
		return err
	}
	defer e.release()
	err = s.createSub(ctx, e, key, topic, name, spec)
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
// does not decode too, freeing the name. It reads the record afresh and deletes it on the
// revision read; a write of another node in between (its owner's state) makes it read the
// record again and try once more, up to putTries tries, past which it fails with
// [store.ErrFenced].
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
		if err := s.load(ctx, e, topic, name); err != nil {
			d, ok := asDamagedDef(err)
			if !ok {
				return err
			}
			e.setRev(d.rev) // a damaged definition is deleted all the same
		}
		err := s.meta.Purge(ctx, key, jetstream.LastRevision(e.rev))
		if err == nil {
			return s.dropSub(ctx, e, key, topic, name)
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
