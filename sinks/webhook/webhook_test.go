package webhook_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/webhook"
)

// The sink is a sinks.Sink.
var _ sinks.Sink = (*webhook.Sink)(nil)

// Every test talks to servers on 127.0.0.1 only. Tests that need a host name use a client
// whose resolver or dialer never leaves the machine (see noDNSClient and dialOnlyTo).

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		cfg    webhook.Config
		fields []string // the ConfigError fields expected, in order; none means valid
	}{
		{name: "http", cfg: webhook.Config{URL: "http://127.0.0.1:8080/hook"}},
		{name: "https with query", cfg: webhook.Config{URL: "https://example.com/api/updates?code=secret", Timeout: time.Second}},
		{name: "upper-case scheme", cfg: webhook.Config{URL: "HTTPS://example.com/"}},
		{name: "empty", cfg: webhook.Config{}, fields: []string{"url"}},
		{name: "relative", cfg: webhook.Config{URL: "/hook"}, fields: []string{"url"}},
		{name: "no scheme", cfg: webhook.Config{URL: "example.com/hook"}, fields: []string{"url"}},
		{name: "ftp", cfg: webhook.Config{URL: "ftp://example.com/hook"}, fields: []string{"url"}},
		{name: "no host", cfg: webhook.Config{URL: "http:///hook"}, fields: []string{"url"}},
		{name: "port only", cfg: webhook.Config{URL: "http://:8080/hook"}, fields: []string{"url"}},
		{name: "opaque", cfg: webhook.Config{URL: "http:example.com"}, fields: []string{"url"}},
		{name: "port zero", cfg: webhook.Config{URL: "http://example.com:0/"}, fields: []string{"url"}},
		{name: "port too big", cfg: webhook.Config{URL: "http://example.com:70000/"}, fields: []string{"url"}},
		{name: "unparsable", cfg: webhook.Config{URL: "http://exa mple.com/"}, fields: []string{"url"}},
		{name: "negative timeout", cfg: webhook.Config{URL: "http://example.com/", Timeout: -time.Second}, fields: []string{"timeout"}},
		{name: "every problem at once", cfg: webhook.Config{URL: "ftp://example.com/", Timeout: -1}, fields: []string{"url", "timeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			got := configErrorFields(t, err)
			if strings.Join(got, ",") != strings.Join(tt.fields, ",") {
				t.Fatalf("Validate() = %v; want problems with %v", err, tt.fields)
			}
			s, newErr := webhook.New(tt.cfg, nil)
			if (newErr == nil) != (err == nil) {
				t.Fatalf("New error %v disagrees with Validate error %v", newErr, err)
			}
			if newErr == nil && s.URL() != tt.cfg.URL {
				t.Fatalf("URL() = %q; want %q", s.URL(), tt.cfg.URL)
			}
		})
	}
}

func TestConfigErrorsDoNotEchoTheURL(t *testing.T) {
	err := webhook.Config{URL: "ftp://example.com/hook?code=hunter2"}.Validate()
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("Validate() = %v; want an error that does not repeat the URL's secret", err)
	}
}

// configErrorFields returns the Field of every *ConfigError joined into err.
func configErrorFields(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var fields []string
	for _, e := range errs {
		var ce *webhook.ConfigError
		if !errors.As(e, &ce) {
			t.Fatalf("problem %v is not a *webhook.ConfigError", e)
		}
		fields = append(fields, ce.Field)
	}
	return fields
}

// captured is what a test server saw of one request.
type captured struct {
	method, requestURI string
	header             http.Header
	contentLength      int64
	body               []byte
}

// captureServer answers 200 and sends every request it sees on the returned channel.
func captureServer(t *testing.T) (*httptest.Server, <-chan captured) {
	t.Helper()
	seen := make(chan captured, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("reading request body: %v", err)
		}
		seen <- captured{method: r.Method, requestURI: r.RequestURI, header: r.Header.Clone(), contentLength: r.ContentLength, body: body}
	}))
	t.Cleanup(srv.Close)
	return srv, seen
}

