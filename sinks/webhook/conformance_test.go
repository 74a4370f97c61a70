package webhook_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks/webhook"
	"github.com/egridio/egrid/testkit/sinktest"
)

// The webhook sink passes the sink conformance suite against an httptest server.
func TestConformance(t *testing.T) {
	sinktest.RunSink(t, sinktest.SinkSuite{
		New: func(t *testing.T) *sinktest.Destination {
			h := &recordingEndpoint{}
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			return &sinktest.Destination{Sink: newConformanceSink(t, srv.URL), Received: h.rec.Wait, Stall: h.stall, Headers: true}
		},
		Failures: func(t *testing.T) []sinktest.Failure {
			answer := func(code int) string {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) }))
				t.Cleanup(srv.Close)
				return srv.URL
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			dead := "http://" + ln.Addr().String() + "/hook"
			ln.Close()
			return []sinktest.Failure{
				{Name: "503", Sink: newConformanceSink(t, answer(503)), Outcome: schemas.Busy},
				{Name: "404", Sink: newConformanceSink(t, answer(404)), Outcome: schemas.NotFound},
				{Name: "400", Sink: newConformanceSink(t, answer(400)), Outcome: schemas.BadRequest},
				{Name: "500", Sink: newConformanceSink(t, answer(500)), Outcome: schemas.GenericError},
				{Name: "connection refused", Sink: newConformanceSink(t, dead), Outcome: schemas.SocketError},
			}
		},
	})
}

func newConformanceSink(t *testing.T, url string) *webhook.Sink {
	t.Helper()
	s, err := webhook.New(webhook.Config{URL: url}, &http.Client{Transport: &http.Transport{}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// recordingEndpoint accepts deliveries and records each event with the request's headers.
type recordingEndpoint struct {
	rec  sinktest.Recorder
	mu   sync.Mutex
	held chan struct{} // non-nil while stalled; closed on the first held request
	once bool
}

func (e *recordingEndpoint) stall(*testing.T) <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.held = make(chan struct{})
	return e.held
}

func (e *recordingEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	held := e.held
	if held != nil && !e.once {
		e.once = true
		close(held)
	}
	e.mu.Unlock()
	body, err := io.ReadAll(r.Body) // read first: net/http notices a client leaving only then
	if held != nil {
		<-r.Context().Done() // no answer until the client gives up
		return
	}
	var raw json.RawMessage
	if err == nil {
		err = json.Unmarshal(body, &raw)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var objs []struct {
		ID string `json:"id"`
	}
	if strings.HasPrefix(strings.TrimSpace(string(raw)), "{") {
		raw = append(append(json.RawMessage("["), raw...), ']')
	}
	if err := json.Unmarshal(raw, &objs); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	header := make(map[string]string, len(r.Header))
	for k := range r.Header {
		header[strings.ToLower(k)] = r.Header.Get(k)
	}
	out := make([]sinktest.Received, len(objs))
	for i, o := range objs {
		out[i] = sinktest.Received{ID: o.ID, Header: header}
	}
	e.rec.Add(out...)
	w.WriteHeader(http.StatusOK)
}
