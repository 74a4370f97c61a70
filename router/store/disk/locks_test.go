package disk_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
)

// No lock is held across I/O: while a synced catalogue change (PutTopic) and an Append are
// stuck in a log sync that does not return, reads and other topics' subscription state
// writes go on.
func TestBlockedSyncBlocksNoOtherCall(t *testing.T) {
	ctx := t.Context()
	var (
		armed   atomic.Bool
		entered = make(chan struct{})
		release = make(chan struct{})
		once    sync.Once
	)
	fs := logFS{vfs.NewMem(), func(op string) error {
		if op == "sync" && armed.Load() {
			once.Do(func() { close(entered) })
			<-release
		}
		return nil
	}}
	s, err := disk.OpenFS("db", disk.Options{}, fs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.PutTopic(ctx, "b", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSubscription(ctx, "b", "sub", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "b", publishTime, []*schemas.Event{testEvent("b1")}); err != nil {
		t.Fatal(err)
	}

	armed.Store(true)
	var stuck sync.WaitGroup
	stuck.Go(func() {
		if err := s.PutTopic(ctx, "c", nil); err != nil {
			t.Errorf("PutTopic: %v", err)
		}
	})
	stuck.Go(func() {
		if _, err := s.Append(ctx, "b", publishTime, []*schemas.Event{testEvent("b2")}); err != nil {
			t.Errorf("Append: %v", err)
		}
	})
	defer stuck.Wait()
	defer close(release)
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("no sync started")
	}

	calls := []struct {
		name string
		call func() error
	}{
		{"Read", func() error { _, err := s.Read(ctx, "b", 1, 10); return err }},
		{"LastSeq", func() error { _, err := s.LastSeq(ctx, "b"); return err }},
		{"Cursors", func() error { _, err := s.Cursors(ctx, "b"); return err }},
		{"Topics", func() error { _, err := s.Topics(ctx); return err }},
		{"Subscriptions", func() error { _, err := s.Subscriptions(ctx, "b"); return err }},
		{"UpdateSubscription", func() error { return s.UpdateSubscription(ctx, "b", "sub", store.Update{Cursor: 1}) }},
		{"LoadSubscription", func() error { _, err := s.LoadSubscription(ctx, "b", "sub"); return err }},
		{"Trim", func() error { return s.Trim(ctx, "b", 1) }},
		{"DeadLetters", func() error { _, err := s.DeadLetters(ctx); return err }},
		{"ScanDeadLetters", func() error {
			return s.ScanDeadLetters(ctx, func(store.DeadLetterRecord) error { return nil })
		}},
		{"DeadLettersByID", func() error { _, err := s.DeadLettersByID(ctx, []string{"1"}); return err }},
	}
	for _, c := range calls {
		done := make(chan error, 1)
		go func() { done <- c.call() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s while a sync is stuck: %v", c.name, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s waited for a sync it does not need (a lock held across I/O)", c.name)
		}
	}
	if st, err := s.LoadSubscription(ctx, "b", "sub"); err != nil || st.Cursor != 1 {
		t.Errorf("LoadSubscription = %+v, %v; want the cursor written while the sync was stuck", st, err)
	}
}
