package disk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas/clip"
)

// Damaged definitions.
//
// A topic or subscription definition whose value pebble reads back intact but that does not
// decode, a subscription stored under a topic id that no definition holds, a subscription key
// too short to hold a topic id: each is the loss of one definition, not of the store. Open
// loads the rest and reports each once (an ERROR saying what is not served and what to do, a
// count of kind DamageDefinition, a problem of egrid store check), as stateDamage does for
// subscription state. A damaged definition keeps its name: PutTopic and PutSubscription refuse
// it ([store.ErrDamaged]) rather than write a fresh definition over the remains, and
// DeleteTopic and DeleteSubscription remove it, with what is stored under the id its value
// gives (when that id can be read and is no definition's that loaded), so that the name can be
// created again.
//
// A sealed definition that does not open with the secret key is damage only when the key was
// proven right at this Open (checkKey: by the key check, or, that being damaged, by another
// definition), or the store has no key check and so never sealed one: otherwise the key does
// not fit and Open refuses, as a matter of configuration.

// damagedDef is a definition found damaged at Open.
type damagedDef struct {
	// id is the topic's or subscription's id as its damaged value gives it, when that can
	// be read and is no loaded definition's; 0 when not: what is stored under the
	// definition cannot be told apart, stays on disk and is not served.
	id  uint64
	err error
}

// damagedDefError is the error of PutTopic or PutSubscription for a name whose stored
// definition is damaged. It wraps [ErrCorrupt] (and so [store.ErrCorrupt]) and
// [store.ErrDamaged]; its message, shown to the admin API's caller, names no file.
type damagedDefError struct {
	what string // `topic "orders"`, `subscription "billing" of topic "orders"`
	fix  string // the delete command
}

func (e *damagedDefError) Error() string {
	return e.what + ": its stored definition is damaged, and the name stays taken by what is left of it: " +
		e.fix + " (which removes what is stored under it) and create it again, or restore the data directory from a backup"
}

func (e *damagedDefError) Is(target error) bool {
	return target == ErrCorrupt || target == store.ErrDamaged || target == store.ErrCorrupt
}

// defID returns the id a definition's value gives (both formats put a version byte, then the
// uvarint id), when it can be read.
func defID(v []byte) (uint64, bool) {
	if len(v) < 2 {
		return 0, false
	}
	id, n := binary.Uvarint(v[1:])
	return id, n > 0 && id > 0
}

// keyMisfit reports whether err, from decoding a definition, says the secret key does not fit
// the store rather than that the value is damaged: Open refuses then. Once the key check has
// opened with the key (keyChecked), a sealed value that does not open is damaged.
func (s *Store) keyMisfit(err error) bool {
	return errors.Is(err, ErrSecretKey) && !s.keyChecked
}

// catalogLoad gathers, as load scans the definitions, the damaged ones; report resolves and
// reports them once the scan is done.
type catalogLoad struct {
	topicIDs   map[uint64]string // topic id → name, of the topics loaded
	subIDs     map[uint64]bool   // ids of the subscriptions loaded
	topics     []badDef          // topic definitions that do not decode
	subs       []badDef          // subscription definitions of loaded topics that do not decode
	orphans    []badDef          // subscriptions under a topic id no loaded definition holds
	malformed  [][]byte          // subscription keys shorter than a topic id
	orphanSubs map[uint64]int    // topic id → subscriptions stored under it (orphans)
}

// badDef is one damaged definition found by load.
type badDef struct {
	topic   string // the topic's name (topics and subs)
	topicID uint64 // the topic's id (orphans)
	name    string // the subscription's name (subs and orphans)
	v       []byte
	err     error
}

