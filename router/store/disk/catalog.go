package disk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/egridio/egrid/router/store"
)

// The catalogue: the topics' and subscriptions' definitions, changed one at a time by the
// catalogue's owner goroutine (catalogLoop) and committed with a sync. A delete waits for the
// calls under way on what it deletes (markDeleting, deleteDrained) and is settled by a
// recovery when its commit failed (Store.unsettled).

// deletion names a topic (sub empty) or a subscription whose delete is under way.
type deletion struct{ topic, sub string }

// catalogJob is a catalogue change handed to the catalogue's owner goroutine: run, then done
// closed with its result in err.
type catalogJob struct {
	run  func() error
	err  error
	done chan struct{}
}

// catalogLoop is the catalogue's owner goroutine: it runs the catalogue changes one at a
// time, in the order it takes them, until Close has seen every call end (catalogQuit). It
// runs from Open to Close.
func (s *Store) catalogLoop() {
	defer close(s.catalogDone)
	for {
		select {
		case j := <-s.catalogJobs:
			j.err = j.run()
			close(j.done)
		case <-s.catalogQuit:
			return
		}
	}
}

// catalogTurn runs run on the catalogue's owner goroutine, after the changes handed to it
// before, and returns its result. A caller still waiting for its turn (behind a change whose
// synced commit a slow or full disk holds up) gives up when ctx ends, with ctx's error, and
// run is not run; once run has been taken, the caller waits for its result, so it knows
// whether the change was made. A store whose owner has returned (closed) returns ErrClosed.
func (s *Store) catalogTurn(ctx context.Context, run func() error) error {
	j := &catalogJob{run: run, done: make(chan struct{})}
	select {
	case s.catalogJobs <- j:
	case <-ctx.Done():
		return fmt.Errorf("waiting for the catalogue changes before it: %w", ctx.Err())
	case <-s.catalogDone:
		return ErrClosed
	}
	<-j.done
	return j.err
}

