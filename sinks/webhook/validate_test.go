package webhook_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/webhook"
)

// validationServer answers the SubscriptionValidation event with answer(code) and records the
// request.
func validationServer(t *testing.T, answer func(w http.ResponseWriter, code string)) (*httptest.Server, <-chan captured) {
	t.Helper()
	seen := make(chan captured, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		seen <- captured{method: r.Method, requestURI: r.RequestURI, header: r.Header.Clone(), body: body}
		var evs []struct {
			Data struct {
				ValidationCode string `json:"validationCode"`
			} `json:"data"`
		}
		_ = json.Unmarshal(body, &evs)
		code := ""
		if len(evs) == 1 {
			code = evs[0].Data.ValidationCode
		}
		answer(w, code)
	}))
	t.Cleanup(srv.Close)
	return srv, seen
}

func TestValidateSubscription(t *testing.T) {
	echo := func(w http.ResponseWriter, code string) {
		_, _ = io.WriteString(w, `{"validationResponse":"`+code+`"}`)
	}
	tests := []struct {
		name      string
		answer    func(w http.ResponseWriter, code string)
		want      webhook.Validation
		status    int  // of the *HandshakeError; 0 with want set
		transient bool // of the *HandshakeError
	}{
		{name: "echoes the code", answer: echo, want: webhook.Validated},
		{name: "200 without the code", answer: func(w http.ResponseWriter, _ string) { _, _ = io.WriteString(w, `{}`) }, want: webhook.AwaitingManualAction},
		{name: "200 with an empty body", answer: func(http.ResponseWriter, string) {}, want: webhook.AwaitingManualAction},
		{name: "capitalised property is not the code", answer: func(w http.ResponseWriter, code string) {
			_, _ = io.WriteString(w, `{"ValidationResponse":"`+code+`"}`)
		}, want: webhook.AwaitingManualAction},
		{name: "a wrong code refuses", answer: func(w http.ResponseWriter, _ string) { _, _ = io.WriteString(w, `{"validationResponse":"nope"}`) }, status: 200},
		{name: "202 is not accepted", answer: func(w http.ResponseWriter, code string) {
			w.WriteHeader(http.StatusAccepted)
			_, _ = io.WriteString(w, `{"validationResponse":"`+code+`"}`)
		}, status: 202},
		{name: "403 refuses", answer: func(w http.ResponseWriter, _ string) { w.WriteHeader(http.StatusForbidden) }, status: 403},
		{name: "503 may pass", answer: func(w http.ResponseWriter, _ string) { w.WriteHeader(http.StatusServiceUnavailable) }, status: 503, transient: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, seen := validationServer(t, tt.answer)
			vr := webhook.ValidationRequest{
				URL: srv.URL + "/hook?code=s3cret", Subscription: "billing", TopicID: "/topics/orders", EventID: "v-1",
				Code: "512d38b6-c7b8-40c8-89fe-f46f9e9622b6", ValidationURL: "https://egrid.test/eventsubscriptions/billing/validate?token=t",
				Time:    time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
				Headers: sinks.HeaderMappings{{Name: "Authorization", Value: "Bearer k"}, {Name: "X-Dyn", SourceField: "data.x"}},
			}
			got, err := webhook.ValidateSubscription(context.Background(), nil, vr)
			req := <-seen
			if req.method != http.MethodPost || req.requestURI != "/hook?code=s3cret" {
				t.Errorf("request %s %s; want POST to the endpoint URL with its query string", req.method, req.requestURI)
			}
			for k, v := range map[string]string{
				"aeg-event-type": "SubscriptionValidation", "aeg-subscription-name": "BILLING", "Content-Type": "application/json; charset=utf-8",
				"Authorization": "Bearer k", "X-Dyn": "",
			} {
				if req.header.Get(k) != v {
					t.Errorf("header %s = %q; want %q", k, req.header.Get(k), v)
				}
			}
			want := `[{"id":"v-1","topic":"/topics/orders","subject":"","data":{"validationCode":"512d38b6-c7b8-40c8-89fe-f46f9e9622b6",` +
				`"validationUrl":"https://egrid.test/eventsubscriptions/billing/validate?token=t"},"eventType":"Microsoft.EventGrid.SubscriptionValidationEvent",` +
				`"eventTime":"2026-01-02T03:04:05Z","metadataVersion":"1","dataVersion":"1"}]`
			if string(req.body) != want {
				t.Errorf("body\n%s\nwant\n%s", req.body, want)
			}
			if tt.want != 0 {
				if err != nil || got != tt.want {
					t.Fatalf("ValidateSubscription = %v, %v; want %v", got, err, tt.want)
				}
				return
			}
			var he *webhook.HandshakeError
			if !errors.As(err, &he) || he.StatusCode != tt.status || he.Transient() != tt.transient {
				t.Fatalf("ValidateSubscription = %v, %v; want a *HandshakeError with status %d, transient %v", got, err, tt.status, tt.transient)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error %q shows the endpoint's query string", err)
			}
		})
	}
}