// Orphaned and malformed subscription definitions.
//
// A subscription stored under a topic id that no topic definition holds, and a subscription
// key too short to name a topic, belong to nothing the store serves, and no API reaches them:
// reported and left on disk, they were reported again at every start. The start that reports
// them removes them (an orphan with the state under its id, when that id can be read and is
// no one else's), in the synced batch of load's repairs; a read-only store (egrid store check)
// lists them as what the next start removes. An orphan whose topic id may be a damaged topic's
// (one whose id cannot be told) stays while that topic does: deleting the topic lets the next
// start remove it.

// reportDefDamage records and reports what cl found: damaged topics and subscriptions keep
// their names (s.damagedTopics, topic.damagedSubs), and each is logged once, counted and kept
// for egrid store check (s.loadProblems).
func (s *Store) reportDefDamage(cl *catalogLoad) (removals []repair) {
	const check = " egrid store check --data-dir DIR lists the damage"
	// An id the damaged value gives is taken only if no definition that loaded has it and
	// it was handed out; ids claimed by two damaged definitions are no one's.
	claims := map[uint64]int{}
	idOf := func(v []byte) uint64 {
		id, ok := defID(v)
		if !ok || id > s.nextID || cl.subIDs[id] || cl.topicIDs[id] != "" {
			return 0
		}
		return id
	}
	for _, ds := range [][]badDef{cl.topics, cl.subs} {
		for _, d := range ds {
			if id := idOf(d.v); id != 0 {
				claims[id]++
			}
		}
	}
	claim := func(v []byte) uint64 {
		if id := idOf(v); claims[id] == 1 {
			return id
		}
		return 0
	}
	claimedTopics := map[uint64]bool{}
	unknownTopic := false // a damaged topic whose id cannot be told: orphans may be its
	for _, d := range cl.topics {
		id := claim(d.v)
		unknownTopic = unknownTopic || id == 0
		s.damagedTopics[d.topic] = &damagedDef{id: id, err: d.err}
		subs := 0
		if id != 0 {
			claimedTopics[id] = true
			subs = cl.orphanSubs[id]
		}
		name := clip.String(d.topic)
		lost := "the topic, its subscriptions and its journal are not served (publishes to it are refused as to an unknown topic)"
		fix := fmt.Sprintf("Recover it from a backup of the data directory; or delete the topic (egrid topic delete --name %s) and create it again: the delete removes what is stored under it", name)
		if id == 0 {
			fix = fmt.Sprintf("Recover it from a backup of the data directory; or delete the topic (egrid topic delete --name %s) and create it again: its journal and subscriptions cannot be told from the damaged value, so they stay on disk, unserved", name)
		}
		s.log.Error("disk store: a topic's stored definition is damaged (it does not decode); the store starts without it: "+lost+". "+fix+";"+check,
			"dir", s.dir, "topic", name, "subscriptions", subs, "err", d.err)
		s.loadProblems = append(s.loadProblems, fmt.Errorf("%w: topic %q: its definition is damaged (%v): %s. %s", ErrCorrupt, name, d.err, lost, fix))
		s.damaged(DamageDefinition)
	}
	for _, d := range cl.subs {
		t := s.topics[d.topic]
		if t.damagedSubs == nil {
			t.damagedSubs = make(map[string]*damagedDef)
		}
		t.damagedSubs[d.name] = &damagedDef{id: claim(d.v), err: d.err}
		topic, name := clip.String(d.topic), clip.String(d.name)
		fix := fmt.Sprintf("Recover it from a backup of the data directory; or delete the subscription (egrid event-subscription delete --topic %s --name %s) and create it again", topic, name)
		s.log.Error("disk store: a subscription's stored definition is damaged (it does not decode); the store starts without it: the subscription is not served (its events are not delivered to it), and its topic and the topic's other subscriptions go on. "+fix+";"+check,
			"dir", s.dir, "topic", topic, "subscription", name, "err", d.err)
		s.loadProblems = append(s.loadProblems, fmt.Errorf("%w: subscription %q of topic %q: its definition is damaged (%v): it is not served. %s", ErrCorrupt, name, topic, d.err, fix))
		s.damaged(DamageDefinition)
	}
	removes, removed := "this start removes it", "it is removed"
	if s.opts.ReadOnly {
		removes, removed = "the next start of egrid removes it", "the next start of egrid removes it"
	}
	for _, d := range cl.orphans {
		if claimedTopics[d.topicID] {
			continue // part of a damaged topic, reported with it
		}
		name := clip.String(d.name)
		if unknownTopic {
			s.log.Error("disk store: a subscription is stored under a topic id that no topic definition holds; the store starts without it: it is not served. It may belong to the topic whose definition is damaged; it stays until that topic is deleted. Recover it from a backup of the data directory;"+check,
				"dir", s.dir, "topicID", d.topicID, "subscription", name)
			s.loadProblems = append(s.loadProblems, fmt.Errorf("%w: subscription %q is stored under topic id %d, which no topic definition holds: it is not served, and stays while a topic whose definition is damaged may hold it; restore the directory from a backup to recover it", ErrCorrupt, name, d.topicID))
			s.damaged(DamageDefinition)
			continue
		}
		removals = append(removals, repair{key: subDefKey(d.topicID, d.name), drop: true})
		stateKnown := false
		if id := idOf(d.v); id != 0 && claims[id] == 0 {
			stateKnown = true
			lo, hi := idRange(prefixParked, id)
			hlo, hhi := idRange(prefixHistory, id)
			removals = append(removals, repair{key: idKey(prefixCursor, id), drop: true}, repair{key: lo, hi: hi, drop: true},
				repair{key: idKey(prefixProbation, id), drop: true}, repair{key: hlo, hi: hhi, drop: true})
		}
		s.log.Error("disk store: a subscription is stored under a topic id that no topic definition holds: it belongs to nothing the store serves and no API reaches it; "+removes+" (with its state when its id can be read). Restore the data directory from a backup if it is missed;"+check,
			"dir", s.dir, "topicID", d.topicID, "subscription", name, "stateRemoved", stateKnown && !s.opts.ReadOnly)
		s.loadProblems = append(s.loadProblems, fmt.Errorf("%w: subscription %q is stored under topic id %d, which no topic definition holds: it is not served, and %s; restore the directory from a backup to recover it", ErrCorrupt, name, d.topicID, removed))
		s.damaged(DamageDefinition)
	}
	for _, k := range cl.malformed {
		removals = append(removals, repair{key: k, drop: true})
		key := clip.Quote(string(k))
		s.log.Error("disk store: a subscription definition's key is too short to name its topic: it belongs to nothing the store serves; "+removes+". Restore the data directory from a backup if a subscription is missing;"+check,
			"dir", s.dir, "key", key)
		s.loadProblems = append(s.loadProblems, fmt.Errorf("%w: subscription definition key %s is too short to name a topic: it is left out, and %s", ErrCorrupt, key, removed))
		s.damaged(DamageDefinition)
	}
	return removals
}

