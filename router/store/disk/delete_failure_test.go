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

// failRig is a store on a memory file system whose write-ahead log fails on demand, and that
// reopens itself only once room is set: topics a (subscription s1, one event) and b
// (subscription x).
type failRig struct {
	s        *disk.Store
	fs       vfs.FS
	failOp   atomic.Value // "write" or "sync": that log operation fails; "" none
	armed    atomic.Bool  // the next log write stops: blocked gets a value, and it returns what answer gets
	blocked  chan struct{}
	answer   chan error
	room     atomic.Bool
	draining chan string
}

func openFailRig(t *testing.T, beforeSwitch func()) *failRig {
	t.Helper()
	ctx := t.Context()
	r := &failRig{blocked: make(chan struct{}, 1), answer: make(chan error), draining: make(chan string, 4)}
	r.failOp.Store("")
	r.fs = logFS{vfs.NewMem(), func(op string) error {
		if op == "write" && r.armed.CompareAndSwap(true, false) {
			r.blocked <- struct{}{}
			return <-r.answer
		}
		if r.failOp.Load() == op {
			return errInjected
		}
		return nil
	}}
	opts := disk.Options{RecoverInterval: time.Millisecond}
	disk.SetFreeBytes(&opts, func(string) (uint64, error) {
		if r.room.Load() {
			return 1 << 40, nil
		}
		return 0, nil
	})
	disk.SetDeleteHooks(&opts, func(topic, sub string) { r.draining <- topic + "/" + sub }, nil)
	if beforeSwitch != nil {
		disk.SetRecoverHook(&opts, beforeSwitch)
	}
	s, err := disk.OpenFS("db", opts, r.fs)
	if err != nil {
		t.Fatal(err)
	}
	r.s = s
	t.Cleanup(func() { _ = s.Close() })
	for _, step := range []func() error{
		func() error { return s.PutTopic(ctx, "a", []byte("a")) },
		func() error { return s.PutSubscription(ctx, "a", "s1", []byte("s1")) },
		func() error {
			_, err := s.Append(ctx, "a", publishTime, []*schemas.Event{testEvent("a1")})
			return err
		},
		func() error { return s.PutTopic(ctx, "b", []byte("b")) },
		func() error { return s.PutSubscription(ctx, "b", "x", []byte("x")) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// recover lets the store reopen itself and waits until it has.
func (r *failRig) recover(t *testing.T) {
	t.Helper()
	r.failOp.Store("")
	r.room.Store(true)
	if err := r.s.WaitFailed(t.Context(), false); err != nil {
		t.Fatal(err)
	}
}

// catalogue returns the store's topics and subscriptions ("a/s1"), and checks that each
// topic takes an Append: the store serves what it lists.
func catalogue(t *testing.T, s *disk.Store, when string) []string {
	t.Helper()
	ctx := t.Context()
	defs, err := s.Topics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range defs {
		out = append(out, d.Name)
		subs, err := s.Subscriptions(ctx, d.Name)
		if err != nil {
			t.Fatalf("%s: Subscriptions(%s): %v", when, d.Name, err)
		}
		for _, sd := range subs {
			out = append(out, d.Name+"/"+sd.Name)
		}
		if _, err := s.Append(ctx, d.Name, publishTime, []*schemas.Event{testEvent(d.Name + "-new")}); err != nil {
			t.Errorf("%s: Append to topic %s, listed: %v", when, d.Name, err)
		}
	}
	return out
}

// found reports whether the store serves a's subscription s1's state (as a subscription actor
// loads it), failing on anything but ErrNotFound.
func found(t *testing.T, s *disk.Store) bool {
	t.Helper()
	_, err := s.LoadSubscription(t.Context(), "a", "s1")
	if errors.Is(err, store.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// A delete whose synced write failed after its batch reached the write-ahead log (the log
// write went through, its sync did not) is on disk once the store reopens itself: the store
// then serves what is on disk, not the topic or subscription put back in memory, which would
// take publishes and state that the next start no longer finds.
func TestDeleteWhoseSyncFailedServesWhatIsOnDiskAfterRecovery(t *testing.T) {
	for _, tc := range []struct {
		name string
		del  func(ctx context.Context, s *disk.Store) error
		want []string
	}{
		{
			name: "DeleteTopic",
			del:  func(ctx context.Context, s *disk.Store) error { return s.DeleteTopic(ctx, "a") },
			want: []string{"b", "b/x"},
		},
		{
			name: "DeleteSubscription",
			del:  func(ctx context.Context, s *disk.Store) error { return s.DeleteSubscription(ctx, "a", "s1") },
			want: []string{"a", "b", "b/x"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			r := openFailRig(t, nil)
			r.failOp.Store("sync")
			if err := tc.del(ctx, r.s); !errors.Is(err, disk.ErrFailed) {
				t.Fatalf("delete = %v, want ErrFailed", err)
			}
			r.recover(t)
			running := catalogue(t, r.s, "after the store reopened itself")
			runningFound := found(t, r.s)
			if err := r.s.Close(); err != nil {
				t.Fatal(err)
			}
			s, err := disk.OpenFS("db", disk.Options{}, r.fs)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			reopened := catalogue(t, s, "after a restart")
			if f := found(t, s); f != runningFound {
				t.Errorf("the store served a/s1's state: %v after reopening itself, %v after a restart", runningFound, f)
			}
			if !slices.Equal(reopened, tc.want) {
				t.Fatalf("after a restart: %q, want %q (the delete's batch reached the log)", reopened, tc.want)
			}
			if !slices.Equal(running, reopened) {
				t.Fatalf("the store served %q after reopening itself, but %q is on disk", running, reopened)
			}
		})
	}
}

// A DeleteTopic that does not commit puts the topic back; when it does so while the store is
// reopening itself after a publish to that topic failed, the topic takes publishes again once
// the store has reopened, like every other topic (it was numbered from its journal with them).
func TestDeleteRestoredDuringRecoveryTakesPublishes(t *testing.T) {
	ctx := t.Context()
	var (
		release func()
		deleted = make(chan error, 1)
		once    sync.Once
	)
	r := openFailRig(t, func() {
		once.Do(func() {
			release() // the delete goes on: its commit is refused, and it puts the topic back
			if err := <-deleted; !errors.Is(err, disk.ErrFailed) {
				t.Errorf("DeleteTopic = %v, want ErrFailed", err)
			}
		})
	})
	var err error
	if release, err = r.s.Hold("a", ""); err != nil {
		t.Fatal(err)
	}
	// A publish to a stops in its log write...
	r.armed.Store(true)
	appended := make(chan error, 1)
	go func() {
		_, err := r.s.Append(ctx, "a", publishTime, []*schemas.Event{testEvent("a2")})
		appended <- err
	}()
	<-r.blocked
	// ...and a's delete waits for it and the held call.
	go func() { deleted <- r.s.DeleteTopic(ctx, "a") }()
	<-r.draining
	r.answer <- errInjected // the publish fails, and the store with it
	if err := <-appended; !errors.Is(err, disk.ErrFailed) {
		t.Fatalf("Append = %v, want ErrFailed", err)
	}
	r.recover(t)
	if got, want := catalogue(t, r.s, "after the store reopened itself"), []string{"a", "a/s1", "b", "b/x"}; !slices.Equal(got, want) {
		t.Fatalf("catalogue = %q, want %q", got, want)
	}
	entries, err := r.s.Read(ctx, "a", 1, 10)
	if err != nil || len(entries) != 2 {
		t.Fatalf("Read(a) = %d entries, %v; want 2 (a1 and the one published after recovery)", len(entries), err)
	}
}