func newSink(t *testing.T, cfg webhook.Config, client *http.Client) *webhook.Sink {
	t.Helper()
	s, err := webhook.New(cfg, client)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return s
}

func TestDeliverRequest(t *testing.T) {
	egEvent := &schemas.Event{ID: "evt-1", Type: "Orders.Created", DataVersion: "2.0", Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	ceEvent := &schemas.Event{ID: "ce-1", Type: "Orders.Created", SpecVersion: "1.0"}
	tests := []struct {
		name  string
		batch sinks.Batch
		want  map[string]string // header → value; "" means absent
	}{
		{
			name: "event grid schema",
			batch: sinks.Batch{
				Topic: "orders", Subscription: "Billing-1", Schema: schemas.EventGrid,
				Body: []byte(`[{"id":"evt-1"}]`), ContentType: schemas.ContentTypeJSON,
				Events: []*schemas.Event{egEvent}, DeliveryCount: 3,
			},
			want: map[string]string{
				"aeg-event-type":        "Notification",
				"aeg-subscription-name": "BILLING-1",
				"aeg-delivery-count":    "3",
				"aeg-metadata-version":  "1",
				"aeg-data-version":      "2.0",
				"aeg-output-event-id":   "evt-1",
				"Content-Type":          schemas.ContentTypeJSON,
				"traceparent":           egEvent.Traceparent,
			},
		},
		{
			name: "cloudevents schema has no data version",
			batch: sinks.Batch{
				Topic: "orders", Subscription: "ce-sub", Schema: schemas.CloudEvents,
				Body: []byte(`{"id":"ce-1"}`), ContentType: schemas.ContentTypeCloudEvent,
				Events: []*schemas.Event{ceEvent},
			},
			want: map[string]string{
				"aeg-event-type":        "Notification",
				"aeg-subscription-name": "CE-SUB",
				"aeg-delivery-count":    "0",
				"aeg-metadata-version":  "1.0",
				"aeg-data-version":      "",
				"aeg-output-event-id":   "ce-1",
				"Content-Type":          schemas.ContentTypeCloudEvent,
				"traceparent":           "",
			},
		},
		{
			name: "custom schema, batch of two, headers come from the first event",
			batch: sinks.Batch{
				Topic: "orders", Subscription: "custom", Schema: schemas.Custom,
				Body: []byte(`[{"a":1},{"a":2}]`), ContentType: schemas.ContentTypeJSON,
				Events:        []*schemas.Event{{ID: "c-1", DataVersion: "1.0"}, {ID: "c-2", DataVersion: "9"}},
				DeliveryCount: 1,
			},
			want: map[string]string{
				"aeg-subscription-name": "CUSTOM",
				"aeg-delivery-count":    "1",
				"aeg-metadata-version":  "1",
				"aeg-data-version":      "1.0",
				"aeg-output-event-id":   "c-1",
				"Content-Type":          schemas.ContentTypeJSON,
			},
		},
		{
			name: "custom delivery headers; protocol headers win; invalid ones dropped",
			batch: sinks.Batch{
				Topic: "orders", Subscription: "sub", Schema: schemas.EventGrid,
				Body: []byte(`[]`), ContentType: schemas.ContentTypeJSON,
				Events: []*schemas.Event{egEvent},
				Headers: map[string]string{
					"X-Api-Key":      "static-secret",
					"x-tenant":       "42",
					"Content-Type":   "text/plain",
					"Traceparent":    "not-this-one",
					"X-Bad-Value":    "line\nbreak",
					"Bad Name":       "v",
					"Aeg-Event-Type": "SubscriptionDeletion",
				},
			},
			want: map[string]string{
				"X-Api-Key":      "static-secret",
				"X-Tenant":       "42",
				"Content-Type":   schemas.ContentTypeJSON,
				"traceparent":    egEvent.Traceparent,
				"X-Bad-Value":    "",
				"aeg-event-type": "Notification",
			},
		},
		{
			name: "no content type given: schema default",
			batch: sinks.Batch{
				Subscription: "s", Schema: schemas.CloudEvents, Body: []byte(`[{},{}]`),
				Events: []*schemas.Event{ceEvent, ceEvent},
			},
			want: map[string]string{"Content-Type": schemas.ContentTypeCloudEventsBatch},
		},
		{
			name:  "unset schema is Event Grid; no events, empty body",
			batch: sinks.Batch{Subscription: "s"},
			want: map[string]string{
				"aeg-metadata-version": "1",
				"aeg-output-event-id":  "",
				"Content-Type":         schemas.ContentTypeJSON,
			},
		},
	}
	srv, seen := captureServer(t)
	s := newSink(t, webhook.Config{URL: srv.URL + "/api/updates?code=s3cret&x=1"}, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.Deliver(context.Background(), &tt.batch); err != nil {
				t.Fatalf("Deliver: %v", err)
			}
			got := <-seen
			if got.method != http.MethodPost {
				t.Errorf("method = %s; want POST", got.method)
			}
			if got.requestURI != "/api/updates?code=s3cret&x=1" {
				t.Errorf("request URI = %q; want the configured path and query", got.requestURI)
			}
			if !bytes.Equal(got.body, tt.batch.Body) {
				t.Errorf("body = %q; want %q", got.body, tt.batch.Body)
			}
			if got.contentLength != int64(len(tt.batch.Body)) {
				t.Errorf("Content-Length = %d; want %d", got.contentLength, len(tt.batch.Body))
			}
			for name, want := range tt.want {
				values := got.header.Values(name)
				switch {
				case want == "" && len(values) != 0:
					t.Errorf("header %s = %q; want it absent", name, values)
				case want != "" && (len(values) != 1 || values[0] != want):
					t.Errorf("header %s = %q; want exactly %q", name, values, want)
				}
			}
			if _, ok := got.header["Bad Name"]; ok {
				t.Errorf("header with an invalid name was sent")
			}
		})
	}
}