// findDamagedTopic returns the stored name and record of the damaged topic name, matched
// exactly or else ignoring case (the router's names are case-insensitive). s.mu must be held.
func (s *Store) findDamagedTopic(name string) (string, *damagedDef) {
	if d := s.damagedTopics[name]; d != nil {
		return name, d
	}
	for n, d := range s.damagedTopics {
		if strings.EqualFold(n, name) {
			return n, d
		}
	}
	return "", nil
}

// findDamagedSub is findDamagedTopic for a subscription of t. s.mu must be held.
func findDamagedSub(t *topic, name string) (string, *damagedDef) {
	if d := t.damagedSubs[name]; d != nil {
		return name, d
	}
	for n, d := range t.damagedSubs {
		if strings.EqualFold(n, name) {
			return n, d
		}
	}
	return "", nil
}

// refuseDamagedTopic returns the error of a PutTopic of name when a damaged definition holds
// it, nil otherwise.
func (s *Store) refuseDamagedTopic(name string) error {
	s.mu.RLock()
	stored, d := s.findDamagedTopic(name)
	s.mu.RUnlock()
	if d == nil {
		return nil
	}
	return &damagedDefError{
		what: fmt.Sprintf("topic %q", clip.String(stored)),
		fix:  fmt.Sprintf("delete the topic (egrid topic delete --name %s)", clip.String(stored)),
	}
}

