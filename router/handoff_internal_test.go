package router

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/schemas"
)

// bigEvents returns n events of about size bytes of JSON each, ids prefix-0, prefix-1, ...
func bigEvents(t *testing.T, prefix string, n, size int) []*schemas.Event {
	t.Helper()
	raw := make([]string, n)
	pad := strings.Repeat("x", size)
	for i := range raw {
		raw[i] = fmt.Sprintf(`{"id":"%s-%d","subject":"/s","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{"pad":"%s"}}`, prefix, i, pad)
	}
	evs, err := schemas.DecodeEventGrid([]byte("["+strings.Join(raw, ",")+"]"), "/topics/orders", schemas.ClassicLimits)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// A topic actor that does not keep up with its publishers (here: one that takes no message
// until released) is handed the acknowledged events only up to the hand-off bound; past it the
// committer sends where the journal ends, and the events wait in the journal, not in the
// actor's mailbox. Every appended sequence number is still told: in the entries handed over,
// or within a JournalAt. The committer handed every batch over in memory, so a slow topic actor
// held every acknowledged event for as long as publishing went on.
func TestCommitterHandsATopicActorOnlyWhatFitsItsBound(t *testing.T) {
	defer func(b int64) { handOffBound = b }(handOffBound)
	handOffBound = 16 << 10

	r, err := New(Config{}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	if _, err := r.CreateTopic(context.Background(), "orders", TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	got := make(chan any, 1000)
	var once sync.Once
	held := r.system.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case *actors.Appended:
			once.Do(func() { <-release })
			got <- m
			m.Handed()
		case *actors.JournalAt:
			once.Do(func() { <-release })
			got <- m
		}
	}))
	c := newCommitter(r, &topicRuntime{name: "orders", pid: held})
	defer c.close()

	const batches, perBatch, size = 40, 4, 1 << 10
	var last uint64
	for i := range batches {
		if err := c.append(context.Background(), bigEvents(t, fmt.Sprint("b", i), perBatch, size)); err != nil {
			t.Fatal(err)
		}
		if h := c.handed.Load(); h > handOffBound {
			t.Fatalf("after %d acknowledged batches %d bytes are handed over and not fanned out; want at most the bound, %d", i+1, h, handOffBound)
		}
		last += perBatch
	}
	close(release)

	var inMemory int
	var told uint64
	var journalAts int
	for told < last {
		select {
		case m := <-got:
			switch m := m.(type) {
			case *actors.Appended:
				if first := m.Entries[0].Seq; first <= told {
					t.Fatalf("entries from %d handed over after the journal was told up to %d", first, told)
				}
				inMemory += len(m.Entries)
				told = m.Entries[len(m.Entries)-1].Seq
			case *actors.JournalAt:
				journalAts++
				told = m.Last
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the topic actor was told up to %d of %d within 30 s", told, last)
		}
	}
	if journalAts == 0 || inMemory == 0 || inMemory*size > int(handOffBound) {
		t.Errorf("%d events handed over in memory (about %d bytes), %d JournalAt; want some handed over, at most the bound (%d bytes), the rest left in the journal",
			inMemory, inMemory*size, journalAts, handOffBound)
	}
}

// Events left in the journal by the hand-off bound are delivered all the same: with a bound
// that nothing fits, every event reaches its subscription through its journal reads.
func TestEventsPastTheHandOffBoundAreDelivered(t *testing.T) {
	defer func(b int64) { handOffBound = b }(handOffBound)
	handOffBound = 1

	var mu sync.Mutex
	seen := make(map[string]bool)
	all := make(chan struct{})
	const n = 200
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var evs []struct{ ID string }
		if err := json.Unmarshal(body, &evs); err != nil {
			t.Errorf("a delivery the test cannot read: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, e := range evs {
			seen[e.ID] = true
		}
		if len(seen) == n {
			select {
			case <-all:
			default:
				close(all)
			}
		}
	}))
	defer hook.Close()
	r, err := New(Config{SkipEndpointValidation: true}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	if _, err := r.CreateTopic(context.Background(), "orders", TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateSubscription(context.Background(), "orders", "sub1", SubscriptionSpec{Destination: WebHook(hook.URL)}); err != nil {
		t.Fatal(err)
	}
	for i := range n / 10 {
		if err := r.PublishEvents(context.Background(), "orders", bigEvents(t, fmt.Sprint("p", i), 10, 100)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-all:
	case <-time.After(time.Minute):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%d of %d events delivered within a minute", len(seen), n)
	}
}