func TestDeliverStatus(t *testing.T) {
	const retryDate = "Wed, 21 Oct 2026 07:28:00 GMT"
	tests := []struct {
		status         int
		retryAfter     string // what the server sends
		wantOutcome    schemas.Outcome
		wantRetryAfter string
	}{
		{status: 200, wantOutcome: schemas.Delivered},
		{status: 201, wantOutcome: schemas.Delivered},
		{status: 202, wantOutcome: schemas.Delivered},
		{status: 203, wantOutcome: schemas.Delivered},
		{status: 204, wantOutcome: schemas.Delivered},
		{status: 205, wantOutcome: schemas.GenericError},
		{status: 301, wantOutcome: schemas.GenericError},
		{status: 307, wantOutcome: schemas.GenericError},
		{status: 400, wantOutcome: schemas.BadRequest},
		{status: 401, wantOutcome: schemas.Unauthorized},
		{status: 403, wantOutcome: schemas.Forbidden},
		{status: 404, wantOutcome: schemas.NotFound},
		{status: 408, wantOutcome: schemas.TimedOut},
		{status: 413, wantOutcome: schemas.PayloadTooLarge},
		{status: 414, wantOutcome: schemas.URITooLong},
		{status: 429, retryAfter: "7", wantOutcome: schemas.Busy, wantRetryAfter: "7"},
		{status: 429, wantOutcome: schemas.Busy},
		{status: 500, retryAfter: "7", wantOutcome: schemas.GenericError}, // Retry-After only on 429 and 503
		{status: 503, retryAfter: retryDate, wantOutcome: schemas.Busy, wantRetryAfter: retryDate},
	}
	var redirected atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, r *http.Request) { redirected.Add(1) })
	// The handler answers with the status and Retry-After its query string names.
	mux.HandleFunc("/hook", func(w http.ResponseWriter, r *http.Request) {
		status, err := strconv.Atoi(r.URL.Query().Get("status"))
		if err != nil {
			t.Errorf("bad status in %q", r.RequestURI)
			status = http.StatusTeapot
		}
		if ra := r.URL.Query().Get("retry"); ra != "" {
			w.Header().Set("Retry-After", ra)
		}
		if status >= 300 && status < 400 {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"error":"some body the sink must drain"}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	batch := &sinks.Batch{Subscription: "s", Body: []byte(`[]`)}

	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d %s", tt.status, tt.retryAfter), func(t *testing.T) {
			q := url.Values{"status": {strconv.Itoa(tt.status)}, "retry": {tt.retryAfter}}
			s := newSink(t, webhook.Config{URL: srv.URL + "/hook?" + q.Encode()}, nil)
			err := s.Deliver(context.Background(), batch)
			if tt.wantOutcome == schemas.Delivered {
				if err != nil {
					t.Fatalf("Deliver = %v; want nil for %d", err, tt.status)
				}
				return
			}
			var de *sinks.DeliveryError
			if !errors.As(err, &de) {
				t.Fatalf("Deliver = %v (%T); want a *sinks.DeliveryError", err, err)
			}
			if de.Outcome != tt.wantOutcome || de.StatusCode != tt.status || de.RetryAfter != tt.wantRetryAfter {
				t.Fatalf("Deliver = {%v, %d, %q}; want {%v, %d, %q}", de.Outcome, de.StatusCode, de.RetryAfter, tt.wantOutcome, tt.status, tt.wantRetryAfter)
			}
		})
	}
	if n := redirected.Load(); n != 0 {
		t.Fatalf("the shared client followed %d redirects; want none", n)
	}
}

