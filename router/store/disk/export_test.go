package disk

import (
	"context"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// OpenFS is Open on the file system fs (an in-memory or fault-injecting one), for tests.
func OpenFS(dir string, opts Options, fs vfs.FS) (*Store, error) {
	opts.fs = fs
	return Open(dir, opts)
}

// CompactedSize flushes the memtable, compacts the whole key space and returns the bytes the
// table files take on disk: what the store really holds once pebble has dropped deleted keys.
func (s *Store) CompactedSize(ctx context.Context) (uint64, error) {
	if err := s.gen.db.Flush(); err != nil {
		return 0, err
	}
	if err := s.gen.db.Compact(ctx, []byte{0}, []byte{0xff}, false); err != nil {
		return 0, err
	}
	return s.gen.db.EstimateDiskUsage([]byte{0}, []byte{0xff})
}

// Keys counts the live keys whose first byte is prefix (a key kind; keys.go).
func (s *Store) Keys(prefix byte) (n int, err error) {
	it, err := s.gen.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefix}, UpperBound: []byte{prefix + 1}})
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, it.Close()) }()
	for valid := it.First(); valid; valid = it.Next() {
		n++
	}
	return n, it.Error()
}

// Key kinds, for Keys.
const (
	KindJournal = prefixJournal
	KindParked  = prefixParked
	KindCursor  = prefixCursor
	KindSubDef  = prefixSub
)

// SetFreeBytes replaces the free-space probe of the stores opened with opts.
func SetFreeBytes(opts *Options, fn func(dir string) (uint64, error)) { opts.freeBytes = fn }

// WaitFailed waits until the store's failed state is want (true: failed) or ctx ends.
func (s *Store) WaitFailed(ctx context.Context, want bool) error {
	for {
		failed, changed := s.health.watch()
		if failed == want {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// WriteFormat records v as the store's format version, as a newer egrid would.
func (s *Store) WriteFormat(v uint64) error {
	return s.gen.db.Set(formatKey, encodeUint64(v), pebble.Sync)
}

// Format returns the format version recorded in the store and whether one is.
func (s *Store) Format() (uint64, bool, error) { return readFormat(s.gen.db) }

// SetDeleteHooks sets, for the stores opened with opts, the functions called as a delete
// starts waiting for the calls under way on what it deletes (onDrain) and as a catalogue
// change starts waiting for a delete of the name it changes to end (onDeletionWait).
func SetDeleteHooks(opts *Options, onDrain, onDeletionWait func(topic, sub string)) {
	opts.onDrain, opts.onDeletionWait = onDrain, onDeletionWait
}

// Hold registers a call under way on topic (and its subscription sub, when not empty), as a
// journal read or a state write does, until release is called.
func (s *Store) Hold(topic, sub string) (release func(), err error) {
	c, err := s.enter(topic, sub)
	if err != nil {
		return nil, err
	}
	return c.done, nil
}

// SetRecoverHook sets, for the stores opened with opts, a function a recovery calls once it
// has written the new instance everything it needs and is about to switch to it.
func SetRecoverHook(opts *Options, beforeSwitch func()) { opts.onRecoverSwitch = beforeSwitch }

// PendingWrites is how many state writes the store keeps in memory while it is failed.
func (s *Store) PendingWrites() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.pending)
}

// WriteStateStore is writeStateStore and DamageAt damageAt, for tests of damage.
var (
	WriteStateStore = writeStateStore
	DamageAt        = damageAt
)

// WriteFloorDamagedStore writes in dir writeValStore's store, trimmed through 5 (audit's
// cursor at 5), with topic orders' trim floor alone in a damaged table block.
func WriteFloorDamagedStore(t *testing.T, dir string) {
	t.Helper()
	writeValStore(t, dir, 5, 5, func(s *Store) { isolateAndDamage(t, s, dir, idKey(prefixFloor, s.topics["orders"].id)) })
}

// NoCompactions keeps the table files of the stores opened with opts as flushed.
func NoCompactions(opts *Options) { opts.tune = noCompactions }

// DamageDefinition writes the stored definition of topic (sub "") or of its subscription sub
// again alone into a table file of its own and damages that file's block (isolateAndDamage):
// reads of it fail with pebble's corruption error. dir is the store's directory on the OS's
// file system.
func (s *Store) DamageDefinition(t *testing.T, dir, topic, sub string) {
	t.Helper()
	s.mu.RLock()
	key := nameKey(prefixTopic, topic)
	if sub != "" {
		key = subDefKey(s.topics[topic].id, sub)
	}
	s.mu.RUnlock()
	isolateAndDamage(t, s, dir, key)
}

// SetReclaimHook sets the hook called as a reclaim below the floor has ended.
func SetReclaimHook(opts *Options, fn func()) { opts.onReclaimed = fn }

// WaitForCleaning waits until pebble has deleted the files it found obsolete.
func WaitForCleaning(s *Store) {
	s.mu.RLock()
	g := s.gen
	s.mu.RUnlock()
	g.db.TestOnlyWaitForCleaning()
}
