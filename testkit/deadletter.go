package testkit

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

// ObjectStore is an in-memory [sinks.ObjectStore]: the dead-letter store of the harness, and a
// working fake for tests of anything that writes or reads dead-letter objects. It passes the
// same testkit/sinktest conformance suite as the MinIO store. Buckets are created on the first
// Put (like blob.Config.CreateBuckets). LastModified is the time of the Put, so in a synctest
// bubble it is virtual.
type ObjectStore struct {
	mu      sync.Mutex
	buckets map[string]*memBucket
	puts    int
	listed  int
}

// memBucket is a bucket of an [ObjectStore]: its objects, and their keys in order for List.
type memBucket struct {
	objects map[string]storedObject
	keys    []string // sorted
}

type storedObject struct {
	body []byte
	info sinks.ObjectInfo
}

var _ sinks.ObjectStore = (*ObjectStore)(nil)

// NewObjectStore returns an empty in-memory object store.
func NewObjectStore() *ObjectStore {
	return &ObjectStore{buckets: make(map[string]*memBucket)}
}

// Put implements [sinks.ObjectStore].
func (s *ObjectStore) Put(ctx context.Context, bucket, key string, body []byte, opts sinks.PutOptions) (sinks.ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return sinks.ObjectInfo{}, fmt.Errorf("writing %s/%s: %w", bucket, key, err)
	}
	sum := md5.Sum(body)
	var meta map[string]string
	for k, v := range opts.Metadata {
		if meta == nil {
			meta = make(map[string]string, len(opts.Metadata))
		}
		meta[strings.ToLower(k)] = v
	}
	info := sinks.ObjectInfo{
		Bucket: bucket, Key: key, ETag: hex.EncodeToString(sum[:]), Size: int64(len(body)),
		ContentType: opts.ContentType, LastModified: time.Now(), URL: "memory://" + bucket + "/" + key, Metadata: meta,
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.buckets[bucket]
	if !ok {
		b = &memBucket{objects: make(map[string]storedObject)}
		s.buckets[bucket] = b
	}
	if _, ok := b.objects[key]; !ok {
		i, _ := slices.BinarySearch(b.keys, key)
		b.keys = slices.Insert(b.keys, i, key)
	}
	b.objects[key] = storedObject{body: slices.Clone(body), info: info}
	s.puts++
	return cloneInfo(info), nil
}

// List implements [sinks.ObjectStore].
func (s *ObjectStore) List(ctx context.Context, bucket string, q sinks.ListQuery) ([]sinks.ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("listing %s: %w", bucket, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.buckets[bucket]
	if !ok {
		return nil, fmt.Errorf("listing %s: %w", bucket, sinks.ErrBucketNotFound)
	}
	i, _ := slices.BinarySearch(b.keys, q.Prefix)
	if q.StartAfter > q.Prefix {
		var found bool
		if i, found = slices.BinarySearch(b.keys, q.StartAfter); found {
			i++
		}
	}
	var out []sinks.ObjectInfo
	for ; i < len(b.keys) && len(out) < q.PageSize() && strings.HasPrefix(b.keys[i], q.Prefix); i++ {
		out = append(out, cloneInfo(b.objects[b.keys[i]].info))
	}
	s.listed += len(out)
	return out, nil
}

// Get implements [sinks.ObjectStore].
func (s *ObjectStore) Get(ctx context.Context, bucket, key string, limit int64) ([]byte, sinks.ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, sinks.ObjectInfo{}, fmt.Errorf("reading %s/%s: %w", bucket, key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.buckets[bucket]
	if !ok {
		return nil, sinks.ObjectInfo{}, fmt.Errorf("reading %s/%s: %w", bucket, key, sinks.ErrBucketNotFound)
	}
	o, ok := b.objects[key]
	if !ok {
		return nil, sinks.ObjectInfo{}, fmt.Errorf("reading %s/%s: %w", bucket, key, sinks.ErrObjectNotFound)
	}
	if limit > 0 && o.info.Size > limit {
		return nil, sinks.ObjectInfo{}, fmt.Errorf("reading %s/%s: %w: it holds %d bytes, more than the %d bytes the reader takes", bucket, key, sinks.ErrObjectTooLarge, o.info.Size, limit)
	}
	return slices.Clone(o.body), cloneInfo(o.info), nil
}

// cloneInfo copies an object's description, so callers share no map with the store.
func cloneInfo(info sinks.ObjectInfo) sinks.ObjectInfo {
	info.Metadata = maps.Clone(info.Metadata)
	return info
}

// Puts counts the successful Puts so far.
func (s *ObjectStore) Puts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.puts
}

// Listed counts the object descriptions List has answered so far: what listings cost.
func (s *ObjectStore) Listed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listed
}

// Objects lists every object of bucket (none when the bucket does not exist), ordered by key.
func (s *ObjectStore) Objects(bucket string) []sinks.ObjectInfo {
	return s.objectsUnder(bucket, "")
}