// requireOutcome asserts err is a *sinks.DeliveryError with outcome want and no status code.
func requireOutcome(t *testing.T, err error, want schemas.Outcome) *sinks.DeliveryError {
	t.Helper()
	var de *sinks.DeliveryError
	if !errors.As(err, &de) {
		t.Fatalf("Deliver = %v (%T); want a *sinks.DeliveryError", err, err)
	}
	if de.Outcome != want || de.StatusCode != 0 {
		t.Fatalf("Deliver = %v (outcome %v, status %d); want outcome %v with no status", err, de.Outcome, de.StatusCode, want)
	}
	return de
}

func TestDeliverConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil { // nothing listens on addr now
		t.Fatal(err)
	}
	s := newSink(t, webhook.Config{URL: "http://" + addr + "/hook?code=s3cret"}, nil)
	err = s.Deliver(context.Background(), &sinks.Batch{Subscription: "s", Body: []byte(`[]`)})
	requireOutcome(t, err, schemas.SocketError)
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error %q repeats the URL's query string", err)
	}
}

// TestDeliverConnectionDropped covers an endpoint that accepts the connection and then closes
// it (gracefully, or with a reset) without answering.
func TestDeliverConnectionDropped(t *testing.T) {
	tests := []struct {
		name  string
		reset bool
	}{
		{name: "closed", reset: false},
		{name: "reset", reset: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					c, err := ln.Accept()
					if err != nil {
						return // listener closed at the end of the test
					}
					if tt.reset {
						_ = c.(*net.TCPConn).SetLinger(0)
					}
					_ = c.Close()
				}
			}()
			t.Cleanup(func() { _ = ln.Close(); <-done })
			// A client of its own, so no idle connection from another test is involved.
			client := &http.Client{Transport: &http.Transport{}}
			t.Cleanup(client.CloseIdleConnections)
			s := newSink(t, webhook.Config{URL: "http://" + ln.Addr().String() + "/"}, client)
			err = s.Deliver(context.Background(), &sinks.Batch{Subscription: "s", Body: []byte(`[]`)})
			requireOutcome(t, err, schemas.SocketError)
		})
	}
}

// blockingServer's handler reads the request, signals arrival on the returned channel, then
// blocks until the client goes away (the request's context ends) or the test ends — it never
// answers.
func blockingServer(t *testing.T) (*httptest.Server, <-chan struct{}) {
	t.Helper()
	arrived := make(chan struct{}, 1)
	testOver := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Reading the body to its end lets the server notice the client closing the connection.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case arrived <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
		case <-testOver:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(testOver) }) // runs before srv.Close
	return srv, arrived
}

