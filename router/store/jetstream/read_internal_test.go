package jetstream

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// TestReadRunFillsHoles checks the run a Read's consumer builds: messages the consumer sent
// that never arrived (its delivery went on after a hole) are read from the stream, so the
// run holds every entry the stream has, in order; a message the stream has deleted is
// passed over. Without the filling, a subscription actor given the run would move its next
// entry past the lost ones and never deliver them.
func TestReadRunFillsHoles(t *testing.T) {
	s, str := holesStore(t, 10)
	ctx := t.Context()
	if err := str.DeleteMsg(ctx, 8); err != nil { // no longer in the stream
		t.Fatal(err)
	}
	r := run{s: s, str: str, topic: "orders", next: 1}
	// The consumer's delivery: 2-4 lost on the way, 8 not in the stream, 6 delivered twice.
	for _, seq := range []uint64{1, 5, 6, 6, 7, 9, 10} {
		m, err := str.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.add(ctx, seq, m.Data); err != nil {
			t.Fatalf("add(%d): %v", seq, err)
		}
	}
	var got []string
	for _, e := range r.entries {
		if e.Event.ID != fmt.Sprintf("e%d", e.Seq) {
			t.Errorf("entry %d holds event %s", e.Seq, e.Event.ID)
		}
		got = append(got, e.Event.ID)
	}
	if want := []string{"e1", "e2", "e3", "e4", "e5", "e6", "e7", "e9", "e10"}; !slices.Equal(got, want) {
		t.Errorf("the run holds %v, want %v", got, want)
	}
	if r.next != 11 {
		t.Errorf("the run needs %d next, want 11", r.next)
	}

	// A message the get does not find although the stream has not let it go (here: one past
	// its end, as a server that has not got it yet answers) ends the run before it: passing
	// over it would lose it for good.
	if err := r.add(ctx, 12, []byte("not read")); !errors.Is(err, errRunEnds) {
		t.Errorf("add after a hole the stream has not let go = %v, want errRunEnds", err)
	}
	if r.next != 11 || len(r.entries) != 9 {
		t.Errorf("after the hole the run needs %d next and holds %d entries, want 11 and 9", r.next, len(r.entries))
	}

	// Trimmed messages are gone for good: a run from before the trim passes over them.
	if err := s.Trim(ctx, "orders", 3); err != nil {
		t.Fatal(err)
	}
	trimmed := run{s: s, str: str, topic: "orders", next: 2}
	m, err := str.GetMsg(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if err := trimmed.add(ctx, 5, m.Data); err != nil {
		t.Fatalf("add after trimmed messages: %v", err)
	}
	if got := ids(trimmed.entries); !slices.Equal(got, []string{"e4", "e5"}) {
		t.Errorf("a run from 2 after a trim through 3 holds %v, want [e4 e5]", got)
	}
}

// TestReadGetsPassOnlyMessagesGone checks Read's single-message gets: a message the stream
// has deleted is passed over, and the read ends before one it does not return but has not let
// go.
func TestReadGetsPassOnlyMessagesGone(t *testing.T) {
	s, str := holesStore(t, 3)
	ctx := t.Context()
	if err := str.DeleteMsg(ctx, 2); err != nil {
		t.Fatal(err)
	}
	got, err := s.Read(ctx, "orders", 1, smallRead)
	if err != nil {
		t.Fatal(err)
	}
	if ids := ids(got); !slices.Equal(ids, []string{"e1", "e3"}) {
		t.Errorf("Read from 1 with message 2 deleted = %v, want [e1 e3]", ids)
	}
	if g, err := gone(ctx, str, 4); err != nil || g {
		t.Errorf("gone(4) on a stream ending at 3 = %v, %v; want false: it may come yet", g, err)
	}
}

func ids(entries []store.Entry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.Event.ID)
	}
	return out
}