// refuseDamagedSub returns the error of a PutSubscription of name in topic t when a damaged
// definition holds it, nil otherwise.
func (s *Store) refuseDamagedSub(t *topic, topicName, name string) error {
	s.mu.RLock()
	stored, d := findDamagedSub(t, name)
	s.mu.RUnlock()
	if d == nil {
		return nil
	}
	return &damagedDefError{
		what: fmt.Sprintf("subscription %q of topic %q", clip.String(stored), clip.String(topicName)),
		fix:  fmt.Sprintf("delete the subscription (egrid event-subscription delete --topic %s --name %s)", clip.String(topicName), clip.String(stored)),
	}
}

// liveIDs returns the ids of the topics and subscriptions loaded. s.mu must be held.
func (s *Store) liveIDs() map[uint64]bool {
	ids := make(map[uint64]bool)
	for _, t := range s.topics {
		ids[t.id] = true
		for _, sb := range t.subs {
			ids[sb.id] = true
		}
	}
	return ids
}

// deleteDamagedTopic is DeleteTopic of a topic whose definition is damaged: handled is false
// when name is a loaded topic's or no damaged one's. It deletes the definition and, when its
// id is known, everything stored under that id (journal, trim floor, subscription definitions
// and the state of each subscription whose id can be read), in one synced batch.
func (s *Store) deleteDamagedTopic(g *generation, name string) (handled bool, err error) {
	s.mu.RLock()
	_, live := s.topics[name]
	stored, d := s.findDamagedTopic(name)
	var ids map[uint64]bool
	if !live && d != nil {
		ids = s.liveIDs()
	}
	nextID := s.nextID
	s.mu.RUnlock()
	if live || d == nil {
		return false, nil
	}
	b := g.db.NewBatch()
	errs := []error{b.Delete(nameKey(prefixTopic, stored), nil)}
	if d.id != 0 {
		errs = append(errs,
			b.DeleteRange(idKey(prefixSub, d.id), idKey(prefixSub, d.id+1), nil),
			b.DeleteRange(idKey(prefixJournal, d.id), idKey(prefixJournal, d.id+1), nil),
			b.Delete(idKey(prefixFloor, d.id), nil))
		lo, hi := idRange(prefixSub, d.id)
		errs = append(errs, scan(g.db, lo, hi, func(k, v []byte) error {
			id, _, err := s.decodeDef(k, v)
			if err != nil {
				id, _ = defID(v)
			}
			if id == 0 || id > nextID || ids[id] {
				return nil // not one that can be told to be this subscription's
			}
			return errors.Join(deleteSubState(b, &sub{id: id})...)
		}))
	}
	err = errors.Join(errs...)
	if err != nil {
		_ = b.Close()
	} else {
		err = g.commit(b, pebble.Sync, s.onFail)
	}
	if err != nil {
		return true, fmt.Errorf("deleting topic %q, whose definition is damaged: %w", clip.String(stored), err)
	}
	s.mu.Lock()
	delete(s.damagedTopics, stored)
	s.mu.Unlock()
	s.log.Warn("disk store: deleted a topic whose definition was damaged, with what was stored under it", "dir", s.dir, "topic", clip.String(stored), "idKnown", d.id != 0)
	return true, nil
}