// catalogDo runs change, a catalogue change on topic, on its subscription sub when sub is
// not empty, and on every one of its subscriptions when allSubs is set (DeleteTopic), in its
// turn on the catalogue's owner goroutine (catalogTurn), once no delete of any of them is
// under way and with the store checked to take writes (catalogEnter). An error of the turn
// or of that check is returned wrapped in what; change's own error as it is.
//
// A delete does not keep the turn while it waits for the calls under way on what it deletes
// (deleteDrained), so that other topics' changes go on; the names it marks in s.deleting
// keep the changes that would race with its batch away until it has ended: a PutTopic of
// the name would have its new definition deleted by the batch, a PutSubscription's would
// be left behind by a delete of its topic, a DeleteTopic would leave the state of a
// subscription whose delete then fails. Such a change waits for the delete to end (off the
// owner goroutine, on the delete's channel, or until ctx ends) and then starts again: after
// a delete that committed it finds no topic or subscription (PutTopic creates a new one),
// after one that failed it finds the old one.
func (s *Store) catalogDo(ctx context.Context, what, topic, sub string, allSubs bool, change func(g *generation) error) error {
	for {
		var ended chan struct{}
		entered := false
		err := s.catalogTurn(ctx, func() error {
			if ended = s.deletionOf(topic, sub, allSubs); ended != nil {
				return nil
			}
			g, release, err := s.catalogEnter()
			if err != nil {
				return err
			}
			defer release()
			entered = true
			return change(g)
		})
		if err != nil && !entered {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ended == nil {
			return err
		}
		if s.opts.onDeletionWait != nil {
			s.opts.onDeletionWait(topic, sub)
		}
		select {
		case <-ended:
		case <-ctx.Done():
			return fmt.Errorf("%s: waiting for a delete of the same name to end: %w", what, ctx.Err())
		}
	}
}

// deletionOf returns the channel of a delete under way that a catalogue change on topic
// (and sub, or allSubs) must wait for, or nil. It runs on the catalogue's owner goroutine.
func (s *Store) deletionOf(topic, sub string, allSubs bool) chan struct{} {
	if ended, ok := s.deleting[deletion{topic: topic}]; ok {
		return ended
	}
	if sub != "" {
		if ended, ok := s.deleting[deletion{topic, sub}]; ok {
			return ended
		}
	}
	if allSubs {
		for d, ended := range s.deleting {
			if d.topic == topic {
				return ended
			}
		}
	}
	return nil
}

// catalogEnter registers a catalogue change, on the catalogue's owner goroutine: it checks
// the store is open and takes writes. The caller must call release.
func (s *Store) catalogEnter() (g *generation, release func(), err error) {
	s.mu.RLock()
	closed, g := s.closed, s.gen
	if !closed {
		g.users.Add(1)
		s.ops.Add(1)
	}
	s.mu.RUnlock()
	if closed {
		return nil, nil, ErrClosed
	}
	release = func() {
		g.users.Done()
		s.ops.Done()
	}
	if err := g.err(); err != nil {
		release()
		return nil, nil, err
	}
	return g, release, nil
}

// markDeleting marks d as being deleted, in a catalogue change (catalogDo) of a DeleteTopic
// or DeleteSubscription that has taken what it deletes out of the in-memory catalogue (new
// calls find nothing). It counts the delete in s.ops (above zero: the change is registered),
// so Close waits for it; the delete's deleteDrained must follow.
func (s *Store) markDeleting(d deletion) {
	s.deleting[d] = make(chan struct{})
	s.ops.Add(1)
}

// deleteDrained ends a delete of d that markDeleting marked, once its catalogue change has
// ended: it waits for the calls under way on what it deletes (ops), off the catalogue's turn,
// then in a turn of its own runs commit on the store's generation of that moment. Both run on
// a goroutine of the store's (counted in s.ops by markDeleting, so Close waits for it), which
// finishes the delete whatever becomes of the caller: the mark must be removed, and the name
// end deleted or not, never left marked. The caller waits for its result until ctx ends, and
// then returns ctx's error, the delete still under way: it may yet take effect (reading the
// name back tells). When the store has closed or failed meanwhile, restore puts back what
// was taken out (with s.mu held): it is still on disk. When commit fails, its batch may have
// reached the disk all the same (the log written, its sync failed): restore puts it back,
// and the recovery that reopens the store reads whether the batch is on disk and takes it
// out of memory again if it is (settleDeletes); a delete that finds that recovery has done
// so returns nil. The mark is removed, and the changes waiting for it woken, at the end.
func (s *Store) deleteDrained(ctx context.Context, d deletion, ops *sync.WaitGroup, commit func(*generation) error, restore func()) error {
	result := make(chan error, 1) // the goroutine never waits for a caller that gave up
	go func() {
		defer s.ops.Done()
		result <- s.finishDelete(d, ops, commit, restore)
	}()
	select {
	case err := <-result:
		return err
	case <-ctx.Done():
		select {
		case err := <-result: // it ended as ctx did: its result is known
			return err
		default:
		}
		return fmt.Errorf("waiting for its commit (it may still take effect: read the name back to know): %w", ctx.Err())
	}
}

// finishDelete is the goroutine of deleteDrained: it waits for the calls under way on what
// the delete takes out (ops) and then commits it, or restores it, in a turn of its own that
// does not end with any caller's ctx, and removes the mark of d.
func (s *Store) finishDelete(d deletion, ops *sync.WaitGroup, commit func(*generation) error, restore func()) error {
	if s.opts.onDrain != nil {
		s.opts.onDrain(d.topic, d.sub)
	}
	ops.Wait()
	return s.catalogTurn(context.Background(), func() error {
		defer func() {
			close(s.deleting[d])
			delete(s.deleting, d)
		}()
		g, release, err := s.catalogEnter()
		attempted := false
		if err == nil {
			err = commit(g)
			attempted = err != nil
			release()
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		u := s.unsettled[d]
		switch {
		case err == nil:
			delete(s.unsettled, d)
		case u.gone:
			delete(s.unsettled, d) // a recovery found the batch on disk: the delete took effect
			return nil
		default:
			restore()
			if attempted {
				u.restored = true // until a recovery has read whether the batch is on disk
			} else {
				delete(s.unsettled, d)
			}
		}
		return err
	})
}

// unsettled is a delete whose outcome on disk is not known yet (Store.unsettled): of topic t,
// or of its subscription sb when sb is not nil.
type unsettled struct {
	t  *topic
	sb *sub
	// restored is set when its commit failed and it put back what it had taken out of
	// memory; gone when a recovery found its batch on disk before it did.
	restored, gone bool
}

// PutTopic implements [store.Store]. Definitions are committed with a sync.
func (s *Store) PutTopic(ctx context.Context, name string, spec []byte) error {
	return s.putTopic(ctx, name, spec, false)
}

// CreateTopic implements [store.Store]: PutTopic, whose check that the name holds no topic
// runs in the same catalogue change as the write.
func (s *Store) CreateTopic(ctx context.Context, name string, spec []byte) error {
	return s.putTopic(ctx, name, spec, true)
}

// putTopic is PutTopic, or CreateTopic when create is set.
func (s *Store) putTopic(ctx context.Context, name string, spec []byte, create bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.catalogDo(ctx, fmt.Sprintf("putting topic %q", name), name, "", false, func(g *generation) error {
		if err := s.refuseDamagedTopic(name); err != nil {
			return fmt.Errorf("putting topic: %w", err)
		}
		s.mu.RLock()
		t, exists := s.topics[name]
		id := s.nextID + 1
		s.mu.RUnlock()
		if exists && create {
			return fmt.Errorf("creating topic %q: %w", name, store.ErrExists)
		}
		b := g.db.NewBatch()
		if exists {
			id = t.id
		} else if err := b.Set(nextIDKey, encodeUint64(id), nil); err != nil {
			_ = b.Close()
			return fmt.Errorf("putting topic %q: %w", name, err)
		}
		if err := b.Set(nameKey(prefixTopic, name), s.encodeDef(nameKey(prefixTopic, name), id, spec), nil); err != nil {
			_ = b.Close()
			return fmt.Errorf("putting topic %q: %w", name, err)
		}
		if err := g.commit(b, pebble.Sync, s.onFail); err != nil {
			return fmt.Errorf("putting topic %q: %w", name, err)
		}
		if !exists {
			s.mu.Lock()
			s.nextID = id
			s.topics[name] = &topic{id: id, subs: make(map[string]*sub)}
			s.mu.Unlock()
		}
		return nil
	})
}

// DeleteTopic implements [store.Store]. The definition, journal, subscriptions and their
// state go in one synced batch of range deletions, written once the calls under way on the
// topic are done (new ones find no topic). It does not keep the catalogue's turn while it
// waits for them: other topics' definitions change meanwhile, and a change naming this topic
// or one of its subscriptions waits for the delete to end (catalogDo). A delete that does
// not commit (the store closed or failed meanwhile, the write failed) leaves the topic as it
// was. When ctx ends while the delete waits for those calls or for its commit (behind
// another change's, or its own on a slow disk), it returns ctx's error but the store
// finishes the delete: it may still take effect, and reading the name back tells.
func (s *Store) DeleteTopic(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var t *topic
	err := s.catalogDo(ctx, fmt.Sprintf("deleting topic %q", name), name, "", true, func(g *generation) error {
		if handled, err := s.deleteDamagedTopic(g, name); handled {
			return err
		}
		s.mu.Lock()
		found, ok := s.topics[name]
		if ok {
			delete(s.topics, name)
			s.unsettled[deletion{topic: name}] = &unsettled{t: found}
		}
		s.mu.Unlock()
		if !ok {
			return fmt.Errorf("topic %q: %w", name, store.ErrNotFound)
		}
		t = found
		s.markDeleting(deletion{topic: name})
		return nil
	})
	if err != nil || t == nil {
		return err
	}
	commit := func(g *generation) error {
		b := g.db.NewBatch()
		errs := []error{
			b.Delete(nameKey(prefixTopic, name), nil),
			b.DeleteRange(idKey(prefixSub, t.id), idKey(prefixSub, t.id+1), nil),
			b.DeleteRange(idKey(prefixJournal, t.id), idKey(prefixJournal, t.id+1), nil),
			b.Delete(idKey(prefixFloor, t.id), nil),
		}
		s.mu.RLock()
		for _, sb := range t.subs {
			errs = append(errs, deleteSubState(b, sb)...)
		}
		s.mu.RUnlock()
		errs = append(errs, s.damagedSubsState(b, t)...)
		if err := errors.Join(errs...); err != nil {
			_ = b.Close()
			return err
		}
		return g.commit(b, pebble.Sync, s.onFail)
	}
	restore := func() { s.topics[name] = t }
	if err := s.deleteDrained(ctx, deletion{topic: name}, &t.ops, commit, restore); err != nil {
		return fmt.Errorf("deleting topic %q: %w", name, err)
	}
	return nil
}

func deleteSubState(b *pebble.Batch, sb *sub) []error {
	lo, hi := idRange(prefixParked, sb.id)
	hlo, hhi := idRange(prefixHistory, sb.id)
	return []error{
		b.Delete(idKey(prefixCursor, sb.id), nil),
		b.DeleteRange(lo, hi, nil),
		b.Delete(idKey(prefixProbation, sb.id), nil),
		b.DeleteRange(hlo, hhi, nil),
	}
}

// Topics implements [store.Store].
func (s *Store) Topics(ctx context.Context) ([]store.Definition, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := s.enter("", "")
	if err != nil {
		return nil, err
	}
	defer c.done()
	defs, err := s.definitions(c.g.db, []byte{prefixTopic}, []byte{prefixTopic + 1})
	if err != nil {
		return nil, fmt.Errorf("listing topics: %w", err)
	}
	return defs, nil
}

// definitions lists the definitions in [lo, hi); a name is what follows len(lo) in the key.
// A damaged table block among them fails the listing (definitionDamage).
func (s *Store) definitions(db *pebble.DB, lo, hi []byte) ([]store.Definition, error) {
	defs := []store.Definition{}
	err := scan(db, lo, hi, func(k, v []byte) error {
		_, spec, err := s.decodeDef(k, v)
		if err != nil && s.damagedDefKey(k) {
			return nil // reported at Open: not served
		}
		if err != nil {
			return fmt.Errorf("definition %q: %w", k[len(lo):], err)
		}
		defs = append(defs, store.Definition{Name: string(k[len(lo):]), Spec: spec})
		return nil
	})
	if pebble.IsCorruptionError(err) {
		return nil, s.definitionDamage(err)
	}
	return defs, err
}

// PutSubscription implements [store.Store]. A new subscription's cursor is written in the
// same synced batch as its definition: the topic's LastSeq when the call starts.
func (s *Store) PutSubscription(ctx context.Context, topicName, name string, spec []byte) error {
	return s.putSubscription(ctx, topicName, name, spec, false)
}

// CreateSubscription implements [store.Store]: PutSubscription, whose check that the name
// holds no subscription runs in the same catalogue change as the write.
func (s *Store) CreateSubscription(ctx context.Context, topicName, name string, spec []byte) error {
	return s.putSubscription(ctx, topicName, name, spec, true)
}

// putSubscription is PutSubscription, or CreateSubscription when create is set.
func (s *Store) putSubscription(ctx context.Context, topicName, name string, spec []byte, create bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.catalogDo(ctx, fmt.Sprintf("putting subscription %q of topic %q", name, topicName), topicName, name, false, func(g *generation) error {
		s.mu.RLock()
		t, ok := s.topics[topicName]
		var sb *sub
		exists := false
		if ok {
			sb, exists = t.subs[name]
		}
		id := s.nextID + 1
		s.mu.RUnlock()
		if !ok {
			return fmt.Errorf("topic %q: %w", topicName, store.ErrNotFound)
		}
		if exists && create {
			return fmt.Errorf("creating subscription %q of topic %q: %w", name, topicName, store.ErrExists)
		}
		if !exists {
			if err := s.refuseDamagedSub(t, topicName, name); err != nil {
				return fmt.Errorf("putting subscription: %w", err)
			}
		}
		b := g.db.NewBatch()
		var errs []error
		if !exists {
			sb = &sub{id: id, cursor: t.lastSeq()}
			errs = append(errs,
				b.Set(nextIDKey, encodeUint64(sb.id), nil),
				b.Set(idKey(prefixCursor, sb.id), encodeUint64(sb.cursor), nil))
		}
		errs = append(errs, b.Set(subDefKey(t.id, name), s.encodeDef(subDefKey(t.id, name), sb.id, spec), nil))
		if err := errors.Join(errs...); err != nil {
			_ = b.Close()
			return fmt.Errorf("putting subscription %q of topic %q: %w", name, topicName, err)
		}
		if err := g.commit(b, pebble.Sync, s.onFail); err != nil {
			return fmt.Errorf("putting subscription %q of topic %q: %w", name, topicName, err)
		}
		if !exists {
			s.mu.Lock()
			s.nextID = sb.id
			t.subs[name] = sb
			s.mu.Unlock()
		}
		return nil
	})
}

// SwapSubscription implements [store.Store]. The read, the comparison and the synced write
// happen in one catalogue change, in its turn after the definition changes before it.
func (s *Store) SwapSubscription(ctx context.Context, topicName, name string, old, spec []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.catalogDo(ctx, fmt.Sprintf("swapping subscription %q of topic %q", name, topicName), topicName, name, false, func(g *generation) error {
		s.mu.RLock()
		t, ok := s.topics[topicName]
		var sb *sub
		if ok {
			sb, ok = t.subs[name]
		}
		s.mu.RUnlock()
		if !ok {
			return fmt.Errorf("subscription %q of topic %q: %w", name, topicName, store.ErrNotFound)
		}
		key := subDefKey(t.id, name)
		v, found, err := get(g.db, key)
		if pebble.IsCorruptionError(err) {
			return fmt.Errorf("swapping subscription %q of topic %q: %w", name, topicName, s.definitionDamage(err))
		}
		if err != nil {
			return fmt.Errorf("swapping subscription %q of topic %q: reading its definition: %w", name, topicName, err)
		}
		if !found {
			return fmt.Errorf("subscription %q of topic %q: %w", name, topicName, store.ErrNotFound)
		}
		_, cur, err := s.decodeDef(key, v)
		if err != nil {
			return fmt.Errorf("swapping subscription %q of topic %q: %w", name, topicName, err)
		}
		if !bytes.Equal(cur, old) {
			return fmt.Errorf("subscription %q of topic %q: %w", name, topicName, store.ErrChanged)
		}
		b := g.db.NewBatch()
		if err := b.Set(key, s.encodeDef(key, sb.id, spec), nil); err != nil {
			_ = b.Close()
			return fmt.Errorf("swapping subscription %q of topic %q: %w", name, topicName, err)
		}
		if err := g.commit(b, pebble.Sync, s.onFail); err != nil {
			return fmt.Errorf("swapping subscription %q of topic %q: %w", name, topicName, err)
		}
		return nil
	})
}

// DeleteSubscription implements [store.Store]. It is written once the calls under way on the
// subscription are done (new ones find no subscription), without keeping the catalogue's
// turn while it waits for them, as DeleteTopic: a change naming the subscription or its topic
// waits for the delete to end. A delete that does not commit leaves the subscription as it
// was. As with DeleteTopic, one whose ctx ends while it waits for its commit returns ctx's
// error and may still take effect.
func (s *Store) DeleteSubscription(ctx context.Context, topicName, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var t *topic
	var sb *sub
	err := s.catalogDo(ctx, fmt.Sprintf("deleting subscription %q of topic %q", name, topicName), topicName, name, false, func(g *generation) error {
		if handled, err := s.deleteDamagedSub(g, topicName, name); handled {
			return err
		}
		s.mu.Lock()
		ft, ok := s.topics[topicName]
		var fsb *sub
		if ok {
			if fsb, ok = ft.subs[name]; ok {
				delete(ft.subs, name)
				s.unsettled[deletion{topicName, name}] = &unsettled{t: ft, sb: fsb}
			}
		}
		s.mu.Unlock()
		if !ok {
			return fmt.Errorf("subscription %q of topic %q: %w", name, topicName, store.ErrNotFound)
		}
		t, sb = ft, fsb
		s.markDeleting(deletion{topicName, name})
		return nil
	})
	if err != nil || sb == nil {
		return err
	}
	commit := func(g *generation) error {
		b := g.db.NewBatch()
		errs := append(deleteSubState(b, sb), b.Delete(subDefKey(t.id, name), nil))
		if err := errors.Join(errs...); err != nil {
			_ = b.Close()
			return err
		}
		return g.commit(b, pebble.Sync, s.onFail)
	}
	restore := func() { t.subs[name] = sb }
	if err := s.deleteDrained(ctx, deletion{topicName, name}, &sb.ops, commit, restore); err != nil {
		return fmt.Errorf("deleting subscription %q of topic %q: %w", name, topicName, err)
	}
	return nil
}

// Subscriptions implements [store.Store].
func (s *Store) Subscriptions(ctx context.Context, topicName string) ([]store.Definition, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := s.enter(topicName, "")
	if err != nil {
		return nil, err
	}
	defer c.done()
	defs, err := s.definitions(c.g.db, idKey(prefixSub, c.t.id), idKey(prefixSub, c.t.id+1))
	if err != nil {
		return nil, fmt.Errorf("listing subscriptions of topic %q: %w", topicName, err)
	}
	return defs, nil
}