// holesStore returns a store on an in-process NATS server with a topic "orders" holding n
// events e1..en, and the topic's journal stream.
func holesStore(t *testing.T, n int) (*Store, jetstream.Stream) {
	t.Helper()
	srv, err := natsserver.NewServer(&natsserver.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		MaxPayload: MinMaxPayload,
	})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("the in-process NATS server did not accept connections within 10s")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx := t.Context()
	s, err := Open(ctx, nc, Options{Prefix: "HOLES"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutTopic(ctx, "orders", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	var evs []*schemas.Event
	for i := 1; i <= n; i++ {
		evs = append(evs, &schemas.Event{ID: fmt.Sprintf("e%d", i)})
	}
	if _, err := s.Append(ctx, "orders", time.Unix(1, 0), evs); err != nil {
		t.Fatal(err)
	}
	str, _, err := s.streamInfo(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	return s, str
}

// TestAppendErrNamesAPublishNoServerTook checks the error of a publish no JetStream server
// took (its stream electing a leader): not "topic not found", which it was taken for, but
// what happened and what to do.
func TestAppendErrNamesAPublishNoServerTook(t *testing.T) {
	s := &Store{}
	err := s.appendErr("orders", jetstream.ErrNoStreamResponse)
	if errors.Is(err, store.ErrNotFound) {
		t.Errorf("appendErr(ErrNoStreamResponse) = %v: taken for a topic not found", err)
	}
	if !strings.Contains(err.Error(), "electing a leader") || !strings.Contains(err.Error(), "publish them again") {
		t.Errorf("appendErr(ErrNoStreamResponse) = %q: does not say what happened and what to do", err)
	}
	if err := s.appendErr("orders", jetstream.ErrStreamNotFound); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("appendErr(ErrStreamNotFound) = %v, want store.ErrNotFound", err)
	}
}

// A message on a journal's subject that the store did not write must not reach a
// subscription as an entry: one without an event (format 1, event absent) became an Entry
// whose Event was nil, and a subscription's filter or delivery dereferenced it (a panic, the
// subscription restarted for good). Such a message is passed over with an ERROR, by both
// kinds of read, and the entries around it are returned; one of a format this release does
// not know (maybe a newer release's event) fails the read instead of being passed over.
func TestReadPassesOverAForeignJournalMessage(t *testing.T) {
	ctx := t.Context()
	var logs strings.Builder
	s, _ := holesStore(t, 0)
	s.opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	ev := func(id string) *schemas.Event {
		return &schemas.Event{ID: id, Type: "T", Subject: "/s", Time: "2024-01-01T00:00:00Z", DataVersion: "1"}
	}
	if _, err := s.Append(ctx, "orders", time.Unix(1, 0), []*schemas.Event{ev("a")}); err != nil {
		t.Fatal(err)
	}
	for _, data := range [][]byte{{1, 0, 0, 0}, {}, {1, 0, 0, 1, 200}} { // no event; empty; cut short
		if _, err := s.js.Publish(ctx, s.subject("orders"), data); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Append(ctx, "orders", time.Unix(2, 0), []*schemas.Event{ev("b"), ev("c"), ev("d"), ev("e")}); err != nil {
		t.Fatal(err)
	}
	for _, max := range []int{smallRead, 100} { // single-message gets; a consumer
		got, err := s.Read(ctx, "orders", 1, max)
		if err != nil {
			t.Fatalf("Read(max %d): %v", max, err)
		}
		var ids []string
		for _, e := range got {
			id := "-" // passed over
			if e.Event != nil {
				id = e.Event.ID
			}
			ids = append(ids, fmt.Sprint(e.Seq, id))
		}
		want := []string{"1a", "2-", "3-", "4-", "5b", "6c", "7d", "8e"}
		if max == smallRead {
			want = want[:smallRead]
		}
		if !slices.Equal(ids, want) {
			t.Errorf("Read(max %d) = %v, want %v", max, ids, want)
		}
	}
	if n := strings.Count(logs.String(), "level=ERROR"); n != 3 {
		t.Errorf("%d ERRORs logged, want one per foreign message (3), however often it is read:\n%s", n, logs.String())
	}
	if n := s.Health().Corruptions; n != 3 {
		t.Errorf("Health().Corruptions = %d, want one per foreign message (3)", n)
	}
	if !strings.Contains(logs.String(), "seq=2") || !strings.Contains(logs.String(), "no event") {
		t.Errorf("the ERROR does not name the message and what is wrong:\n%s", logs.String())
	}

	if _, err := s.js.Publish(ctx, s.subject("orders"), []byte{9, 1, 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(ctx, "orders", 9, 10); !errors.Is(err, errCorrupt) || !strings.Contains(err.Error(), "upgrade") {
		t.Errorf("Read of a message of an unknown format: %v, want errCorrupt saying to upgrade", err)
	}
}

// A parked event's copy without an event does not decode either.
func TestDecodeBodyWithoutEventIsCorrupt(t *testing.T) {
	if ev, err := decodeBody([]byte{1, 0}); !errors.Is(err, errCorrupt) || ev != nil {
		t.Errorf("decodeBody of a copy without an event = %v, %v; want errCorrupt", ev, err)
	}
}

// A reader whose whole read is foreign messages still moves past them: every position comes
// back, as an entry without an event, so a subscription's cursor reaches the events after
// however many there are (it moves only past the entries it gets).
func TestReadReachesTheEventsAfterManyForeignMessages(t *testing.T) {
	ctx := t.Context()
	s, _ := holesStore(t, 0)
	s.opts.Logger = slog.New(slog.DiscardHandler)
	ev := func(id string) *schemas.Event {
		return &schemas.Event{ID: id, Type: "T", Subject: "/s", Time: "2024-01-01T00:00:00Z", DataVersion: "1"}
	}
	if _, err := s.Append(ctx, "orders", time.Unix(1, 0), []*schemas.Event{ev("a")}); err != nil {
		t.Fatal(err)
	}
	const foreign = 150
	for range foreign {
		if _, err := s.js.Publish(ctx, s.subject("orders"), []byte{1, 0}); err != nil {
			t.Fatal(err)
		}
	}
	last, err := s.Append(ctx, "orders", time.Unix(2, 0), []*schemas.Event{ev("b")})
	if err != nil {
		t.Fatal(err)
	}
	for _, max := range []int{smallRead, 100} {
		next, found := uint64(2), false
		for reads := 0; reads < 2*foreign && !found; reads++ {
			got, err := s.Read(ctx, "orders", next, max)
			if err != nil {
				t.Fatalf("Read(from %d, max %d): %v", next, max, err)
			}
			if len(got) == 0 {
				t.Fatalf("Read(from %d, max %d) returned nothing: a reader stays there for good", next, max)
			}
			for _, e := range got {
				if e.Event != nil && e.Event.ID == "b" && e.Seq == last {
					found = true
				}
				next = e.Seq + 1
			}
		}
		if !found {
			t.Errorf("reads of at most %d from 2 never reached event b (%d)", max, last)
		}
	}
}