func TestDeliverAttemptTimeout(t *testing.T) {
	srv, _ := blockingServer(t)
	// The handler never answers, so the only way Deliver returns is the attempt timeout.
	s := newSink(t, webhook.Config{URL: srv.URL, Timeout: 100 * time.Millisecond}, nil)
	err := s.Deliver(context.Background(), &sinks.Batch{Subscription: "s", Body: []byte(`[]`)})
	requireOutcome(t, err, schemas.TimedOut)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Deliver = %v; want it to wrap context.DeadlineExceeded", err)
	}
}

func TestDeliverCallerCancels(t *testing.T) {
	srv, arrived := blockingServer(t)
	s := newSink(t, webhook.Config{URL: srv.URL}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-arrived
		cancel()
	}()
	err := s.Deliver(ctx, &sinks.Batch{Subscription: "s", Body: []byte(`[]`)})
	requireOutcome(t, err, schemas.Canceled)
}

func TestDeliverCallerCancelledBefore(t *testing.T) {
	srv, _ := captureServer(t)
	s := newSink(t, webhook.Config{URL: srv.URL}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Deliver(ctx, &sinks.Batch{Subscription: "s", Body: []byte(`[]`)})
	requireOutcome(t, err, schemas.Canceled)
}

// noDNSClient returns a client whose resolver never contacts a DNS server: every lookup that
// /etc/hosts cannot answer fails inside the process. So a test for an unresolvable name
// sends nothing beyond 127.0.0.1, and fails the same way with or without a network. The
// counter tells how many DNS connections the resolver tried to open.
func noDNSClient(t *testing.T) (*http.Client, *atomic.Int32) {
	t.Helper()
	var attempts atomic.Int32
	resolver := &net.Resolver{
		PreferGo: true, // the pure Go resolver, which honours Dial (cgo's would not)
		Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			attempts.Add(1)
			return nil, errors.New("DNS is switched off in this test")
		},
	}
	dialer := &net.Dialer{Resolver: resolver}
	client := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
	t.Cleanup(client.CloseIdleConnections)
	return client, &attempts
}

func TestDeliverResolutionError(t *testing.T) {
	client, attempts := noDNSClient(t)
	// .invalid never resolves (RFC 6761); the resolver above makes sure no query leaves anyway.
	s := newSink(t, webhook.Config{URL: "http://egrid-test-endpoint.invalid/hook"}, client)
	err := s.Deliver(context.Background(), &sinks.Batch{Subscription: "s", Body: []byte(`[]`)})
	requireOutcome(t, err, schemas.ResolutionError)
	if attempts.Load() == 0 {
		t.Fatalf("the lookup never reached the resolver; the test did not exercise name resolution")
	}
}

// dialOnlyTo returns a transport that connects every request to addr, whatever host its URL
// names, so a test can present a wrong TLS server name without any DNS.
func dialOnlyTo(addr string, base *http.Transport) *http.Transport {
	tr := base.Clone()
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	return tr
}

func TestDeliverTLS(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the failing handshakes are expected
	srv.StartTLS()
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	trusting := srv.Client().Transport.(*http.Transport) // trusts the server's certificate
	tests := []struct {
		name      string
		url       string
		transport *http.Transport
		want      schemas.Outcome
	}{
		// httptest's certificate is for example.com and 127.0.0.1.
		{name: "trusted, right name", url: srv.URL, transport: trusting, want: schemas.Delivered},
		{name: "trusted, certificate name", url: "https://example.com:" + port + "/", transport: dialOnlyTo(addr, trusting), want: schemas.Delivered},
		{name: "name mismatch", url: "https://wrong-name.example.net:" + port + "/", transport: dialOnlyTo(addr, trusting), want: schemas.InvalidDestination},
		{name: "untrusted certificate", url: srv.URL, transport: &http.Transport{}, want: schemas.SocketError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := &http.Client{Transport: tt.transport}
			t.Cleanup(client.CloseIdleConnections)
			s := newSink(t, webhook.Config{URL: tt.url}, client)
			err := s.Deliver(context.Background(), &sinks.Batch{Subscription: "s", Body: []byte(`[]`)})
			if tt.want == schemas.Delivered {
				if err != nil {
					t.Fatalf("Deliver = %v; want nil", err)
				}
				return
			}
			requireOutcome(t, err, tt.want)
		})
	}
}

