package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// heldListing is an object store whose listings wait until released (or their context ends):
// a replay that reads them runs for as long as the test holds it.
type heldListing struct {
	*testkit.ObjectStore
	release chan struct{}
}

func (s *heldListing) List(ctx context.Context, bucket string, q sinks.ListQuery) ([]sinks.ObjectInfo, error) {
	select {
	case <-s.release:
	case <-ctx.Done():
	}
	return s.ObjectStore.List(ctx, bucket, q)
}

// streamRecorder is a ResponseWriter that keeps what was written, for a handler that writes
// for a while.
type streamRecorder struct {
	mu     sync.Mutex
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *streamRecorder) Header() http.Header { return w.header }
func (w *streamRecorder) WriteHeader(status int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.status = status
}
func (w *streamRecorder) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.body.Write(p)
}
func (w *streamRecorder) Flush() {}

// lines decodes the lines written so far.
func (w *streamRecorder) lines(t *testing.T) []httpapi.ReplayStreamLine {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []httpapi.ReplayStreamLine
	for _, l := range strings.Split(strings.TrimSpace(w.body.String()), "\n") {
		if l == "" {
			continue
		}
		var line httpapi.ReplayStreamLine
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatalf("answer line %q: %v", l, err)
		}
		out = append(out, line)
	}
	return out
}

// A replay's answer has a line at least every heartbeat interval while the replay runs, a
// heartbeat when nothing else came, and says the interval in its header: a client can tell a
// long replay from a connection or server gone quiet. It had lines only as objects were read
// and events settled, so a client had no bound to wait with but the replay's whole length.
func TestReplayAnswerHasHeartbeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 5 * time.Second
		defer httpapi.SetReplayHeartbeat(interval)()
		ctx := context.Background()
		store := &heldListing{ObjectStore: testkit.NewObjectStore(), release: make(chan struct{})}
		r, err := router.New(router.Config{AdminToken: "tok"}, router.Deps{Sinks: nullSinks(), DeadLetterStore: store})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(ctx)
		if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
			t.Fatal(err)
		}
		spec := router.SubscriptionSpec{Destination: router.SinkDestination("null"), DeadLetterDestination: &router.DeadLetterDestination{EndpointType: "StorageBlob"}}
		spec.DeadLetterDestination.Properties.BlobContainerName = "dl-objects"
		if err := r.CreateSubscription(ctx, "orders", "billing", spec); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Put(ctx, "dl-objects", deadletter.Key("BILLING", time.Now(), "a"), []byte("[]"), sinks.PutOptions{ContentType: "application/json"}); err != nil {
			t.Fatal(err)
		}

		rctx, hangUp := context.WithCancel(ctx)
		req := httptest.NewRequestWithContext(rctx, "POST", "/admin/topics/orders/eventSubscriptions/billing/deadLetters/replay", strings.NewReader(`{"wait":true}`))
		req.Header.Set("Authorization", "Bearer tok")
		w := &streamRecorder{header: http.Header{}}
		served := make(chan struct{})
		go func() {
			defer close(served)
			httpapi.New(r).ServeHTTP(w, req)
		}()
		defer func() { hangUp(); <-served }()    // ends a replay the test gave up on
		testkit.Advance(4*interval + interval/2) // the replay's listing is held throughout
		if w.status != http.StatusOK || w.header.Get(httpapi.ReplayHeartbeatHeader) != interval.String() {
			t.Errorf("answer %d with %s: %q; want 200 giving the interval %s", w.status, httpapi.ReplayHeartbeatHeader, w.header.Get(httpapi.ReplayHeartbeatHeader), interval)
		}
		lines := w.lines(t)
		beats := 0
		for _, l := range lines {
			if !l.Heartbeat || l.Progress != nil || l.Summary != nil || l.Error != nil {
				t.Errorf("line %+v while the listing is held, want only heartbeats", l)
				continue
			}
			beats++
		}
		if beats != 4 {
			t.Errorf("%d heartbeats in %v of a held replay, want 4 (one every %v)", beats, 4*interval+interval/2, interval)
		}

		close(store.release)
		select {
		case <-served:
		case <-time.After(time.Minute):
			t.Fatal("the replay's answer did not end a minute after its listing was released")
		}
		lines = w.lines(t)
		if last := lines[len(lines)-1]; last.Summary == nil || !last.Summary.Completed {
			t.Errorf("last line %+v, want the summary of a completed replay", last)
		}
	})
}