// objectsUnder lists every object of bucket whose key begins with prefix, ordered by key.
func (s *ObjectStore) objectsUnder(bucket, prefix string) []sinks.ObjectInfo {
	var out []sinks.ObjectInfo
	for o, err := range sinks.ListAll(context.Background(), s, bucket, sinks.ListQuery{Prefix: prefix}) {
		if err != nil {
			return nil
		}
		out = append(out, o)
	}
	return out
}

// Records decodes every dead-letter object of bucket whose key begins with prefix, in key
// order, as records of input schema in published to topicID. It fails the test when an object
// does not decode.
func (s *ObjectStore) Records(t testing.TB, bucket, prefix string, in schemas.Schema, topicID string) []schemas.DeadLetterRecord {
	t.Helper()
	var out []schemas.DeadLetterRecord
	for _, o := range s.objectsUnder(bucket, prefix) {
		body, _, err := s.Get(context.Background(), bucket, o.Key, 0)
		if err != nil {
			t.Fatalf("reading %s: %v", o.Key, err)
		}
		recs, err := schemas.DecodeDeadLetters(body, in, topicID)
		if err != nil {
			t.Fatalf("dead-letter object %s does not decode: %v\n%s", o.Key, err, body)
		}
		out = append(out, recs...)
	}
	return out
}

// ErrStoreDown is what a [FaultyObjectStore] returns while it is down.
var ErrStoreDown = errors.New("object store is down (testkit fault injection)")

// FaultyObjectStore wraps an object store and fails every call while it is down, the way an
// unreachable MinIO does: for virtual-time tests of the dead-letter back-off and the four-hour
// limit. It is safe for concurrent use.
type FaultyObjectStore struct {
	inner sinks.ObjectStore

	mu       sync.Mutex
	down     bool
	failures int
	held     chan struct{} // closed by the release of HoldReads
}

var _ sinks.ObjectStore = (*FaultyObjectStore)(nil)

// NewFaultyObjectStore wraps inner; it starts up.
func NewFaultyObjectStore(inner sinks.ObjectStore) *FaultyObjectStore {
	return &FaultyObjectStore{inner: inner}
}

// Down makes every later call fail with [ErrStoreDown] until [FaultyObjectStore.Up].
func (f *FaultyObjectStore) Down() { f.set(true) }

// Up ends a [FaultyObjectStore.Down].
func (f *FaultyObjectStore) Up() { f.set(false) }

func (f *FaultyObjectStore) set(down bool) {
	f.mu.Lock()
	f.down = down
	f.mu.Unlock()
}

// HoldReads makes every later List and Get wait, whatever its context (a store that ignores
// cancellation), until release is called.
func (f *FaultyObjectStore) HoldReads() (release func()) {
	held := make(chan struct{})
	f.mu.Lock()
	f.held = held
	f.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			if f.held == held {
				f.held = nil
			}
			f.mu.Unlock()
			close(held)
		})
	}
}

// waitHeld waits while reads are held.
func (f *FaultyObjectStore) waitHeld() {
	f.mu.Lock()
	held := f.held
	f.mu.Unlock()
	if held != nil {
		<-held
	}
}

// Failures counts the calls that failed because the store was down.
func (f *FaultyObjectStore) Failures() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failures
}

func (f *FaultyObjectStore) fail() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.down {
		return nil
	}
	f.failures++
	return ErrStoreDown
}

// Put implements [sinks.ObjectStore].
func (f *FaultyObjectStore) Put(ctx context.Context, bucket, key string, body []byte, opts sinks.PutOptions) (sinks.ObjectInfo, error) {
	if err := f.fail(); err != nil {
		return sinks.ObjectInfo{}, fmt.Errorf("writing %s/%s: %w", bucket, key, err)
	}
	return f.inner.Put(ctx, bucket, key, body, opts)
}

// List implements [sinks.ObjectStore].
func (f *FaultyObjectStore) List(ctx context.Context, bucket string, q sinks.ListQuery) ([]sinks.ObjectInfo, error) {
	f.waitHeld()
	if err := f.fail(); err != nil {
		return nil, fmt.Errorf("listing %s: %w", bucket, err)
	}
	return f.inner.List(ctx, bucket, q)
}

// Get implements [sinks.ObjectStore].
func (f *FaultyObjectStore) Get(ctx context.Context, bucket, key string, limit int64) ([]byte, sinks.ObjectInfo, error) {
	f.waitHeld()
	if err := f.fail(); err != nil {
		return nil, sinks.ObjectInfo{}, fmt.Errorf("reading %s/%s: %w", bucket, key, err)
	}
	return f.inner.Get(ctx, bucket, key, limit)
}

// DeadLetterObjects returns the in-memory store the harness's router writes dead-letter
// objects to (after the dead-letter delay, in virtual time). [Harness.DeadLetters] shows the
// same events as they are handed off, before any delay.
func (h *Harness) DeadLetterObjects() *ObjectStore { return h.objects }

// DeadLetterStore returns the fault-injecting wrapper the router writes through: Down makes
// every write fail, as an unreachable MinIO does, until Up.
func (h *Harness) DeadLetterStore() *FaultyObjectStore { return h.dlStore }
