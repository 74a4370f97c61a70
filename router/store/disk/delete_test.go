package disk_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
)

// deleteRig is a store on a memory file system holding topics a (subscriptions s1 and s2,
// one event), b (subscription x) and c, with a call held under way on a's subscription s1
// (as a journal read or a state write is) until release. draining gets a delete's name
// as it starts waiting for the calls under way, waiting a catalogue change's as it starts
// waiting for a delete of its name to end. failing makes the write-ahead log's writes
// fail.
type deleteRig struct {
	s        *disk.Store
	fs       vfs.FS
	failing  *atomic.Bool
	release  func()
	draining chan string
	waiting  chan string
}

func openDeleteRig(t *testing.T) *deleteRig {
	t.Helper()
	ctx := t.Context()
	r := &deleteRig{
		failing:  new(atomic.Bool),
		draining: make(chan string, 4),
		waiting:  make(chan string, 4),
	}
	r.fs = logFS{vfs.NewMem(), func(string) error {
		if r.failing.Load() {
			return errInjected
		}
		return nil
	}}
	opts := disk.Options{}
	disk.SetFreeBytes(&opts, func(string) (uint64, error) { return 0, nil }) // no reopening after a failure
	disk.SetDeleteHooks(&opts,
		func(topic, sub string) { r.draining <- topic + "/" + sub },
		func(topic, sub string) { r.waiting <- topic + "/" + sub })
	s, err := disk.OpenFS("db", opts, r.fs)
	if err != nil {
		t.Fatal(err)
	}
	r.s = s
	t.Cleanup(func() { _ = s.Close() })
	for _, step := range []func() error{
		func() error { return s.PutTopic(ctx, "a", []byte("a-old")) },
		func() error { return s.PutSubscription(ctx, "a", "s1", []byte("s1-old")) },
		func() error { return s.PutSubscription(ctx, "a", "s2", nil) },
		func() error {
			_, err := s.Append(ctx, "a", publishTime, []*schemas.Event{testEvent("a1")})
			return err
		},
		func() error { return s.PutTopic(ctx, "b", nil) },
		func() error { return s.PutSubscription(ctx, "b", "x", nil) },
		func() error { return s.PutTopic(ctx, "c", nil) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	release, err := s.Hold("a", "s1")
	if err != nil {
		t.Fatal(err)
	}
	r.release = sync.OnceFunc(release)
	t.Cleanup(r.release) // before Close, which waits for the call
	return r
}

// startDelete runs del and returns once it waits for the call held under way.
func (r *deleteRig) startDelete(t *testing.T, del func() error) <-chan error {
	t.Helper()
	deleted := make(chan error, 1)
	go func() { deleted <- del() }()
	select {
	case <-r.draining:
	case err := <-deleted:
		t.Fatalf("the delete returned %v before waiting for the call under way", err)
	}
	return deleted
}

func names(t *testing.T, defs []store.Definition, err error) []string {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	var n []string
	for _, d := range defs {
		n = append(n, d.Name+"="+string(d.Spec))
	}
	return n
}

// While a delete waits for the calls under way on what it deletes, other topics' and
// subscriptions' definitions change: the catalogue's turn is not kept across the wait. The
// delete itself still waits for the call.
func TestDeleteLetsOtherCatalogueChangesGoOn(t *testing.T) {
	for _, tc := range []struct {
		name       string
		del        func(ctx context.Context, s *disk.Store) error
		others     []func(ctx context.Context, s *disk.Store) error
		topics     []string
		subsOfA    []string // nil: a is gone
		subsOfB    []string
		wantDrains string
	}{
		{
			name: "DeleteTopic",
			del:  func(ctx context.Context, s *disk.Store) error { return s.DeleteTopic(ctx, "a") },
			others: []func(ctx context.Context, s *disk.Store) error{
				func(ctx context.Context, s *disk.Store) error { return s.PutTopic(ctx, "b2", nil) },
				func(ctx context.Context, s *disk.Store) error { return s.DeleteTopic(ctx, "c") },
				func(ctx context.Context, s *disk.Store) error { return s.PutSubscription(ctx, "b", "y", nil) },
				func(ctx context.Context, s *disk.Store) error { return s.DeleteSubscription(ctx, "b", "x") },
			},
			topics:  []string{"b=", "b2="},
			subsOfB: []string{"y="},
		},
		{
			name: "DeleteSubscription",
			del:  func(ctx context.Context, s *disk.Store) error { return s.DeleteSubscription(ctx, "a", "s1") },
			others: []func(ctx context.Context, s *disk.Store) error{
				func(ctx context.Context, s *disk.Store) error { return s.PutTopic(ctx, "b2", nil) },
				func(ctx context.Context, s *disk.Store) error { return s.DeleteTopic(ctx, "c") },
				func(ctx context.Context, s *disk.Store) error { return s.PutTopic(ctx, "a", []byte("a-new")) },
				func(ctx context.Context, s *disk.Store) error { return s.PutSubscription(ctx, "a", "s3", nil) },
				func(ctx context.Context, s *disk.Store) error { return s.DeleteSubscription(ctx, "a", "s2") },
			},
			topics:  []string{"a=a-new", "b=", "b2="},
			subsOfA: []string{"s3="},
			subsOfB: []string{"x="},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			r := openDeleteRig(t)
			deleted := r.startDelete(t, func() error { return tc.del(ctx, r.s) })

			others := make(chan error, 1)
			go func() {
				var errs []error
				for _, call := range tc.others {
					errs = append(errs, call(ctx, r.s))
				}
				others <- errors.Join(errs...)
			}()
			select {
			case err := <-others:
				if err != nil {
					t.Fatalf("changes of other names while the delete waits: %v", err)
				}
			case <-time.After(time.Minute): // bounds a hang; they take milliseconds
				t.Fatal("changes of other names still wait for the delete, which waits for a call under way on what it deletes")
			}
			select {
			case err := <-deleted:
				t.Fatalf("the delete returned %v with a call under way on what it deletes", err)
			default:
			}

			r.release()
			if err := <-deleted; err != nil {
				t.Fatalf("delete: %v", err)
			}
			defs, err := r.s.Topics(ctx)
			if got := names(t, defs, err); !slices.Equal(got, tc.topics) {
				t.Errorf("topics = %q, want %q", got, tc.topics)
			}
			defs, err = r.s.Subscriptions(ctx, "a")
			if tc.subsOfA == nil {
				if !errors.Is(err, store.ErrNotFound) {
					t.Errorf("Subscriptions(a) = %v, %v; want ErrNotFound", defs, err)
				}
			} else if got := names(t, defs, err); !slices.Equal(got, tc.subsOfA) {
				t.Errorf("subscriptions of a = %q, want %q", got, tc.subsOfA)
			}
			defs, err = r.s.Subscriptions(ctx, "b")
			if got := names(t, defs, err); !slices.Equal(got, tc.subsOfB) {
				t.Errorf("subscriptions of b = %q, want %q", got, tc.subsOfB)
			}
		})
	}
}

// A catalogue change naming what a delete under way deletes waits for the delete to end,
// off the catalogue's turn, and then finds it gone (PutTopic and PutSubscription create it
// again) or, when the delete failed, as it was; one whose ctx ends meanwhile writes
// nothing. In every case the store holds a definition if and only if a call that wrote it
// succeeded, before and after reopening.
func TestChangeOfTheNameBeingDeletedWaitsForTheDelete(t *testing.T) {
	type want struct {
		topics []string
		subsOf []string // a's subscriptions; nil: a is gone
		events int      // events in a's journal
	}
	for _, tc := range []struct {
		name      string
		del       func(ctx context.Context, s *disk.Store) error
		change    func(ctx context.Context, s *disk.Store) error
		cancel    bool // the change's ctx ends while it waits
		fail      bool // the delete's write fails
		delErr    error
		changeErr error
		want      want
	}{
		{
			name:   "PutTopic during DeleteTopic",
			del:    func(ctx context.Context, s *disk.Store) error { return s.DeleteTopic(ctx, "a") },
			change: func(ctx context.Context, s *disk.Store) error { return s.PutTopic(ctx, "a", []byte("a-new")) },
			want:   want{topics: []string{"a=a-new", "b=", "c="}, subsOf: []string{}},
		},
		{
			name:      "PutTopic given up during DeleteTopic",
			del:       func(ctx context.Context, s *disk.Store) error { return s.DeleteTopic(ctx, "a") },
			change:    func(ctx context.Context, s *disk.Store) error { return s.PutTopic(ctx, "a", []byte("a-new")) },
			cancel:    true,
			changeErr: context.Canceled,
			want:      want{topics: []string{"b=", "c="}},
		},
		{
			name:      "PutSubscription during DeleteTopic",
			del:       func(ctx context.Context, s *disk.Store) error { return s.DeleteTopic(ctx, "a") },
			change:    func(ctx context.Context, s *disk.Store) error { return s.PutSubscription(ctx, "a", "s3", nil) },
			changeErr: store.ErrNotFound,
			want:      want{topics: []string{"b=", "c="}},
		},
		{
			name:      "PutTopic during a DeleteTopic whose write fails",
			del:       func(ctx context.Context, s *disk.Store) error { return s.DeleteTopic(ctx, "a") },
			change:    func(ctx context.Context, s *disk.Store) error { return s.PutTopic(ctx, "a", []byte("a-new")) },
			fail:      true,
			delErr:    disk.ErrFailed,
			changeErr: disk.ErrFailed,
			want:      want{topics: []string{"a=a-old", "b=", "c="}, subsOf: []string{"s1=s1-old", "s2="}, events: 1},
		},
		{
			name: "PutSubscription during DeleteSubscription",
			del:  func(ctx context.Context, s *disk.Store) error { return s.DeleteSubscription(ctx, "a", "s1") },
			change: func(ctx context.Context, s *disk.Store) error {
				return s.PutSubscription(ctx, "a", "s1", []byte("s1-new"))
			},
			want: want{topics: []string{"a=a-old", "b=", "c="}, subsOf: []string{"s1=s1-new", "s2="}, events: 1},
		},
		{
			name: "PutSubscription given up during DeleteSubscription",
			del:  func(ctx context.Context, s *disk.Store) error { return s.DeleteSubscription(ctx, "a", "s1") },
			change: func(ctx context.Context, s *disk.Store) error {
				return s.PutSubscription(ctx, "a", "s1", []byte("s1-new"))
			},
			cancel:    true,
			changeErr: context.Canceled,
			want:      want{topics: []string{"a=a-old", "b=", "c="}, subsOf: []string{"s2="}, events: 1},
		},
		{
			name:   "DeleteTopic during DeleteSubscription",
			del:    func(ctx context.Context, s *disk.Store) error { return s.DeleteSubscription(ctx, "a", "s1") },
			change: func(ctx context.Context, s *disk.Store) error { return s.DeleteTopic(ctx, "a") },
			want:   want{topics: []string{"b=", "c="}},
		},
		{
			name: "PutSubscription during a DeleteSubscription whose write fails",
			del:  func(ctx context.Context, s *disk.Store) error { return s.DeleteSubscription(ctx, "a", "s1") },
			change: func(ctx context.Context, s *disk.Store) error {
				return s.PutSubscription(ctx, "a", "s1", []byte("s1-new"))
			},
			fail:      true,
			delErr:    disk.ErrFailed,
			changeErr: disk.ErrFailed,
			want:      want{topics: []string{"a=a-old", "b=", "c="}, subsOf: []string{"s1=s1-old", "s2="}, events: 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			r := openDeleteRig(t)
			deleted := r.startDelete(t, func() error { return tc.del(ctx, r.s) })

			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			changed := make(chan error, 1)
			go func() { changed <- tc.change(cctx, r.s) }()
			select {
			case <-r.waiting:
			case err := <-changed:
				t.Fatalf("the change returned %v while a delete of its name was under way", err)
			case d := <-r.draining:
				t.Fatalf("the change started deleting %s while a delete of its name was under way", d)
			}
			if tc.cancel {
				cancel()
				if err := <-changed; !errors.Is(err, tc.changeErr) {
					t.Fatalf("change = %v, want %v", err, tc.changeErr)
				}
			}
			r.failing.Store(tc.fail)
			r.release()
			if err := <-deleted; !errors.Is(err, tc.delErr) {
				t.Fatalf("delete = %v, want %v", err, tc.delErr)
			}
			if !tc.cancel {
				if err := <-changed; !errors.Is(err, tc.changeErr) {
					t.Fatalf("change = %v, want %v", err, tc.changeErr)
				}
			}

			check := func(s store.Store, when string) {
				t.Helper()
				defs, err := s.Topics(ctx)
				if got := names(t, defs, err); !slices.Equal(got, tc.want.topics) {
					t.Errorf("%s: topics = %q, want %q", when, got, tc.want.topics)
				}
				defs, err = s.Subscriptions(ctx, "a")
				if tc.want.subsOf == nil {
					if !errors.Is(err, store.ErrNotFound) {
						t.Errorf("%s: Subscriptions(a) = %v, %v; want ErrNotFound", when, defs, err)
					}
					return
				}
				if got := names(t, defs, err); !slices.Equal(got, tc.want.subsOf) {
					t.Errorf("%s: subscriptions of a = %q, want %q", when, got, tc.want.subsOf)
				}
				entries, err := s.Read(ctx, "a", 1, 10)
				if err != nil || len(entries) != tc.want.events {
					t.Errorf("%s: Read(a) = %d entries, %v; want %d", when, len(entries), err, tc.want.events)
				}
			}
			if !tc.fail {
				// (A failed instance may show the failed batch in its memtable; what
				// counts is what is on disk, read after reopening.)
				check(r.s, "before reopening")
			}
			r.failing.Store(false)
			if err := r.s.Close(); err != nil && !tc.fail {
				t.Fatal(err)
			}
			s, err := disk.OpenFS("db", disk.Options{}, r.fs)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			check(s, "after reopening")
		})
	}
}
