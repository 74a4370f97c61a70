package webhook_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/webhook"
)

// An endpoint that answers 200 and then streams its body without end gets each of its
// answers read up to the sink's bound (64 KB) and its connection closed: the attempt, and
// each handshake, ends there, not at the timeout, and the endpoint gets to write little more
// than what the sockets hold. These endpoints give up after endlessLimit and close the
// connection, so a client that reads on (the old directBody.Close drained chunked answers to
// their end) ends too, and fails on the bytes it let through.

const (
	endlessPiece = 1 << 20  // what the endpoint writes at a time
	endlessLimit = 64 << 20 // what it writes at most before it closes the connection
	// endlessBuffer is the size of the sockets' buffers at both ends, so what the endpoint
	// gets to write depends on what the client reads, not on the kernel's buffer tuning.
	endlessBuffer = 128 << 10
)

// endless is an endpoint that streams its answers' bodies without end.
type endless struct {
	url     string
	written atomic.Int64   // body bytes its writes took, all answers together
	busy    sync.WaitGroup // its answers being written
	tls     *tls.Config    // for the client of a TLS endpoint
}

// endlessH1 starts a 127.0.0.1 endpoint that reads a request, writes head and then body bytes
// (as chunks when chunked) until a write fails or it has written endlessLimit.
func endlessH1(t *testing.T, head string, chunked bool) *endless {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &endless{url: "http://" + ln.Addr().String() + "/hook"}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	piece := []byte(strings.Repeat("x", endlessPiece))
	if chunked {
		piece = []byte(fmt.Sprintf("%x\r\n%s\r\n", endlessPiece, piece))
	}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*net.TCPConn).SetWriteBuffer(endlessBuffer)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			e.busy.Add(1)
			wg.Go(func() {
				defer e.busy.Done()
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				if _, err := io.WriteString(c, head); err != nil {
					return
				}
				for e.written.Load() < endlessLimit {
					n, err := c.Write(piece)
					e.written.Add(int64(n))
					if err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return e
}

// endlessH2 starts a 127.0.0.1 TLS endpoint that speaks HTTP/2 and answers every request 200
// with body bytes until a write fails or it has written endlessLimit; with length set, the
// answer announces a Content-Length it never reaches.
func endlessH2(t *testing.T, length bool) *endless {
	t.Helper()
	e := new(endless)
	piece := []byte(strings.Repeat("x", endlessPiece))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.busy.Add(1)
		defer e.busy.Done()
		if r.ProtoMajor != 2 {
			http.Error(w, "want HTTP/2", http.StatusHTTPVersionNotSupported)
			return
		}
		w.Header().Set("WebHook-Allowed-Origin", "*")
		if length {
			w.Header().Set("Content-Length", "1000000000000")
		}
		flush := http.NewResponseController(w)
		for e.written.Load() < endlessLimit {
			n, err := w.Write(piece)
			e.written.Add(int64(n))
			if err != nil || flush.Flush() != nil {
				return
			}
		}
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	e.url = srv.URL + "/hook"
	e.tls = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	return e
}

// endlessCalls are the exchanges whose answers the sink reads: deliveries (a body of at most
// 16 KiB goes on the direct path over plain http, a larger one through net/http's Transport)
// and the three handshakes. Each returns what is wrong with the outcome, or "".
var endlessCalls = []struct {
	name string
	call func(ctx context.Context, client *http.Client, url string) string
}{
	{name: "delivery", call: func(ctx context.Context, client *http.Client, url string) string {
		return deliverTo(ctx, client, url, smallBatch)
	}},
	{name: "large delivery", call: func(ctx context.Context, client *http.Client, url string) string {
		large := &sinks.Batch{Subscription: "s", Body: []byte(`["` + strings.Repeat("e", 20<<10) + `"]`)}
		return deliverTo(ctx, client, url, large)
	}},
	{name: "OPTIONS handshake", call: func(ctx context.Context, client *http.Client, url string) string {
		if _, err := webhook.RequestDelivery(ctx, client, webhook.AbuseProtectionRequest{URL: url, Timeout: time.Hour}); err != nil {
			return fmt.Sprintf("RequestDelivery = %v; want nil", err)
		}
		return ""
	}},
	{name: "validation handshake", call: func(ctx context.Context, client *http.Client, url string) string {
		// 64 KB of a body that is not {"validationResponse": ...}: no code in it.
		if v, err := webhook.ValidateSubscription(ctx, client, webhook.ValidationRequest{URL: url, Code: "c", Timeout: time.Hour}); err != nil || v != webhook.AwaitingManualAction {
			return fmt.Sprintf("ValidateSubscription = %v, %v; want AwaitingManualAction, nil", v, err)
		}
		return ""
	}},
	{name: "deletion notice", call: func(ctx context.Context, client *http.Client, url string) string {
		if err := webhook.NotifyDeletion(ctx, client, webhook.DeletionRequest{URL: url, Subscription: "s", EventID: "d-1", Timeout: time.Hour}); err != nil {
			return fmt.Sprintf("NotifyDeletion = %v; want nil", err)
		}
		return ""
	}},
}

func deliverTo(ctx context.Context, client *http.Client, url string, b *sinks.Batch) string {
	s, err := webhook.New(webhook.Config{URL: url, Timeout: time.Hour}, client)
	if err != nil {
		return err.Error()
	}
	if err := s.Deliver(ctx, b); err != nil {
		return fmt.Sprintf("Deliver = %v; want nil", err)
	}
	return ""
}

// runEndless makes call to e with a client as NewClient makes it whose connections have
// small receive buffers, and waits for e to stop writing: the client closes idle connections
// (one put back in its pool would not end e's write), and e's writes fail once the client
// has closed the connection, or e gives up at endlessLimit. By then e must have written less
// than most.
func runEndless(t *testing.T, e *endless, most int64, call func(context.Context, *http.Client, string) string) {
	t.Helper()
	client := webhook.NewClient(func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			_ = conn.(*net.TCPConn).SetReadBuffer(endlessBuffer)
		}
		return conn, err
	})
	if e.tls != nil {
		webhook.TrustTLS(client, e.tls)
	}
	if problem := call(t.Context(), client, e.url); problem != "" {
		t.Error(problem)
	}
	client.CloseIdleConnections()
	e.busy.Wait()
	if n := e.written.Load(); n >= most {
		t.Fatalf("the endpoint wrote %d bytes of its body before the answer was closed; want less than %d (the sink reads 64 KB)", n, most)
	}
}