func TestDeliverReusesConnections(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Query().Get("n") == "odd" {
			w.WriteHeader(http.StatusServiceUnavailable) // failures must not cost the connection either
		}
		_, _ = io.WriteString(w, "a response body the sink drains")
	}))
	srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	even := newSink(t, webhook.Config{URL: srv.URL + "/?n=even"}, nil)
	odd := newSink(t, webhook.Config{URL: srv.URL + "/?n=odd"}, nil)
	batch := &sinks.Batch{Subscription: "s", Body: bytes.Repeat([]byte("x"), 1024)}
	for i := range 20 {
		s := even
		if i%2 == 1 {
			s = odd
		}
		err := s.Deliver(context.Background(), batch)
		if (err == nil) != (s == even) {
			t.Fatalf("delivery %d: Deliver = %v", i, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("20 sequential deliveries opened %d connections; want 1", n)
	}
}

// TestDeliverEarlyAnswer covers an endpoint that answers 413 before reading a large request
// and then neither reads nor closes: Deliver reports the status and returns, although the
// transport is still busy sending the body.
func TestDeliverEarlyAnswer(t *testing.T) {
	testOver := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		w.(http.Flusher).Flush()
		<-testOver // hold the connection open without reading the body
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(testOver) }) // runs before srv.Close
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	s := newSink(t, webhook.Config{URL: srv.URL}, client)
	body := bytes.Repeat([]byte("x"), 16<<20) // larger than the socket buffers
	err := s.Deliver(context.Background(), &sinks.Batch{Subscription: "s", Body: body})
	var de *sinks.DeliveryError
	if !errors.As(err, &de) || de.Outcome != schemas.PayloadTooLarge || de.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("Deliver = %v; want PayloadTooLarge (HTTP 413)", err)
	}
}

// lateReader is an http.RoundTripper that answers at once and keeps the request body, as
// net/http's transport may go on reading it after RoundTrip has returned (the RoundTripper
// contract allows that).
type lateReader struct {
	prefix []byte // what RoundTrip read before answering
	body   io.ReadCloser
	again  func() (io.ReadCloser, error)
}

func (l *lateReader) RoundTrip(req *http.Request) (*http.Response, error) {
	l.prefix = make([]byte, 4)
	if _, err := io.ReadFull(req.Body, l.prefix); err != nil {
		return nil, err
	}
	l.body, l.again = req.Body, req.GetBody
	return &http.Response{StatusCode: http.StatusRequestEntityTooLarge, Status: "413 Request Entity Too Large", Body: http.NoBody, Header: http.Header{}, Request: req}, nil
}

// TestDeliverReleasesBody checks the sinks.Sink buffer rule: once Deliver has returned, the
// request body no longer reads the batch's buffer. A small body is sent from a copy (a late
// read sees the copy, never what the caller writes into its buffer afterwards); a large one
// from a guard over the caller's buffer that fails every read after Deliver returned.
func TestDeliverReleasesBody(t *testing.T) {
	for _, tc := range []struct {
		name   string
		size   int
		copied bool
	}{
		{name: "small body, copied", size: 64, copied: true},
		{name: "large body, guarded", size: 1 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &lateReader{}
			s := newSink(t, webhook.Config{URL: "http://127.0.0.1:1/hook"}, &http.Client{Transport: rt})
			body := append([]byte(`[{"id":"1"}]`), bytes.Repeat([]byte(" "), tc.size-12)...)
			err := s.Deliver(context.Background(), &sinks.Batch{Subscription: "s", Body: body})
			if de := sinks.AsDeliveryError(err); de.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("Deliver = %v; want the 413 from the transport", err)
			}
			if string(rt.prefix) != `[{"i` {
				t.Fatalf("during the attempt the body read %q; want the batch's first bytes", rt.prefix)
			}
			for i := range body {
				body[i] = 'y' // the caller owns the buffer again
			}
			readers := map[string]io.Reader{"body": rt.body}
			if rt.again != nil {
				again, err := rt.again()
				if err != nil {
					t.Fatalf("GetBody after Deliver: %v", err)
				}
				readers["GetBody"] = again
			}
			for name, r := range readers {
				got, err := io.ReadAll(r)
				if bytes.IndexByte(got, 'y') >= 0 {
					t.Fatalf("%s read the caller's buffer after Deliver returned: %q", name, got)
				}
				if tc.copied && err != nil {
					t.Fatalf("%s: reading the copy after Deliver returned: %v", name, err)
				}
				if !tc.copied && (len(got) != 0 || err == nil) {
					t.Fatalf("%s read after Deliver returned %d bytes, %v; want 0 bytes and an error", name, len(got), err)
				}
			}
		})
	}
}