func TestValidateSubscriptionNoAnswer(t *testing.T) {
	srv, _ := blockingServer(t)
	_, err := webhook.ValidateSubscription(context.Background(), nil, webhook.ValidationRequest{URL: srv.URL + "/?key=s3cret", Code: "c", Timeout: 50 * time.Millisecond})
	var he *webhook.HandshakeError
	if !errors.As(err, &he) || he.Outcome != schemas.TimedOut || !he.Transient() {
		t.Fatalf("ValidateSubscription against a silent endpoint = %v; want a transient TimedOut *HandshakeError", err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error %q shows the endpoint's query string", err)
	}
	srv.Close()
	_, err = webhook.ValidateSubscription(context.Background(), nil, webhook.ValidationRequest{URL: srv.URL, Code: "c"})
	if !errors.As(err, &he) || he.Outcome != schemas.SocketError || !he.Transient() {
		t.Fatalf("ValidateSubscription against a closed port = %v; want a transient SocketError *HandshakeError", err)
	}
}

func TestRequestDelivery(t *testing.T) {
	tests := []struct {
		name     string
		status   int
		header   map[string]string
		wantRate int
		refused  bool
	}{
		{name: "echoed origin", status: 200, header: map[string]string{"WebHook-Allowed-Origin": "eventgrid.azure.net"}},
		{name: "any origin with a rate", status: 200, header: map[string]string{"WebHook-Allowed-Origin": "*", "WebHook-Allowed-Rate": "120"}, wantRate: 120},
		{name: "unlimited rate", status: 200, header: map[string]string{"WebHook-Allowed-Origin": "*", "WebHook-Allowed-Rate": "*"}},
		{name: "origin ignores case", status: 204, header: map[string]string{"WebHook-Allowed-Origin": "EventGrid.Azure.Net"}},
		{name: "status alone is not consent", status: 200, refused: true},
		{name: "another origin", status: 200, header: map[string]string{"WebHook-Allowed-Origin": "example.com"}, refused: true},
		{name: "OPTIONS not supported", status: 405, header: map[string]string{"WebHook-Allowed-Origin": "*"}, refused: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got *http.Request
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got = r.Clone(context.Background())
				for k, v := range tt.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tt.status)
			}))
			defer srv.Close()
			rate, err := webhook.RequestDelivery(context.Background(), nil, webhook.AbuseProtectionRequest{
				URL: srv.URL + "/ce?sig=s3cret", Headers: sinks.HeaderMappings{{Name: "X-Key", Value: "k"}},
			})
			if got.Method != http.MethodOptions || got.URL.RequestURI() != "/ce?sig=s3cret" || got.Header.Get("WebHook-Request-Origin") != webhook.DefaultRequestOrigin || got.Header.Get("X-Key") != "k" {
				t.Errorf("request %s %s with %v; want OPTIONS to the endpoint with WebHook-Request-Origin and the static headers", got.Method, got.URL.RequestURI(), got.Header)
			}
			if tt.refused {
				var he *webhook.HandshakeError
				if !errors.As(err, &he) || he.Transient() {
					t.Fatalf("RequestDelivery = %d, %v; want a permanent *HandshakeError", rate, err)
				}
				if strings.Contains(err.Error(), "s3cret") {
					t.Errorf("error %q shows the endpoint's query string", err)
				}
				return
			}
			if err != nil || rate != tt.wantRate {
				t.Fatalf("RequestDelivery = %d, %v; want %d, nil", rate, err, tt.wantRate)
			}
		})
	}
}

