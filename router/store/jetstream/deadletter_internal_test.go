package jetstream

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/store"
)

// gatheredPuts is the dead-letter bucket of a store whose Puts each wait until want of them
// are under way at once, or until a bound passes (then they fail): a store that writes the
// keys one after another fails every batch of more than one.
type gatheredPuts struct {
	jetstream.KeyValue
	arrived chan struct{}
	all     chan struct{}
	want    int
}

func (g *gatheredPuts) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	select {
	case g.arrived <- struct{}{}:
	case <-g.all:
	}
	select {
	case <-g.all:
		return g.KeyValue.Put(ctx, key, value)
	case <-time.After(5 * time.Second): // a failure guard only: the gathering takes microseconds
		return 0, errors.New("the other dead-letter writes of the batch were not under way at the same time")
	}
}

func (g *gatheredPuts) gather() {
	for range g.want {
		<-g.arrived
	}
	close(g.all)
}

// A batch of dead letters is written up to bodyCalls keys at once, so an update that ends
// many events costs a few round trips while it holds the subscription, not one per event.
func TestDeadLettersAreWrittenTogether(t *testing.T) {
	s, _ := holesStore(t, 1)
	g := &gatheredPuts{KeyValue: s.dead, arrived: make(chan struct{}), all: make(chan struct{}), want: bodyCalls}
	s.dead = g
	go g.gather()
	var recs []store.DeadLetterRecord
	for i := range 2 * bodyCalls {
		recs = append(recs, store.DeadLetterRecord{ID: fmt.Sprintf("dl-%02d", i), Payload: []byte{byte(i)}})
	}
	if err := s.PutDeadLetters(t.Context(), recs); err != nil {
		t.Fatal(err)
	}
	got, err := s.DeadLetters(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(recs) {
		t.Fatalf("%d dead-letter records stored, want %d", len(got), len(recs))
	}
	for i, r := range got {
		if r.ID != recs[i].ID || len(r.Payload) != 1 || r.Payload[0] != byte(i) {
			t.Fatalf("record %d: %q %v, want %q [%d]", i, r.ID, r.Payload, recs[i].ID, i)
		}
	}
}

// A batch with one id the store cannot take writes none of its records.
func TestDeadLettersWithABadIDWriteNothing(t *testing.T) {
	s, _ := holesStore(t, 1)
	recs := []store.DeadLetterRecord{{ID: "good", Payload: []byte("x")}, {ID: "", Payload: []byte("y")}}
	if err := s.PutDeadLetters(t.Context(), recs); err == nil {
		t.Fatal("a dead-letter record with an empty id was taken")
	}
	got, err := s.DeadLetters(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("%d records written of a refused batch: %v", len(got), got)
	}
}
