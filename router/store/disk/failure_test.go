package disk_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

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
// router answers 503). While the store is failed, Appends and definition writes are refused,
// reads go on (stored events are still delivered) and subscription state writes are kept in
// memory; once the disk has room again the store reopens itself from its log: every Append
// acknowledged before the failure is there, the state written while failed is on disk, and
// Appends are accepted again, numbered after the newest entry.
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
	opts := disk.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	var full atomic.Bool // the free-space probe reports a full disk
	disk.SetFreeBytes(&opts, func(string) (uint64, error) {
		if full.Load() {
			return 0, nil
		}
		return 1 << 30, nil
	})
	s, err := disk.OpenFS("db", opts, fs)
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

	full.Store(true)
	failing.Store(true)
	_, err = s.Append(ctx, "t", publishTime, []*schemas.Event{testEvent("during")})
	if !errors.Is(err, disk.ErrFailed) || !errors.Is(err, errInjected) {
		t.Fatalf("Append while the log fails: err = %v, want one matching disk.ErrFailed and the injected error", err)
	}
	t.Logf("Append while the log fails: %v", err)
	if l := logs.String(); !strings.Contains(l, "component=pebble fatal=true") || !strings.Contains(l, "injected disk failure") {
		t.Errorf("the logger got %q, want pebble's fatal message with the cause", l)
	}
	if h := s.Health(); h.State != store.Failed || !strings.Contains(h.Reason, "injected disk failure") {
		t.Errorf("Health while failed = %+v, want Failed naming the cause", h)
	}
	failing.Store(false) // the log could be written again, but the store waits for free space

	refused := []struct {
		name string
		call func() error
	}{
		{"Append", func() error { _, err := s.Append(ctx, "t", publishTime, acked); return err }},
		{"PutTopic", func() error { return s.PutTopic(ctx, "u", nil) }},
		{"DeleteSubscription", func() error { return s.DeleteSubscription(ctx, "t", "sub") }},
		{"PutDeadLetters", func() error { return s.PutDeadLetters(ctx, []store.DeadLetterRecord{{ID: "x"}}) }},
	}
	for _, c := range refused {
		if err := c.call(); !errors.Is(err, disk.ErrFailed) {
			t.Errorf("%s after a failed write: err = %v, want one matching disk.ErrFailed", c.name, err)
		}
	}
	got, err := s.Read(ctx, "t", 0, 10)
	if err != nil || len(got) != 1 || got[0].Event.ID != "before" {
		t.Errorf("Read while failed = %+v, %v; want the acknowledged event", got, err)
	}
	if last, err := s.LastSeq(ctx, "t"); err != nil || last != 1 {
		t.Errorf("LastSeq while failed = %d, %v; want 1", last, err)
	}
	parked := store.Parked{Seq: 1, Attempts: 1, Event: testEvent("before")}
	if err := s.UpdateSubscription(ctx, "t", "sub", store.Update{Cursor: 1, Put: []store.Parked{parked}, Probation: []byte("p")}); err != nil {
		t.Errorf("UpdateSubscription while failed: %v, want it kept in memory", err)
	}
	if st, err := s.LoadSubscription(ctx, "t", "sub"); err != nil || st.Cursor != 1 || len(st.Parked) != 1 || string(st.Probation) != "p" {
		t.Errorf("LoadSubscription while failed = %+v, %v; want the update kept in memory", st, err)
	}
	if st, err := s.LoadSubscriptionIndex(ctx, "t", "sub"); err != nil || len(st.Parked) != 1 || st.Parked[0].Attempts != 1 || st.Parked[0].Event != nil {
		t.Errorf("LoadSubscriptionIndex while failed = %+v, %v; want the parked event kept in memory, without its event", st, err)
	}
	if p, err := s.ParkedEvents(ctx, "t", "sub", []uint64{1, 2}); err != nil || len(p) != 1 || p[0].Event == nil || p[0].Event.ID != "before" {
		t.Errorf("ParkedEvents while failed = %+v, %v; want the parked event kept in memory, with its event", p, err)
	}
	if c, err := s.Cursors(ctx, "t"); err != nil || c["sub"] != 1 {
		t.Errorf("Cursors while failed = %v, %v; want sub at 1", c, err)
	}
	// A dead letter handed over while failed is kept with its update, and the outbox shows it,
	// so a dead-letter actor that reloads meanwhile still writes it.
	held := store.DeadLetterRecord{ID: "dl-held", Payload: []byte("held")}
	if err := s.UpdateSubscription(ctx, "t", "sub", store.Update{DeadLetters: []store.DeadLetterRecord{held}}); err != nil {
		t.Errorf("UpdateSubscription with a dead letter while failed: %v, want it kept in memory", err)
	}
	if dl, err := s.DeadLetters(ctx); err != nil || len(dl) != 1 || dl[0].ID != held.ID || string(dl[0].Payload) != "held" {
		t.Errorf("DeadLetters while failed = %+v, %v; want the dead letter handed over while failed", dl, err)
	}
	var scanned []store.DeadLetterRecord
	if err := s.ScanDeadLetters(ctx, func(r store.DeadLetterRecord) error { scanned = append(scanned, r); return nil }); err != nil ||
		len(scanned) != 1 || scanned[0].ID != held.ID || string(scanned[0].Payload) != "held" {
		t.Errorf("ScanDeadLetters while failed gave %+v, %v; want the dead letter handed over while failed", scanned, err)
	}
	if dl, err := s.DeadLettersByID(ctx, []string{held.ID, "other"}); err != nil || len(dl) != 1 || string(dl[0].Payload) != "held" {
		t.Errorf("DeadLettersByID while failed = %+v, %v; want the dead letter handed over while failed", dl, err)
	}

	full.Store(false) // space is back: the store reopens itself
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.WaitFailed(wctx, false); err != nil {
		t.Fatalf("the store did not reopen itself: %v\n%s", err, logs.String())
	}
	if h := s.Health(); h.State != store.Healthy || h.Recoveries != 1 {
		t.Errorf("Health after recovering = %+v, want Healthy after 1 recovery", h)
	}
	last, err := s.Append(ctx, "t", publishTime, []*schemas.Event{testEvent("after")})
	if err != nil || last < 2 {
		t.Fatalf("Append after recovering = %d, %v; want a number after 1", last, err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	r, err := disk.OpenFS("db", disk.Options{}, mem)
	if err != nil {
		t.Fatalf("reopening: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	got, err = r.Read(ctx, "t", 0, 10)
	if err != nil {
		t.Fatalf("Read after reopening: %v", err)
	}
	if len(got) == 0 || got[0].Seq != 1 || got[0].Event.ID != "before" || got[len(got)-1].Seq != last || got[len(got)-1].Event.ID != "after" {
		t.Errorf("journal after reopening = %+v, want the acknowledged events as 1 and %d", got, last)
	}
	st, err := r.LoadSubscription(ctx, "t", "sub")
	if err != nil || st.Cursor != 1 || len(st.Parked) != 1 || st.Parked[0].Attempts != 1 || string(st.Probation) != "p" {
		t.Errorf("state after reopening = %+v, %v; want the update written while failed", st, err)
	}
	if dl, err := r.DeadLetters(ctx); err != nil || len(dl) != 1 || dl[0].ID != held.ID {
		t.Errorf("DeadLetters after reopening = %+v, %v; want the dead letter handed over while failed", dl, err)
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

// What the operator is told to do about a failed write follows its cause: free space for a
// full disk, and for a store whose files cannot be written at all (a permission, a file
// system mounted read-only), making them writable, which no free space cures.
func TestWriteFailureSaysWhatToFix(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		want, not string
	}{
		{name: "full disk", err: &os.PathError{Op: "write", Path: "000002.log", Err: syscall.ENOSPC}, want: "free disk space", not: "writable"},
		{name: "permission", err: &os.PathError{Op: "write", Path: "000002.log", Err: syscall.EACCES}, want: "writable by egrid's user", not: "free disk space"},
		{name: "read-only file system", err: &os.PathError{Op: "write", Path: "000002.log", Err: syscall.EROFS}, want: "writable by egrid's user", not: "free disk space"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			var failing atomic.Bool
			fs := logFS{vfs.NewMem(), func(string) error {
				if failing.Load() {
					return tc.err
				}
				return nil
			}}
			var logs syncBuffer
			opts := disk.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
			disk.SetFreeBytes(&opts, func(string) (uint64, error) { return 0, nil }) // no reopening
			s, err := disk.OpenFS("db", opts, fs)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			if err := s.PutTopic(ctx, "t", nil); err != nil {
				t.Fatal(err)
			}
			failing.Store(true)
			if _, err := s.Append(ctx, "t", publishTime, []*schemas.Event{testEvent("a")}); !errors.Is(err, disk.ErrFailed) {
				t.Fatalf("Append while the log fails = %v; want disk.ErrFailed", err)
			}
			h := s.Health()
			if h.State != store.Failed || !strings.Contains(h.Reason, tc.want) || strings.Contains(h.Reason, tc.not) {
				t.Errorf("Health = %+v; want Failed, a reason saying %q and not %q", h, tc.want, tc.not)
			}
			if l := logs.String(); !strings.Contains(l, tc.want) {
				t.Errorf("the ERROR does not say %q:\n%s", tc.want, l)
			}
		})
	}
}

// A store failed by a write on a full disk (ENOSPC, or EDQUOT: the quota of egrid's user used
// up) refuses Appends, definition and dead-letter writes with an error matching
// store.ErrDiskFull, so store.ErrInsufficientStorage (the router answers 507) as well as
// store.ErrUnavailable, and its health says the disk is full; a store failed by another error
// (EIO) refuses them with store.ErrUnavailable only (503).
func TestFullDiskFailureRefusesAsInsufficientStorage(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		full bool
	}{
		{name: "no space left", err: &os.PathError{Op: "write", Path: "000002.log", Err: syscall.ENOSPC}, full: true},
		{name: "quota used up", err: fmt.Errorf("syncing: %w", &os.PathError{Op: "sync", Path: "000002.log", Err: syscall.EDQUOT}), full: true},
		{name: "I/O error", err: &os.PathError{Op: "write", Path: "000002.log", Err: syscall.EIO}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			var failing atomic.Bool
			fs := logFS{vfs.NewMem(), func(string) error {
				if failing.Load() {
					return tc.err
				}
				return nil
			}}
			opts := disk.Options{}
			disk.SetFreeBytes(&opts, func(string) (uint64, error) { return 0, nil }) // no reopening
			s, err := disk.OpenFS("db", opts, fs)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			if err := s.PutTopic(ctx, "t", nil); err != nil {
				t.Fatal(err)
			}
			if err := s.PutSubscription(ctx, "t", "sub", nil); err != nil {
				t.Fatal(err)
			}
			failing.Store(true)
			_, failed := s.Append(ctx, "t", publishTime, []*schemas.Event{testEvent("a")})
			failing.Store(false) // the store stays failed all the same: it waits for free space

			type refusal struct {
				name string
				err  error
			}
			refusals := []refusal{{"the Append whose write failed", failed}}
			for _, c := range []struct {
				name string
				call func() error
			}{
				{"Append", func() error { _, err := s.Append(ctx, "t", publishTime, []*schemas.Event{testEvent("b")}); return err }},
				{"PutTopic", func() error { return s.PutTopic(ctx, "u", nil) }},
				{"PutSubscription", func() error { return s.PutSubscription(ctx, "t", "other", nil) }},
				{"DeleteSubscription", func() error { return s.DeleteSubscription(ctx, "t", "sub") }},
				{"PutDeadLetters", func() error { return s.PutDeadLetters(ctx, []store.DeadLetterRecord{{ID: "x"}}) }},
			} {
				refusals = append(refusals, refusal{c.name + " while failed", c.call()})
			}
			for _, r := range refusals {
				if !errors.Is(r.err, disk.ErrFailed) || !errors.Is(r.err, store.ErrUnavailable) || !errors.Is(r.err, tc.err) {
					t.Errorf("%s: err = %v; want one matching disk.ErrFailed, store.ErrUnavailable and the cause", r.name, r.err)
				}
				if got := errors.Is(r.err, store.ErrInsufficientStorage); got != tc.full || errors.Is(r.err, store.ErrDiskFull) != tc.full {
					t.Errorf("%s: err = %v; matches store.ErrInsufficientStorage and store.ErrDiskFull: %v, want %v", r.name, r.err, got, tc.full)
				}
			}
			h := s.Health()
			if h.State != store.Failed || strings.Contains(h.Reason, "the disk holding the store is full") != tc.full {
				t.Errorf("Health = %+v; want Failed, saying that the disk is full: %v", h, tc.full)
			}
		})
	}
}
