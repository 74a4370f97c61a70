package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Every request the load generator numbers gets ids of its own for all its events, and the
// bodies stay what eventBody and cloudEventBody made otherwise.
func TestRequestBodiesNumberEveryRequest(t *testing.T) {
	for name, body := range map[string][]byte{
		"Event Grid":  eventBody(3, "e", "/bench"),
		"CloudEvents": cloudEventBody(2, "p"),
	} {
		t.Run(name, func(t *testing.T) {
			rb := newRequestBodies(body)
			seen := make(map[string]bool)
			buf := bytes.Clone(body)
			for range 3 {
				rb.fill(buf)
				var evs []struct {
					ID string `json:"id"`
				}
				if err := json.Unmarshal(buf, &evs); err != nil {
					t.Fatalf("a filled body is not JSON: %v", err)
				}
				for _, ev := range evs {
					if seen[ev.ID] {
						t.Fatalf("id %q seen twice", ev.ID)
					}
					seen[ev.ID] = true
				}
				if len(buf) != len(body) || bytes.Count(buf, []byte(`"id":"`)) != len(evs) {
					t.Fatalf("the filled body changed shape:\n%s", buf)
				}
			}
			if want := 3 * bytes.Count(body, []byte(`"id":"`)); len(seen) != want {
				t.Fatalf("%d distinct ids over 3 requests, want %d", len(seen), want)
			}
		})
	}
	plain := []byte(`[{"id":"fixed","data":{}}]`)
	buf := bytes.Clone(plain)
	newRequestBodies(plain).fill(buf)
	if !bytes.Equal(buf, plain) {
		t.Fatalf("a body without request digits changed: %s", buf)
	}
}

// The paced senders deliver every request once, record each answer's time by its number,
// leave out requests answered with anything but 200, dial again after a server's
// Connection: close, and stop waiting for answers when the run's context ends.
func TestPacedSendsEveryRequest(t *testing.T) {
	var got sync.Map // request number → times received
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.URL.Path != "/in" || r.Header.Get("Content-Type") != "application/json" || r.ContentLength != int64(len(body)) {
			t.Errorf("request %s %s %q, Content-Length %d for %d bytes", r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.ContentLength, len(body))
		}
		n, _ := strconv.Atoi(string(body))
		v, _ := got.LoadOrStore(n, new(atomic.Int32))
		v.(*atomic.Int32).Add(1)
		switch k := requests.Add(1); {
		case n%10 == 3:
			w.WriteHeader(http.StatusServiceUnavailable)
		case k%7 == 0:
			w.Header().Set("Connection", "close")
		}
	}))
	defer srv.Close()
	b := NewRunner(Options{Concurrency: 4, Rate: 1_000_000})
	const total = 200
	answered := make([]atomic.Int64, total)
	acks := b.pacedAnswers(context.Background(), "test", srv.URL+"/in", total, func(i int) string { return strconv.Itoa(i) }, answered)
	if len(acks) != total-total/10 {
		t.Errorf("%d requests answered 200, want %d", len(acks), total-total/10)
	}
	for i := range total {
		v, ok := got.Load(i)
		if !ok || v.(*atomic.Int32).Load() != 1 {
			t.Errorf("request %d received %v times, want once", i, v)
		}
		if ok200 := i%10 != 3; (answered[i].Load() != 0) != ok200 {
			t.Errorf("request %d: answer time %d, answered 200: %v", i, answered[i].Load(), ok200)
		}
	}

	// A server that never answers: the senders stop once the context ends.
	hang := make(chan struct{})
	stuck := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-hang }))
	defer stuck.Close()
	defer close(hang)
	ctx, cancel := context.WithCancel(context.Background())
	var entered atomic.Int64
	all := make(chan struct{}) // closed once each sender has built its body
	done := make(chan []time.Duration)
	go func() {
		done <- b.paced(ctx, "stuck", stuck.URL+"/", 3, func(i int) string {
			if entered.Add(1) == 3 {
				close(all)
			}
			return "x"
		})
	}()
	<-all
	cancel()
	if acks := <-done; len(acks) != 0 {
		t.Errorf("%d answers from a server that never answers", len(acks))
	}
}

// A warm-up load stops sending once it has its answers, long before its time bound, and
// counts at most the requests already in flight beyond them.
func TestLoadUpToStopsAtItsCount(t *testing.T) {
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got.Add(1)
	}))
	defer srv.Close()
	const conc, max = 4, 50
	b := NewRunner(Options{Concurrency: conc})
	l, err := b.loadUpTo(t.Context(), "warm-up", srv.URL, []byte(`[]`), time.Hour, max)
	if err != nil {
		t.Fatal(err)
	}
	if l.ok < max || l.ok >= max+conc {
		t.Fatalf("%d requests answered, want %d to %d", l.ok, max, max+conc-1)
	}
	if got.Load() != l.ok {
		t.Fatalf("the server answered %d requests, the load counted %d", got.Load(), l.ok)
	}
}
