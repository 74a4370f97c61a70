package disk_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
)

var errInjected = errors.New("injected disk failure")

// syncBuffer is a bytes.Buffer safe for the logger's concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A failed write to the write-ahead log makes Append return an error wrapping the cause (the
// router answers 503); the store then refuses every call, Close returns, and reopening the
// directory finds every Append acknowledged before the failure.
func TestWriteFailure(t *testing.T) {
	ctx := t.Context()
	mem := vfs.NewMem()
	var failing atomic.Bool
	fs := logFS{mem, func(string) error {
		if failing.Load() {
			return errInjected
		}
		return nil
	}}
	var logs syncBuffer
	s, err := disk.OpenFS("db", disk.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, fs)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.PutTopic(ctx, "t", nil); err != nil {
		t.Fatalf("PutTopic: %v", err)
	}
	if err := s.PutSubscription(ctx, "t", "sub", nil); err != nil {
		t.Fatalf("PutSubscription: %v", err)
	}
	acked := []*schemas.Event{testEvent("before")}
	if _, err := s.Append(ctx, "t", publishTime, acked); err != nil {
		t.Fatalf("Append: %v", err)
	}

	failing.Store(true)
	_, err = s.Append(ctx, "t", publishTime, []*schemas.Event{testEvent("during")})
	if !errors.Is(err, disk.ErrFailed) || !errors.Is(err, errInjected) {
		t.Fatalf("Append while the log fails: err = %v, want one matching disk.ErrFailed and the injected error", err)
	}
	t.Logf("Append while the log fails: %v", err)
	if l := logs.String(); !strings.Contains(l, "component=pebble fatal=true") || !strings.Contains(l, "injected disk failure") {
		t.Errorf("the logger got %q, want pebble's fatal message with the cause", l)
	}
	failing.Store(false)

	calls := []struct {
		name string
		call func() error
	}{
		{"Append", func() error { _, err := s.Append(ctx, "t", publishTime, acked); return err }},
		{"Read", func() error { _, err := s.Read(ctx, "t", 0, 10); return err }},
		{"LastSeq", func() error { _, err := s.LastSeq(ctx, "t"); return err }},
		{"Trim", func() error { return s.Trim(ctx, "t", 1) }},
		{"LoadSubscription", func() error { _, err := s.LoadSubscription(ctx, "t", "sub"); return err }},
		{"UpdateSubscription", func() error { return s.UpdateSubscription(ctx, "t", "sub", store.Update{Cursor: 1}) }},
		{"PutTopic", func() error { return s.PutTopic(ctx, "u", nil) }},
		{"Topics", func() error { _, err := s.Topics(ctx); return err }},
		{"DeleteSubscription", func() error { return s.DeleteSubscription(ctx, "t", "sub") }},
	}
	for _, c := range calls {
		if err := c.call(); !errors.Is(err, disk.ErrFailed) {
			t.Errorf("%s after a failed write: err = %v, want one matching disk.ErrFailed", c.name, err)
		}
	}
	_ = s.Close() // may report the failure again; it must return

	r, err := disk.OpenFS("db", disk.Options{}, mem)
	if err != nil {
		t.Fatalf("reopening after the failure: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	got, err := r.Read(ctx, "t", 0, 10)
	if err != nil {
		t.Fatalf("Read after reopening: %v", err)
	}
	if len(got) == 0 || got[0].Seq != 1 || got[0].Event.ID != "before" {
		t.Errorf("journal after reopening = %+v, want the acknowledged event as 1", got)
	}
}

// When the log starts failing under concurrent Appends, every Append returns (none hangs),
// each either acknowledged or failing with ErrFailed, and after reopening every acknowledged
// event is in the journal under the number its Append returned.
func TestWriteFailureConcurrent(t *testing.T) {
	ctx := t.Context()
	mem := vfs.NewMem()
	var logWrites atomic.Int64
	const failAfter = 40 // log writes and syncs before the disk "fails"
	var armed atomic.Bool
	fs := logFS{mem, func(string) error {
		if armed.Load() && logWrites.Add(1) > failAfter {
			return errInjected
		}
		return nil
	}}
	s, err := disk.OpenFS("db", disk.Options{}, fs)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	for _, name := range []string{"a", "b"} {
		if err := s.PutTopic(ctx, name, nil); err != nil {
			t.Fatalf("PutTopic: %v", err)
		}
	}
	armed.Store(true)

	type ack struct {
		topic string
		last  uint64
		id    string
	}
	var (
		mu     sync.Mutex
		acks   []ack
		failed int
		wg     sync.WaitGroup
	)
	for w := range 16 {
		topic := []string{"a", "b"}[w%2]
		wg.Go(func() {
			for i := range 20 {
				id := fmt.Sprintf("w%d-%d", w, i)
				last, err := s.Append(ctx, topic, publishTime, []*schemas.Event{testEvent(id)})
				mu.Lock()
				if err == nil {
					acks = append(acks, ack{topic, last, id})
				} else if errors.Is(err, disk.ErrFailed) {
					failed++
				} else {
					t.Errorf("Append: err = %v, want nil or one matching disk.ErrFailed", err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if failed == 0 || len(acks) == 0 {
		t.Fatalf("%d Appends acknowledged, %d failed; the test needs both", len(acks), failed)
	}
	_ = s.Close()

	r, err := disk.OpenFS("db", disk.Options{}, mem)
	if err != nil {
		t.Fatalf("reopening after the failure: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	for _, a := range acks {
		got, err := r.Read(ctx, a.topic, a.last, 1)
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		if len(got) != 1 || got[0].Seq != a.last || got[0].Event.ID != a.id {
			t.Errorf("acknowledged %s as %s/%d; after reopening Read(%d) gives %+v", a.id, a.topic, a.last, a.last, got)
		}
	}
	t.Logf("%d Appends acknowledged, %d failed", len(acks), failed)
}