func TestDeliverCustomHeaders(t *testing.T) {
	srv, seen := captureServer(t)
	s := newSink(t, webhook.Config{URL: srv.URL, Headers: sinks.HeaderMappings{
		{Name: "Authorization", Value: "Bearer k"},
		{Name: "X-Tenant", SourceField: "data.tenant"},
		{Name: "X-Missing", SourceField: "data.nothing"},
	}}, nil)
	first := &schemas.Event{ID: "e1", Raw: []byte(`{"id":"e1","data":{"tenant":"contoso"}}`)}
	second := &schemas.Event{ID: "e2", Raw: []byte(`{"id":"e2","data":{"tenant":"fabrikam"}}`)}
	err := s.Deliver(context.Background(), &sinks.Batch{
		Subscription: "s", Body: []byte(`[]`), Events: []*schemas.Event{first, second},
		Headers: map[string]string{"X-From-Batch": "b", "Authorization": "from the batch", "aeg-event-type": "Forged"},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := (<-seen).header
	for k, want := range map[string]string{
		"Authorization": "Bearer k", "X-Tenant": "contoso", "X-From-Batch": "b", "aeg-event-type": "Notification", "X-Missing": "",
	} {
		if got := h.Get(k); got != want {
			t.Errorf("%s = %q; want %q (dynamic values come from the first event; the sink's headers win over the batch's; protocol headers over both)", k, got, want)
		}
	}
}

// handlerTransport serves requests with an http.Handler in memory, so HTTP runs inside a
// synctest bubble.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body.Close()
	}
	sreq := req.Clone(req.Context())
	sreq.Body = io.NopCloser(bytes.NewReader(body))
	sreq.RequestURI = req.URL.RequestURI()
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, sreq)
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	return rec.Result(), nil
}

func TestDeliverPacesToAllowedRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var mu sync.Mutex
		var at []time.Duration
		client := &http.Client{Transport: handlerTransport{http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			mu.Lock()
			at = append(at, time.Since(start))
			mu.Unlock()
		})}}
		s := newSink(t, webhook.Config{URL: "http://hook.test/", MaxRequestsPerMinute: 30}, client)
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				if err := s.Deliver(context.Background(), &sinks.Batch{Body: []byte(`[]`)}); err != nil {
					t.Errorf("Deliver: %v", err)
				}
			})
		}
		wg.Wait()
		want := []time.Duration{0, 2 * time.Second, 4 * time.Second} // 30 per minute: one every 2 s
		if len(at) != 3 || at[0] != want[0] || at[1] != want[1] || at[2] != want[2] {
			t.Errorf("requests at %v; want %v", at, want)
		}

		// A caller that gives up while waiting for its turn sends nothing.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = s.Deliver(context.Background(), &sinks.Batch{Body: []byte(`[]`)}) // takes the next turn
		err := s.Deliver(ctx, &sinks.Batch{Body: []byte(`[]`)})
		requireOutcome(t, err, schemas.TimedOut)
		if len(at) != 4 {
			t.Errorf("%d requests; want 4 (the one that timed out waiting is not sent)", len(at))
		}
	})
}

// TestDeliverGivesBackAnAbandonedTurn: a caller that gives up while waiting hands its turn to
// the next caller, so the cap is not spent on requests that were never sent.
func TestDeliverGivesBackAnAbandonedTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var mu sync.Mutex
		var at []time.Duration
		client := &http.Client{Transport: handlerTransport{http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			mu.Lock()
			at = append(at, time.Since(start))
			mu.Unlock()
		})}}
		s := newSink(t, webhook.Config{URL: "http://hook.test/", MaxRequestsPerMinute: 30}, client)
		if err := s.Deliver(context.Background(), &sinks.Batch{Body: []byte(`[]`)}); err != nil { // t=0, the next turn is at 2 s
			t.Fatalf("Deliver: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		// Takes the 2 s turn and gives up at 1 s.
		requireOutcome(t, s.Deliver(ctx, &sinks.Batch{Body: []byte(`[]`)}), schemas.TimedOut)
		if elapsed := time.Since(start); elapsed != time.Second {
			t.Fatalf("the abandoned Deliver returned at %v; want 1s, when its context ended", elapsed)
		}
		if err := s.Deliver(context.Background(), &sinks.Batch{Body: []byte(`[]`)}); err != nil {
			t.Fatalf("Deliver: %v", err)
		}
		want := []time.Duration{0, 2 * time.Second} // the abandoned 2 s turn, not 4 s
		if len(at) != 2 || at[0] != want[0] || at[1] != want[1] {
			t.Errorf("requests at %v; want %v", at, want)
		}
	})
}