// deleteDamagedSub is DeleteSubscription of a subscription whose definition is damaged:
// handled is false when topicName is no loaded topic, or name is a loaded subscription's or
// no damaged one's. It deletes the definition and, when its id is known, the subscription's
// state, in one synced batch.
func (s *Store) deleteDamagedSub(g *generation, topicName, name string) (handled bool, err error) {
	s.mu.RLock()
	t := s.topics[topicName]
	var stored string
	var d *damagedDef
	if t != nil && t.subs[name] == nil {
		stored, d = findDamagedSub(t, name)
	}
	s.mu.RUnlock()
	if d == nil {
		return false, nil
	}
	b := g.db.NewBatch()
	errs := []error{b.Delete(subDefKey(t.id, stored), nil)}
	if d.id != 0 {
		errs = append(errs, deleteSubState(b, &sub{id: d.id})...)
	}
	err = errors.Join(errs...)
	if err != nil {
		_ = b.Close()
	} else {
		err = g.commit(b, pebble.Sync, s.onFail)
	}
	if err != nil {
		return true, fmt.Errorf("deleting subscription %q of topic %q, whose definition is damaged: %w", clip.String(stored), clip.String(topicName), err)
	}
	s.mu.Lock()
	delete(t.damagedSubs, stored)
	s.mu.Unlock()
	s.log.Warn("disk store: deleted a subscription whose definition was damaged, with its state", "dir", s.dir, "topic", clip.String(topicName), "subscription", clip.String(stored), "idKnown", d.id != 0)
	return true, nil
}

// damagedSubsState adds to b the deletion of the state of t's damaged subscriptions whose ids
// are known (DeleteTopic: their definitions go with the topic's range).
func (s *Store) damagedSubsState(b *pebble.Batch, t *topic) []error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var errs []error
	for _, d := range t.damagedSubs {
		if d.id != 0 {
			errs = append(errs, deleteSubState(b, &sub{id: d.id})...)
		}
	}
	return errs
}

// damagedDefKey reports whether the definition stored under k was found damaged at Open
// (Topics and Subscriptions leave it out).
func (s *Store) damagedDefKey(k []byte) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	switch {
	case len(k) > 0 && k[0] == prefixTopic:
		return s.damagedTopics[string(k[1:])] != nil
	case len(k) >= 9 && k[0] == prefixSub:
		for _, t := range s.topics {
			if t.id == idOf(k) {
				return t.damagedSubs[string(k[9:])] != nil
			}
		}
	}
	return false
}

// definitionDamage is the error of a read of definitions (a listing, a swap's read) that
// pebble reports in a damaged table block (err) while the store runs: Open read them whole,
// so the block was damaged since. It wraps [ErrCorrupt] and says what to do; the block is
// reported once per Store (an ERROR, a count of kind table), however often it is read. The
// definitions Open loaded are served as they were; the next start refuses, as catalogCorrupt
// says.
func (s *Store) definitionDamage(err error) error {
	if s.lostBlock(err, lostDefinitions) {
		s.log.Error("disk store: topic and subscription definitions are in a damaged table block and cannot be read; listings and changes of the definitions in it fail, and the next start is refused. Restore the data directory from a backup; egrid store check --data-dir DIR lists the damage",
			"dir", s.dir, "err", err)
	}
	return fmt.Errorf("%w: the topic and subscription definitions are in a damaged table block and cannot be read (%v): listings and changes of the definitions in it fail, and the next start is refused. Restore the directory from a backup; egrid store check --data-dir %s lists the damage",
		ErrCorrupt, err, s.dir)
}

// catalogCorrupt is load's error when pebble reports damage as it scans the definitions: a
// damaged table block can hold any number of them, whose names cannot be read, so the store
// refuses to start rather than start without topics it cannot name.
func (s *Store) catalogCorrupt(err error) error {
	p := fmt.Errorf("%w: the topic and subscription definitions are in a damaged table block and cannot be read (%v): the store cannot tell which topics it would start without. Restore the directory from a backup; egrid store check --data-dir %s lists the damage", ErrCorrupt, err, s.dir)
	s.log.Error("disk store: damage found; refusing to start", "dir", s.dir, "err", p)
	s.damaged(DamageTable)
	return &damageError{problems: []error{p}}
}
