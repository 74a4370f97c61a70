package jetstream

import (
	"fmt"
	"slices"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/egridio/egrid/schemas"
)

// TestReadRunFillsHoles checks the run a Read's consumer builds: messages the consumer sent
// that never arrived (its delivery went on after a hole) are read from the stream, so the
// run holds every entry the stream has, in order; a message the stream no longer has is
// passed over. Without the filling, a subscription actor given the run would move its next
// entry past the lost ones and never deliver them.
func TestReadRunFillsHoles(t *testing.T) {
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
	for i := 1; i <= 10; i++ {
		evs = append(evs, &schemas.Event{ID: fmt.Sprintf("e%d", i)})
	}
	if _, err := s.Append(ctx, "orders", time.Unix(1, 0), evs); err != nil {
		t.Fatal(err)
	}
	str, _, err := s.streamInfo(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if err := str.DeleteMsg(ctx, 8); err != nil { // no longer in the stream
		t.Fatal(err)
	}
	r := run{str: str, topic: "orders", next: 1}
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
}