// pipeClient returns a client as NewClient makes it whose every connection is an in-memory
// pipe served by serve, so a test runs in a synctest bubble and its timeouts pass in virtual
// time. Its idle connections are closed at the end of the test.
func pipeClient(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) *http.Client {
	t.Helper()
	c := webhook.NewClient(func(ctx context.Context, _, _ string) (net.Conn, error) {
		client, server := net.Pipe()
		go func() {
			defer server.Close()
			serve(server, bufio.NewReader(server))
		}()
		return client, nil
	})
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// answerThen reads one request, writes answer and then does what rest says: "stall" reads
// until the client closes the connection, "close" closes it at once.
func answerThen(answer, rest string) func(c net.Conn, br *bufio.Reader) {
	return func(c net.Conn, br *bufio.Reader) {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		if _, err := io.WriteString(c, answer); err != nil || rest == "close" {
			return
		}
		_, _ = io.Copy(io.Discard, c) // the client's close ends it
	}
}

// An answer to the SubscriptionValidation event whose body stops short — the endpoint trickles
// it past the timeout, or closes the connection — is no answer: a transient failure with the
// outcome that ended it, not a 200 without validationResponse, which would make the
// subscription wait for a manual validation the endpoint never meant.
func TestValidateSubscriptionIncompleteBody(t *testing.T) {
	const head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n"
	for _, tc := range []struct {
		name string
		rest string
		want schemas.Outcome
	}{
		{name: "stalls past the timeout", rest: "stall", want: schemas.TimedOut},
		{name: "closes the connection", rest: "close", want: schemas.SocketError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				client := pipeClient(t, answerThen(head+`{"validationRes`, tc.rest))
				v, err := webhook.ValidateSubscription(t.Context(), client, webhook.ValidationRequest{
					URL: "http://hook.test/?key=s3cret", Code: "c", Timeout: 30 * time.Second,
				})
				var he *webhook.HandshakeError
				if !errors.As(err, &he) || he.Outcome != tc.want || !he.Transient() {
					t.Fatalf("ValidateSubscription = %v, %v; want a transient %v *HandshakeError", v, err, tc.want)
				}
				if strings.Contains(err.Error(), "s3cret") {
					t.Errorf("error %q shows the endpoint's query string", err)
				}
			})
		})
	}
}

// The OPTIONS abuse-protection answer and the SubscriptionDeletion answer are complete at
// their heads: a body the endpoint never finishes does not hold them until the timeout.
func TestHandshakesDoNotWaitForABodyTheyIgnore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := pipeClient(t, answerThen("HTTP/1.1 200 OK\r\nWebHook-Allowed-Origin: *\r\nWebHook-Allowed-Rate: 60\r\nContent-Length: 10\r\n\r\nab", "stall"))
		start := time.Now()
		rate, err := webhook.RequestDelivery(t.Context(), client, webhook.AbuseProtectionRequest{URL: "http://hook.test/", Timeout: 30 * time.Second})
		if err != nil || rate != 60 {
			t.Fatalf("RequestDelivery = %d, %v; want 60, nil", rate, err)
		}
		if took := time.Since(start); took != 0 {
			t.Fatalf("RequestDelivery took %s of virtual time; want 0 (the answer's head is the answer)", took)
		}
		start = time.Now()
		err = webhook.NotifyDeletion(t.Context(), client, webhook.DeletionRequest{URL: "http://hook.test/", Subscription: "s", EventID: "d-1", Timeout: 30 * time.Second})
		if err != nil {
			t.Fatalf("NotifyDeletion = %v; want nil", err)
		}
		if took := time.Since(start); took != 0 {
			t.Fatalf("NotifyDeletion took %s of virtual time; want 0 (the answer's head is the answer)", took)
		}
	})
}
