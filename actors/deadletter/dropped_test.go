package deadletter_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/logfold"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// syncBuffer is log output written by the actor and by logfold's timers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// droppedCalls collects what Config.OnDropped receives.
type droppedCalls struct {
	mu    sync.Mutex
	calls []deadletter.Dropped
}

func (d *droppedCalls) add(dr *deadletter.Dropped) {
	d.mu.Lock()
	d.calls = append(d.calls, *dr)
	d.mu.Unlock()
}

func (d *droppedCalls) all() []deadletter.Dropped {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]deadletter.Dropped(nil), d.calls...)
}

// Every dropped record's event id reaches the log, through the log's flood guard (logfold):
// several objects dropped at one instant, one of them past MaxDroppedIDsPerLine records, log
// every id, at most MaxDroppedIDsPerLine a line, none folded into a "moreLikeThis" count.
// OnDropped has each drop, per subscription, for the events' delivery histories.
func TestEveryDroppedEventIDIsLogged(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		store := testkit.NewFaultyObjectStore(testkit.NewObjectStore())
		store.Down()
		var out syncBuffer
		fold := logfold.New(slog.NewTextHandler(&out, nil), logfold.Options{Window: time.Minute, Unfolded: logattr.IsUnfolded})
		calls := &droppedCalls{}
		pid := h.Spawn(deadletter.Props(&deadletter.Config{
			Store: store, Logger: slog.New(fold), MaxRecordsPerObject: 120, OnDropped: calls.add,
		}))
		counts := map[string]int{"sub-a": 2, "sub-b": 130, "sub-c": 1}
		var ids []string
		for _, sub := range []string{"sub-a", "sub-b", "sub-c"} {
			for i := range counts[sub] {
				id := fmt.Sprintf("%s-e%03d", sub, i)
				ids = append(ids, id)
				h.System().Root.Send(pid, &deadletter.Enqueue{Letter: dlLetter(t, sub, id, time.Now()), Target: dlTarget(sub, false)})
			}
		}
		h.Advance(5*time.Minute + 30*time.Second + 4*time.Hour)
		if st := dlStatus(t, h, pid); st.RecordsDropped != len(ids) {
			t.Fatalf("status %+v, want %d dropped", st, len(ids))
		}
		fold.Flush()
		log := out.String()
		var lines []string
		for _, l := range strings.Split(log, "\n") {
			if strings.Contains(l, `msg="dead letters dropped"`) {
				lines = append(lines, l)
			}
		}
		for _, id := range ids {
			n := 0
			for _, l := range lines {
				if strings.Contains(l, id+" ") || strings.Contains(l, id+"]") {
					n++
				}
			}
			if n != 1 {
				t.Errorf("event id %s in %d drop lines, want 1", id, n)
			}
		}
		for _, l := range lines {
			if strings.Contains(l, "moreLikeThis") {
				t.Errorf("a drop line was folded: %s", l)
			}
			if strings.Count(l, "-e") > deadletter.MaxDroppedIDsPerLine {
				t.Errorf("a drop line lists more than %d ids: %s", deadletter.MaxDroppedIDsPerLine, l)
			}
		}
		got := map[string]int{}
		for _, c := range calls.all() {
			got[c.Subscription] += len(c.EventIDs)
			if len(c.Attempts) != len(c.EventIDs) || len(c.PublishTimes) != len(c.EventIDs) || c.Attempts[0] != 3 {
				t.Errorf("OnDropped %+v: want an attempt count (3) and a publish time per event", c)
			}
			if !strings.Contains(c.Why, "unavailable") || c.Refused != "" {
				t.Errorf("OnDropped why %q, refused %q: want unavailable, not refused", c.Why, c.Refused)
			}
		}
		for sub, n := range counts {
			if got[sub] != n {
				t.Errorf("OnDropped had %d records of %s, want %d", got[sub], sub, n)
			}
		}
	})
}

// refusingStore refuses every write as MinIO does a bucket whose access is disabled.
type refusingStore struct {
	sinks.ObjectStore
}

func (refusingStore) Put(context.Context, string, string, []byte, sinks.PutOptions) (sinks.ObjectInfo, error) {
	return sinks.ObjectInfo{}, &sinks.Refusal{Code: "AllAccessDisabled", Err: fmt.Errorf("All access to this resource has been disabled.")}
}

// refusals records the messages of error-level lines and their refused codes.
type refusals struct {
	mu   sync.Mutex
	msgs []string
}

func (r *refusals) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }
func (r *refusals) Handle(_ context.Context, rec slog.Record) error {
	s := rec.Message
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "refused" {
			s += " refused=" + a.Value.String()
		}
		return true
	})
	r.mu.Lock()
	r.msgs = append(r.msgs, s)
	r.mu.Unlock()
	return nil
}
func (r *refusals) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *refusals) WithGroup(string) slog.Handler      { return r }

// A write the destination refuses for what it is (an S3 AccessDenied-type code) is logged as
// refused, at error level with the code, retried for the four hours like any failed write, and
// the records dropped then say the destination refused them, with the code: not that it was
// unavailable.
func TestARefusedWriteIsReportedAsRefused(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		errs := &refusals{}
		why := &dropReasons{}
		calls := &droppedCalls{}
		logger := slog.New(teeHandler{errs, why})
		pid := h.Spawn(deadletter.Props(&deadletter.Config{Store: refusingStore{testkit.NewObjectStore()}, Logger: logger, OnDropped: calls.add}))
		h.System().Root.Send(pid, &deadletter.Enqueue{Letter: dlLetter(t, "sub-a", "a1", time.Now()), Target: dlTarget("sub-a", false)})
		h.Advance(6 * time.Minute)
		errs.mu.Lock()
		first := append([]string(nil), errs.msgs...)
		errs.mu.Unlock()
		if len(first) == 0 || first[0] != "the dead-letter destination refused the write; will retry refused=AllAccessDisabled" {
			t.Fatalf("error lines %q, want the refusal with its code", first)
		}
		if st := dlStatus(t, h, pid); st.Retrying != 1 {
			t.Fatalf("status %+v, want the record retrying", st)
		}
		h.Advance(4 * time.Hour)
		got := why.all()
		if len(got) != 1 || !strings.Contains(got[0], "refused the write (AllAccessDisabled") || strings.Contains(got[0], "unavailable") {
			t.Errorf("drop reasons %q, want the refusal with its code", got)
		}
		if c := calls.all(); len(c) != 1 || c[0].Refused != "AllAccessDisabled" {
			t.Errorf("OnDropped %+v, want the refusal's code", c)
		}
	})
}

// teeHandler hands each record to every handler that takes its level.
type teeHandler []slog.Handler

func (t teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	for _, h := range t {
		if h.Enabled(ctx, l) {
			return true
		}
	}
	return false
}
func (t teeHandler) Handle(ctx context.Context, r slog.Record) error {
	for _, h := range t {
		if h.Enabled(ctx, r.Level) {
			_ = h.Handle(ctx, r.Clone())
		}
	}
	return nil
}
func (t teeHandler) WithAttrs([]slog.Attr) slog.Handler { return t }
func (t teeHandler) WithGroup(string) slog.Handler      { return t }