func TestEndlessAnswerIsCutAtItsBound(t *testing.T) {
	const allow = "WebHook-Allowed-Origin: *\r\n"
	bodies := []struct {
		name    string
		head    string
		chunked bool
	}{
		{name: "chunked", head: "HTTP/1.1 200 OK\r\n" + allow + "Transfer-Encoding: chunked\r\n\r\n", chunked: true},
		{name: "Content-Length", head: "HTTP/1.1 200 OK\r\n" + allow + "Content-Length: 1000000000000\r\n\r\n"},
		// A Pragma header leaves the head to http.ReadResponse, whose body reads on to the
		// Content-Length when closed.
		{name: "Content-Length, net/http's reader", head: "HTTP/1.1 200 OK\r\n" + allow + "Pragma: no-cache\r\nContent-Length: 1000000000000\r\n\r\n"},
		{name: "until the connection closes", head: "HTTP/1.1 200 OK\r\n" + allow + "\r\n"},
	}
	for _, body := range bodies {
		for _, c := range endlessCalls {
			t.Run("HTTP/1.1 "+body.name+"/"+c.name, func(t *testing.T) {
				runEndless(t, endlessH1(t, body.head, body.chunked), 4<<20, c.call)
			})
		}
	}
	for _, length := range []bool{false, true} {
		name := "HTTP/2"
		if length {
			name += " Content-Length"
		}
		for _, c := range endlessCalls {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				// The client's HTTP/2 stream window lets the endpoint send 4 MiB unread.
				runEndless(t, endlessH2(t, length), 16<<20, c.call)
			})
		}
	}
}