// Config.Origin is sent as the Origin header of every delivery (the CloudEvents webhook
// specification, section 4.1: after the abuse-protection handshake, requests carry the
// origin); without it no Origin goes out.
func TestDeliverOrigin(t *testing.T) {
	for _, origin := range []string{webhook.DefaultRequestOrigin, ""} {
		srv, seen := captureServer(t)
		s := newSink(t, webhook.Config{URL: srv.URL, Origin: origin}, nil)
		b := &sinks.Batch{Subscription: "s", Schema: schemas.CloudEvents, Body: []byte(`{}`), Events: []*schemas.Event{{ID: "1"}}}
		if err := s.Deliver(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		got := <-seen
		if v, ok := got.header["Origin"]; origin == "" && ok || origin != "" && (len(v) != 1 || v[0] != origin) {
			t.Errorf("Config.Origin %q: request Origin %v", origin, v)
		}
	}
}

// NotifyDeletion sends Event Grid's SubscriptionDeletion notification (eventgrid-behaviour.md
// §5.4): an Event Grid array of one Microsoft.EventGrid.SubscriptionDeletedEvent, or, for a
// CloudEvents subscription, one structured CloudEvent, with aeg-event-type
// SubscriptionDeletion and the static custom headers.
func TestNotifyDeletion(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const subID = "/subscriptions/x/resourceGroups/rg/providers/Microsoft.EventGrid/topics/orders/providers/Microsoft.EventGrid/eventSubscriptions/billing"
	for _, ce := range []bool{false, true} {
		srv, seen := captureServer(t)
		err := webhook.NotifyDeletion(context.Background(), nil, webhook.DeletionRequest{
			URL: srv.URL + "/hook", Subscription: "billing", SubscriptionID: subID, TopicID: "/t", EventID: "e1", Time: at,
			CloudEvents: ce, Origin: map[bool]string{true: webhook.DefaultRequestOrigin}[ce],
			Headers: sinks.HeaderMappings{{Name: "X-Key", Value: "v"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		got := <-seen
		want := `[{"id":"e1","topic":"/t","subject":"","data":{"eventSubscriptionId":"` + subID + `"},"eventType":"Microsoft.EventGrid.SubscriptionDeletedEvent","eventTime":"2026-01-02T03:04:05Z","metadataVersion":"1","dataVersion":"1"}]`
		ct, origin := schemas.ContentTypeJSON, ""
		if ce {
			want = `{"specversion":"1.0","type":"Microsoft.EventGrid.SubscriptionDeletedEvent","source":"/t","id":"e1","time":"2026-01-02T03:04:05Z","dataschema":"#1","datacontenttype":"application/json","data":{"eventSubscriptionId":"` + subID + `"}}`
			ct, origin = schemas.ContentTypeCloudEvent, webhook.DefaultRequestOrigin
		}
		if string(got.body) != want {
			t.Errorf("CloudEvents %v: body\n%s\nwant\n%s", ce, got.body, want)
		}
		for k, v := range map[string]string{"aeg-event-type": "SubscriptionDeletion", "aeg-subscription-name": "BILLING", "Content-Type": ct, "X-Key": "v", "Origin": origin} {
			if got.header.Get(k) != v {
				t.Errorf("CloudEvents %v: %s %q, want %q", ce, k, got.header.Get(k), v)
			}
		}
	}
}
