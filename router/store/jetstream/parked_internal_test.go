package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// heldRead makes the first readParked of s wait, once it has the parked events to read, until
// the returned release is called; entered is closed when it waits.
func heldRead(s *Store) (entered <-chan struct{}, release func()) {
	in, out := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	s.readParkedHook = func() {
		if first.CompareAndSwap(false, true) {
			close(in)
			<-out
		}
	}
	return in, func() { close(out) }
}

// parkedSub creates subscription "sub" of "orders" with events 1, 2 and 3 parked.
func parkedSub(t *testing.T, s *Store) {
	t.Helper()
	ctx := t.Context()
	if err := s.PutSubscription(ctx, "orders", "sub", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	var ps []store.Parked
	for _, seq := range []uint64{1, 2, 3} {
		ps = append(ps, store.Parked{Seq: seq, Attempts: 1, Event: &schemas.Event{ID: fmt.Sprintf("e%d", seq)}})
	}
	if err := s.UpdateSubscription(ctx, "orders", "sub", store.Update{Cursor: 3, Put: ps}); err != nil {
		t.Fatal(err)
	}
}

// damageLog has s log to the returned builder and count its damage by kind in the returned map.
func damageLog(s *Store) (*strings.Builder, map[string]int) {
	var logs strings.Builder
	counts := map[string]int{}
	s.opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	s.opts.OnCorruption = func(kind string) { counts[kind]++ }
	return &logs, counts
}

// bounded gives an update a deadline, so that one kept waiting for the subscription (as it
// was while a read of parked bodies held it) fails instead of hanging the test.
func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func parkedIDs(ps []store.Parked) []string {
	var out []string
	for _, p := range ps {
		if p.Event == nil {
			out = append(out, "<nil>")
			continue
		}
		out = append(out, p.Event.ID)
	}
	return out
}

// An update of a subscription goes on while parked events' bodies of it are being read: the
// reads no longer hold the subscription, so the subscription actor's state writes are not
// held up (and do not time out) behind its fetch of due retries. The event the update
// settled meanwhile is left out of what the read returns: it is not parked any more.
func TestUpdateGoesOnWhileParkedBodiesAreRead(t *testing.T) {
	s, _ := holesStore(t, 3)
	parkedSub(t, s)
	entered, release := heldRead(s)
	type result struct {
		ps  []store.Parked
		err error
	}
	done := make(chan result, 1)
	go func() {
		ps, err := s.ParkedEvents(t.Context(), "orders", "sub", []uint64{1, 2, 3})
		done <- result{ps, err}
	}()
	<-entered
	err := s.UpdateSubscription(bounded(t), "orders", "sub", store.Update{Delete: []uint64{1}})
	release()
	r := <-done
	if err != nil {
		t.Fatalf("update while a read of parked bodies was under way: %v, want it done", err)
	}
	if r.err != nil {
		t.Fatalf("ParkedEvents: %v", r.err)
	}
	if got := parkedIDs(r.ps); len(got) != 2 || got[0] != "e2" || got[1] != "e3" {
		t.Errorf("ParkedEvents after event 1 was settled during it = %v, want [e2 e3]", got)
	}
}

// A parked event settled (its body purged) while LoadSubscription reads the bodies is left out
// of the state loaded, as settled; a body missing while the record still names the event is
// damage and an error; a subscription deleted during the read is not found.
func TestParkedBodyGoneDuringARead(t *testing.T) {
	t.Run("settled", func(t *testing.T) {
		s, _ := holesStore(t, 3)
		parkedSub(t, s)
		entered, release := heldRead(s)
		done := make(chan error, 1)
		var st store.SubscriptionState
		go func() {
			var err error
			st, err = s.LoadSubscription(t.Context(), "orders", "sub")
			done <- err
		}()
		<-entered
		err := s.UpdateSubscription(bounded(t), "orders", "sub", store.Update{Delete: []uint64{2}})
		release()
		if lerr := <-done; lerr != nil {
			t.Fatalf("LoadSubscription: %v", lerr)
		}
		if err != nil {
			t.Fatalf("update settling event 2 during the load: %v", err)
		}
		if got := parkedIDs(st.Parked); len(got) != 2 || got[0] != "e1" || got[1] != "e3" {
			t.Errorf("loaded parked events = %v, want [e1 e3]: event 2 was settled", got)
		}
	})
	t.Run("lost", func(t *testing.T) { // more in TestDamagedParkedCopiesAreLostAlone
		s, _ := holesStore(t, 3)
		parkedSub(t, s)
		if err := s.parked.Purge(t.Context(), jetstream.WithPurgeSubject(s.parkedSubject("orders", "sub", 2))); err != nil {
			t.Fatal(err)
		}
		ps, err := s.ParkedEvents(t.Context(), "orders", "sub", []uint64{1, 2})
		if got := parkedIDs(ps); err != nil || len(got) != 1 || got[0] != "e1" {
			t.Errorf("ParkedEvents of an event whose body is lost = %v, %v; want [e1], the lost one left out", got, err)
		}
		if n := s.Health().Corruptions; n != 1 {
			t.Errorf("Health().Corruptions = %d, want 1", n)
		}
	})
	t.Run("deleted", func(t *testing.T) {
		s, _ := holesStore(t, 3)
		parkedSub(t, s)
		entered, release := heldRead(s)
		done := make(chan error, 1)
		go func() {
			_, err := s.ParkedEvents(t.Context(), "orders", "sub", []uint64{1, 2, 3})
			done <- err
		}()
		<-entered
		err := s.DeleteSubscription(bounded(t), "orders", "sub")
		release()
		if rerr := <-done; !errors.Is(rerr, store.ErrNotFound) {
			t.Errorf("ParkedEvents of a subscription deleted during it = %v, want ErrNotFound", rerr)
		}
		if err != nil {
			t.Fatalf("DeleteSubscription during a read of parked bodies: %v", err)
		}
	})
}

// An update that parks a Seq again while another update's purge of its earlier copy is under
// way (the purge runs after the record's write, without the subscription) waits for that
// purge before it writes the new copy: on the old code the purge landed after the new copy
// and deleted it, and the record named an event whose copy was gone. The router never parks a
// settled Seq again (its cursor is past it), but the store's calls are safe for concurrent
// use, and this one lost an accepted event's copy.
func TestParkAgainWaitsForThePurgeOfTheEarlierCopy(t *testing.T) {
	s, _ := holesStore(t, 3)
	parkedSub(t, s)
	ctx := bounded(t)
	purging, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	s.dropBodiesHook = func() {
		if first.CompareAndSwap(false, true) {
			close(purging)
			<-release // the purge of event 2's copy, held
		}
	}
	waiting := make(chan struct{}, 1)
	s.purgeWaitHook = func() { waiting <- struct{}{} }

	unparked := make(chan error, 1)
	go func() { unparked <- s.UpdateSubscription(ctx, "orders", "sub", store.Update{Delete: []uint64{2}}) }()
	<-purging
	parked := make(chan error, 1)
	again := store.Parked{Seq: 2, Attempts: 1, Event: &schemas.Event{ID: "e2-again"}}
	go func() { parked <- s.UpdateSubscription(ctx, "orders", "sub", store.Update{Put: []store.Parked{again}}) }()
	select {
	case <-waiting: // waits for the purge
	case err := <-parked: // wrote its copy under the purge (the old code)
		if err != nil {
			t.Fatal(err)
		}
		parked <- nil
	}
	close(release)
	if err := <-unparked; err != nil {
		t.Fatal(err)
	}
	if err := <-parked; err != nil {
		t.Fatal(err)
	}
	ps, err := s.ParkedEvents(ctx, "orders", "sub", []uint64{2})
	if err != nil || len(ps) != 1 || ps[0].Event == nil || ps[0].Event.ID != "e2-again" {
		t.Errorf("ParkedEvents(2) = %v, %v; want event e2-again, parked again", parkedIDs(ps), err)
	}
}

// An update whose record write is fenced (another node took the subscription over and wrote
// it) leaves none of the copies it stored of its newly parked events: on the old code each
// fenced update left its copies in the parked stream for good, named by no record. A copy of
// the same event that the node now owning the subscription stored (both parked it while the
// subscription changed hands) stays, since the owner's record names it.
func TestFencedUpdateLeavesNoParkedCopies(t *testing.T) {
	s, _ := holesStore(t, 5)
	parkedSub(t, s)
	ctx := bounded(t)
	owner, err := Open(ctx, s.nc, Options{Prefix: "HOLES"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := owner.LoadSubscription(ctx, "orders", "sub"); err != nil {
		t.Fatal(err)
	}
	mine := store.Parked{Seq: 5, Attempts: 1, Event: &schemas.Event{ID: "e5"}}
	if err := owner.UpdateSubscription(ctx, "orders", "sub", store.Update{Cursor: 5, Put: []store.Parked{mine}}); err != nil {
		t.Fatal(err)
	}

	late := []store.Parked{
		{Seq: 4, Attempts: 1, Event: &schemas.Event{ID: "e4"}},
		{Seq: 5, Attempts: 1, Event: &schemas.Event{ID: "e5"}},
	}
	err = s.UpdateSubscription(ctx, "orders", "sub", store.Update{Cursor: 5, Put: late})
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("update of the node that lost the subscription: %v, want ErrFenced", err)
	}
	for _, seq := range []uint64{4, 5} {
		subj := s.parkedSubject("orders", "sub", seq)
		info, err := s.parked.Info(ctx, jetstream.WithSubjectFilter(subj))
		if err != nil {
			t.Fatal(err)
		}
		want := uint64(0) // event 4: no record names it
		if seq == 5 {
			want = 1 // the owner's copy
		}
		if got := info.State.Subjects[subj]; got != want {
			t.Errorf("copies of parked event %d after the fenced update = %d, want %d", seq, got, want)
		}
	}
	ps, err := owner.ParkedEvents(ctx, "orders", "sub", []uint64{5})
	if err != nil || len(ps) != 1 || ps[0].Event == nil || ps[0].Event.ID != "e5" {
		t.Errorf("owner's ParkedEvents(5) after the fenced update = %v, %v; want e5", parkedIDs(ps), err)
	}
}

// A parked-events stream an earlier release created (one message per subject) is changed by
// Open to keep every copy, which the delete of a fenced update's copies relies on.
func TestOpenLetsParkedStreamKeepEveryCopy(t *testing.T) {
	s, _ := holesStore(t, 1)
	ctx := bounded(t)
	info, err := s.parked.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.Config
	cfg.MaxMsgsPerSubject = 1
	if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	again, err := Open(ctx, s.nc, Options{Prefix: "HOLES"})
	if err != nil {
		t.Fatal(err)
	}
	info, err = again.parked.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Config.MaxMsgsPerSubject; got != -1 {
		t.Errorf("parked stream's MaxMsgsPerSubject after Open = %d, want -1 (every copy)", got)
	}
}

// A parked event whose copy does not decode (a message someone else published to its
// subject, or damage), or whose copy is gone although the record names it, is lost alone: the
// subscription loads, and ParkedEvents returns, its other parked events; the loss is logged
// once as an ERROR naming the topic, the subscription, the event and what to do, and counted
// (kind entry, Health). The subscription then forgets the event (as the subscription actor
// does), which leaves nothing to report again. Before, the load failed, and with it the
// subscription at every start. A copy of a format this release does not know still fails the
// read: it may be a newer release's.
func TestDamagedParkedCopiesAreLostAlone(t *testing.T) {
	ctx := t.Context()
	s, _ := holesStore(t, 4)
	logs, counts := damageLog(s)
	if err := s.PutSubscription(ctx, "orders", "sub", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	var ps []store.Parked
	for seq := uint64(1); seq <= 4; seq++ {
		ps = append(ps, store.Parked{Seq: seq, Attempts: 1, Event: &schemas.Event{ID: fmt.Sprintf("e%d", seq)}})
	}
	if err := s.UpdateSubscription(ctx, "orders", "sub", store.Update{Cursor: 4, Put: ps}); err != nil {
		t.Fatal(err)
	}
	// Event 2's copy without an event after its good one (the last copy is read), event 3's
	// cut short (an event whose first string length runs past the end) in place of its good
	// one, event 4's gone.
	if _, err := s.js.Publish(ctx, s.parkedSubject("orders", "sub", 2), appendBody(nil, nil)); err != nil {
		t.Fatal(err)
	}
	if err := s.parked.Purge(ctx, jetstream.WithPurgeSubject(s.parkedSubject("orders", "sub", 3))); err != nil {
		t.Fatal(err)
	}
	if _, err := s.js.Publish(ctx, s.parkedSubject("orders", "sub", 3), []byte{formatV1, 1, 200}); err != nil {
		t.Fatal(err)
	}
	if err := s.parked.Purge(ctx, jetstream.WithPurgeSubject(s.parkedSubject("orders", "sub", 4))); err != nil {
		t.Fatal(err)
	}

	for range 2 { // reported once, however often read
		st, err := s.LoadSubscription(ctx, "orders", "sub")
		if got := parkedIDs(st.Parked); err != nil || len(got) != 1 || got[0] != "e1" {
			t.Fatalf("LoadSubscription = %v, %v; want [e1], the events whose copies are damaged left out", got, err)
		}
		got, err := s.ParkedEvents(ctx, "orders", "sub", []uint64{1, 2, 3, 4})
		if ids := parkedIDs(got); err != nil || len(ids) != 1 || ids[0] != "e1" {
			t.Fatalf("ParkedEvents = %v, %v; want [e1]", ids, err)
		}
	}
	if counts[DamageEntry] != 3 || len(counts) != 1 || s.Health().Corruptions != 3 {
		t.Errorf("damage counted %v, Health().Corruptions = %d; want 3 of kind %q", counts, s.Health().Corruptions, DamageEntry)
	}
	out := logs.String()
	if n := strings.Count(out, "level=ERROR"); n != 3 {
		t.Errorf("%d ERRORs logged, want one per damaged copy (3):\n%s", n, out)
	}
	for _, want := range []string{"topic=orders", "subscription=sub", "seq=2", "seq=3", "seq=4", "does not decode", "is missing", "lost to the subscription", "publish rights on HOLES.parked.>", "delete and purge rights"} {
		if !strings.Contains(out, want) {
			t.Errorf("the ERRORs do not say %q:\n%s", want, out)
		}
	}

	// The subscription forgets them; its next update purges their copies.
	if err := s.UpdateSubscription(ctx, "orders", "sub", store.Update{Cursor: 4, Delete: []uint64{2, 3, 4}}); err != nil {
		t.Fatal(err)
	}
	st, err := s.LoadSubscription(ctx, "orders", "sub")
	if got := parkedIDs(st.Parked); err != nil || len(got) != 1 || got[0] != "e1" || s.Health().Corruptions != 3 {
		t.Errorf("after the forgetting: LoadSubscription = %v, %v, %d corruptions; want [e1] and 3", got, err, s.Health().Corruptions)
	}

	if _, err := s.js.Publish(ctx, s.parkedSubject("orders", "sub", 1), []byte{9, 1, 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LoadSubscription(ctx, "orders", "sub"); !errors.Is(err, errCorrupt) || !strings.Contains(err.Error(), "upgrade") {
		t.Errorf("LoadSubscription with a copy of an unknown format = %v, want errCorrupt saying to upgrade", err)
	}
}
