package deadletter_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// dropReasons records the why of each dead letter dropped.
type dropReasons struct {
	mu   sync.Mutex
	whys []string
}

func (d *dropReasons) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (d *dropReasons) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "dead letters dropped" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "why" {
			d.mu.Lock()
			d.whys = append(d.whys, a.Value.String())
			d.mu.Unlock()
		}
		return true
	})
	return nil
}
func (d *dropReasons) WithAttrs([]slog.Attr) slog.Handler { return d }
func (d *dropReasons) WithGroup(string) slog.Handler      { return d }
func (d *dropReasons) all() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.whys...)
}

// outboxAfterAGap is an outbox holding one record of sub-a whose first write attempt, which
// failed, was sinceFirst ago: the router was down since. It returns the record's object key.
func outboxAfterAGap(t *testing.T, sinceFirst time.Duration) (*deadletter.MemoryOutbox, string) {
	t.Helper()
	outbox := deadletter.NewMemoryOutbox()
	first := time.Now().Add(-sinceFirst)
	tg := dlTarget("sub-a", false)
	key := deadletter.Key(tg.Prefix, first, "x")
	err := outbox.Put(context.Background(), []deadletter.Record{{
		ID: outbox.NewID(), Letter: dlLetter(t, "sub-a", "a1", first.Add(-deadletter.DefaultDelay)), Target: tg,
		Due: first, FirstWriteAttempt: first, WriteAttempts: 1, ObjectKey: key,
	}})
	if err != nil {
		t.Fatal(err)
	}
	return outbox, key
}

// A record whose first write attempt failed longer ago than the give-up limit, the router
// having been down since, is written when the router starts and the destination is up: it is
// tried again before anything is given up, not dropped unwritten.
func TestARecordPastTheLimitAfterARestartIsTriedAndWritten(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		objs := testkit.NewObjectStore()
		outbox, key := outboxAfterAGap(t, 5*time.Hour)
		why := &dropReasons{}
		pid := h.Spawn(deadletter.Props(&deadletter.Config{Store: objs, Outbox: outbox, Logger: slog.New(why)}))
		h.Advance(time.Minute)
		if st := dlStatus(t, h, pid); st.RecordsWritten != 1 || st.RecordsDropped != 0 || st.Pending() != 0 {
			t.Errorf("status %+v, want the record written, none dropped", st)
		}
		if objs.Puts() != 1 {
			t.Errorf("%d puts, want the record's object written once", objs.Puts())
		}
		recs := objs.Records(t, "deadletters", key, schemas.EventGrid, dlTopicID)
		if len(recs) != 1 || recs[0].Event.ID != "a1" {
			t.Errorf("the object under %s holds %+v, want a1", key, recs)
		}
		if got := why.all(); len(got) != 0 {
			t.Errorf("drops %q, want none", got)
		}
		if left, _ := outbox.Load(context.Background()); len(left) != 0 {
			t.Errorf("outbox holds %d records, want none", len(left))
		}
	})
}

// The object a write before the restart did put is found under its key when the record is
// tried again past the limit: counted written, neither dropped nor written twice.
func TestARecordPastTheLimitWhoseObjectLandedIsCountedWritten(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		objs := testkit.NewObjectStore()
		outbox, key := outboxAfterAGap(t, 5*time.Hour)
		if _, err := objs.Put(context.Background(), "deadletters", key, []byte("[]"), sinks.PutOptions{ContentType: schemas.ContentTypeDeadLetters}); err != nil {
			t.Fatal(err)
		}
		pid := h.Spawn(deadletter.Props(&deadletter.Config{Store: objs, Outbox: outbox}))
		h.Advance(time.Minute)
		if st := dlStatus(t, h, pid); st.RecordsWritten != 1 || st.ObjectsWritten != 1 || st.RecordsDropped != 0 || st.Pending() != 0 {
			t.Errorf("status %+v, want the record counted written, none dropped", st)
		}
		if objs.Puts() != 1 {
			t.Errorf("%d puts, want only the object that landed before the restart", objs.Puts())
		}
	})
}

// A record past the limit whose destination still fails after the restart is dropped once the
// try made after the restart fails, and the reason says what was seen: the failure since the
// restart, and how long ago the first attempt was — not that the destination was down all
// that time.
func TestARecordPastTheLimitStillFailingAfterARestartIsDroppedTruthfully(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		store := testkit.NewFaultyObjectStore(testkit.NewObjectStore())
		store.Down()
		outbox, _ := outboxAfterAGap(t, 5*time.Hour)
		why := &dropReasons{}
		pid := h.Spawn(deadletter.Props(&deadletter.Config{Store: store, Outbox: outbox, Logger: slog.New(why)}))
		h.Advance(time.Minute)
		if store.Failures() != 1 {
			t.Errorf("%d calls failed, want the one try after the restart (its lookup)", store.Failures())
		}
		if st := dlStatus(t, h, pid); st.RecordsDropped != 1 || st.Pending() != 0 {
			t.Errorf("status %+v, want the record dropped", st)
		}
		want := "the dead-letter destination still failed the write after the records were read back from the outbox " +
			"(a restart or a hand-over): 1 attempt failed in the 0s since; the first write attempt, before that, was " +
			"5h0m0s ago (2 attempts in all), past the limit of 4h0m0s"
		if got := why.all(); len(got) != 1 || got[0] != want {
			t.Errorf("drop reasons %q, want %q", got, want)
		}
	})
}

// The limit counts from the first attempt ever made, across restarts: a record taken up again
// before the limit, with the destination still down, is retried as usual and dropped at the
// limit, so a router restarting again and again does not keep it for ever.
func TestTheLimitCountsFromTheFirstAttemptAcrossRestarts(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		store := testkit.NewFaultyObjectStore(testkit.NewObjectStore())
		store.Down()
		outbox, _ := outboxAfterAGap(t, 3*time.Hour)
		why := &dropReasons{}
		pid := h.Spawn(deadletter.Props(&deadletter.Config{Store: store, Outbox: outbox, Logger: slog.New(why)}))
		h.Advance(time.Hour - time.Second)
		if st := dlStatus(t, h, pid); st.RecordsDropped != 0 || st.Retrying != 1 {
			t.Errorf("status %+v before the limit, want the record retrying", st)
		}
		h.Advance(time.Second)
		if st := dlStatus(t, h, pid); st.RecordsDropped != 1 || st.Pending() != 0 {
			t.Errorf("status %+v at the limit, want the record dropped", st)
		}
		want := "the dead-letter destination still failed the write after the records were read back from the outbox " +
			"(a restart or a hand-over): 14 attempts failed in the 1h0m0s since; the first write attempt, before that, was " +
			"4h0m0s ago (15 attempts in all), past the limit of 4h0m0s"
		if got := why.all(); len(got) != 1 || got[0] != want {
			t.Errorf("drop reasons %q, want %q", got, want)
		}
	})
}
