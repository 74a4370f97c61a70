package testkit

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"syscall"
)

// Transport is an http.RoundTripper that serves requests with in-memory http.Handlers by host,
// without sockets, so HTTP works inside a synctest bubble. A host without a handler fails like
// a DNS lookup that finds nothing; [Transport.Refuse] makes a host fail like a refused
// connection.
type Transport struct {
	mu       sync.Mutex
	handlers map[string]http.Handler
	refused  map[string]bool
}

// NewTransport returns an empty transport.
func NewTransport() *Transport {
	return &Transport{handlers: make(map[string]http.Handler), refused: make(map[string]bool)}
}

// Handle serves host (as in the URL, e.g. "hook.test") with h.
func (t *Transport) Handle(host string, h http.Handler) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.handlers[host] = h
	delete(t.refused, host)
}

// Refuse makes connections to host fail as refused (SocketError).
func (t *Transport) Refuse(host string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refused[host] = true
}

// RoundTrip implements http.RoundTripper. The handler runs in the caller's goroutine and sees
// the request's context, so a handler that waits for ctx.Done() models a timeout.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.mu.Lock()
	h, ok := t.handlers[req.URL.Host]
	refused := t.refused[req.URL.Host]
	t.mu.Unlock()
	if refused {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	}
	if !ok {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: req.URL.Hostname(), IsNotFound: true}}
	}
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	sreq := req.Clone(req.Context())
	sreq.Body = io.NopCloser(bytes.NewReader(body))
	sreq.ContentLength = int64(len(body))
	sreq.RequestURI = req.URL.RequestURI()
	sreq.RemoteAddr = "127.0.0.1:1"
	sreq.Host = req.URL.Host
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, sreq)
	if err := req.Context().Err(); err != nil {
		return nil, fmt.Errorf("round trip to %s: %w", req.URL.Host, err)
	}
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}
