package bench

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestCountEvents(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       int
	}{
		{"one object", `{"id":"1"}`, 1},
		{"empty array", `[]`, 0},
		{"bench events", string(eventBody(3, "e", "/bench")), 3},
		{"nested objects and arrays", ` [{"a":{"b":[{},{}]}},{"c":[1,2]}] `, 2},
		{"brackets in strings", `[{"s":"[{\"x\":{}}]"},{"t":"}]"}]`, 2},
		{"escaped quote", `[{"s":"\"{"},{}]`, 2},
		{"escaped backslash before the closing quote", `[{"s":"a\\"},{"t":"\\\\"},{"u":"\\\"{"}]`, 3},
		{"unterminated string", `[{"s":"{{{`, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := countEvents([]byte(tc.body)); got != tc.want {
				t.Errorf("countEvents(%s) = %d, want %d", tc.body, got, tc.want)
			}
			var evs []json.RawMessage
			if tc.body[0] == ' ' || tc.body[0] == '[' {
				if err := json.Unmarshal([]byte(tc.body), &evs); err == nil && len(evs) != tc.want {
					t.Errorf("encoding/json reads %d elements, the test wants %d", len(evs), tc.want)
				}
			}
		})
	}
}

func TestLatencyMarks(t *testing.T) {
	body := []byte(`[{"id":"l-1","data":{"pad":"xx","n":1,"sent":1764171234000000001}},` +
		`{"id":"l-2","data":{"n":"two","pad":"yy","n":2,"sent":42}},{"id":"l-3","data":{"n":3,"sent":"late"}}]`)
	var got []mark
	for m := range latencyMarks(body) {
		got = append(got, m)
	}
	if want := []mark{{1, 1764171234000000001}, {2, 42}}; !slices.Equal(got, want) {
		t.Errorf("latencyMarks = %v, want %v", got, want)
	}
	for range latencyMarks(body) {
		break // stopping early must not panic
	}
}

func TestAfterAnswer(t *testing.T) {
	answered := make([]atomic.Int64, 4)
	answered[0].Store(1000)
	answered[2].Store(5000) // request 1 failed: no answer; request 3 was never sent
	arrivals := []arrival{{n: 2, at: 4000}, {n: 0, at: 3500}, {n: 1, at: 9000}, {n: 7, at: 1}, {n: -1, at: 1}}
	if got, want := afterAnswer(arrivals, answered), []time.Duration{-1000, 2500}; !slices.Equal(got, want) {
		t.Errorf("afterAnswer = %v, want %v", got, want)
	}
}

// The read+fsync server and the sink read each body into a pooled buffer of its announced
// size: bodies around the pool's size classes, and bodies sent without a Content-Length (the
// buffer then starts at the smallest class and grows), must arrive whole and in order.
func TestServersKeepEveryBodyWhole(t *testing.T) {
	var bodies [][]byte
	for i, n := range []int{0, 1, 511, 512, 513, 4096, 100_000, 1 << 20} {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte('a' + (i+j)%26)
		}
		bodies = append(bodies, b)
	}
	post := func(t *testing.T, url string, body []byte, chunked bool) {
		t.Helper()
		var r io.Reader = bytes.NewReader(body)
		if chunked {
			r = io.MultiReader(r) // hides the length: the request goes chunked
		}
		req, err := http.NewRequest(http.MethodPost, url, r)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %d bytes: %s", len(body), resp.Status)
		}
	}

	t.Run("read+fsync server", func(t *testing.T) {
		s, err := startSyncServer(t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.close()
		var want []byte
		for _, chunked := range []bool{false, true} {
			for _, b := range bodies {
				post(t, s.url+"/", b, chunked)
				want = append(want, b...)
			}
		}
		got, err := os.ReadFile(s.f.Name())
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("the file holds %d bytes, want the %d posted, in order", len(got), len(want))
		}
	})

	t.Run("read+fsync+deliver server", func(t *testing.T) {
		sink, err := startSink()
		if err != nil {
			t.Fatal(err)
		}
		defer sink.close()
		var mu sync.Mutex
		delivered := map[string]int{}
		sink.onEvent = func(path string, body []byte) {
			mu.Lock()
			defer mu.Unlock()
			delivered[path+" "+string(body)]++
		}
		s, err := startForwardServer(t.TempDir(), sink.url+forwardPath)
		if err != nil {
			t.Fatal(err)
		}
		var want []byte
		for _, chunked := range []bool{false, true} {
			for _, b := range bodies {
				post(t, s.url+"/", b, chunked)
				want = append(want, b...)
			}
		}
		got, err := os.ReadFile(s.f.Name())
		s.close() // returns once every synced body was delivered
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("the file holds %d bytes, want the %d posted, in order", len(got), len(want))
		}
		if n := s.fwd.failed.Load(); n != 0 {
			t.Fatalf("%d deliveries failed", n)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, b := range bodies {
			if n := delivered[forwardPath+" "+string(b)]; n != 2 {
				t.Errorf("a body of %d bytes was delivered %d times, want 2 (posted twice)", len(b), n)
			}
		}
	})

	t.Run("sink", func(t *testing.T) {
		s, err := startSink()
		if err != nil {
			t.Fatal(err)
		}
		defer s.close()
		var mu sync.Mutex
		var got [][]byte
		s.onEvent = func(_ string, body []byte) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, bytes.Clone(body))
		}
		for _, chunked := range []bool{false, true} {
			for _, b := range bodies {
				post(t, s.url+"/", b, chunked)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		want := append(slices.Clone(bodies), bodies...)
		if !slices.EqualFunc(got, want, bytes.Equal) {
			t.Fatalf("the sink saw %d bodies, not the %d posted, whole and in order", len(got), len(want))
		}
	})
}

// The read+validate+fsync server appends a body its check accepts, and answers 400 to one it
// refuses without appending it; the publish scenarios' check is egrid's decoder.
func TestValidatingSyncServer(t *testing.T) {
	s, err := startSyncServer(t.TempDir(), validateEventGrid)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	good := eventBody(3, "v", "/bench")
	for _, tc := range []struct {
		body []byte
		want int
	}{
		{good, http.StatusOK},
		{[]byte(`[{"id":"x"}]`), http.StatusBadRequest}, // no eventType, eventTime, subject or data
		{[]byte(`[{"id":`), http.StatusBadRequest},
	} {
		resp, err := http.Post(s.url+"/", "application/json", bytes.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("POST %.20s...: %s, want %d", tc.body, resp.Status, tc.want)
		}
	}
	got, err := os.ReadFile(s.f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, good) {
		t.Errorf("the file holds %d bytes, want only the valid body's %d", len(got), len(good))
	}
}
