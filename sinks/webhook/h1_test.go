package webhook_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/webhook"
)

// The clients NewClient makes send small plain-http requests on connections of their own,
// on the caller's goroutine (sinks/webhook/h1.go). These tests script the endpoint on raw TCP
// to reach the cases an http.Server never makes on its own.

// scriptedServer accepts connections on 127.0.0.1 and runs serve on each; it counts the
// connections and the requests serve reads with readRequest.
type scriptedServer struct {
	ln       net.Listener
	conns    atomic.Int32
	requests atomic.Int32
	wg       sync.WaitGroup
}

func newScriptedServer(t *testing.T, serve func(s *scriptedServer, c net.Conn, br *bufio.Reader)) *scriptedServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &scriptedServer{ln: ln}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed at the end of the test
			}
			s.conns.Add(1)
			s.wg.Go(func() {
				defer c.Close()
				serve(s, c, bufio.NewReader(c))
			})
		}
	})
	t.Cleanup(func() { _ = ln.Close(); s.wg.Wait() })
	return s
}

// readRequest reads one request and its body; false at the end of the connection.
func (s *scriptedServer) readRequest(br *bufio.Reader) bool {
	req, err := http.ReadRequest(br)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, req.Body)
	s.requests.Add(1)
	return true
}

func (s *scriptedServer) url() string { return "http://" + s.ln.Addr().String() + "/hook" }

// ownClient returns a client as NewClient makes it, with a pool of its own.
func ownClient(t *testing.T) *http.Client {
	c := webhook.NewClient((&net.Dialer{}).DialContext)
	t.Cleanup(c.CloseIdleConnections)
	return c
}

const ok200 = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"

var smallBatch = &sinks.Batch{Subscription: "s", Body: []byte(`[{"id":"1"}]`)}

// An endpoint that closes a kept-alive connection while it is idle (its keep-alive timeout)
// costs no attempt: the request is sent again on a new connection.
func TestDirectResendsOnAConnectionClosedWhileIdle(t *testing.T) {
	closed := make(chan struct{})
	srv := newScriptedServer(t, func(s *scriptedServer, c net.Conn, br *bufio.Reader) {
		if !s.readRequest(br) {
			return
		}
		_, _ = io.WriteString(c, ok200)
		if s.conns.Load() == 1 {
			// The first connection: answered once, then closed, as after a keep-alive timeout.
			_ = c.Close()
			close(closed)
			return
		}
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if body, _ := io.ReadAll(req.Body); string(body) != string(smallBatch.Body) {
				t.Errorf("the endpoint read the body %q; want the batch's %q", body, smallBatch.Body)
			}
			s.requests.Add(1)
			_, _ = io.WriteString(c, ok200)
		}
	})
	sink := newSink(t, webhook.Config{URL: srv.url()}, ownClient(t))
	if err := sink.Deliver(t.Context(), smallBatch); err != nil {
		t.Fatalf("first delivery: %v", err)
	}
	<-closed
	for i := range 3 {
		if err := sink.Deliver(t.Context(), smallBatch); err != nil {
			t.Fatalf("delivery %d after the endpoint closed the idle connection: %v", i+2, err)
		}
	}
	if n, r := srv.conns.Load(), srv.requests.Load(); n != 2 || r != 4 {
		t.Fatalf("%d connections and %d requests seen; want 2 and 4 (the rest on the second connection)", n, r)
	}
}

// A request is sent once more only on a connection from the pool that ended before any byte
// of an answer: a new connection that ends, or an answer cut off, is the attempt's failure.
func TestDirectDoesNotResendOtherwise(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after string // what the endpoint writes after reading the request, then it closes
	}{
		{name: "new connection closed", after: ""},
		{name: "answer cut off", after: "HTTP/1.1 200"},
		{name: "head without body", after: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newScriptedServer(t, func(s *scriptedServer, c net.Conn, br *bufio.Reader) {
				if s.readRequest(br) {
					_, _ = io.WriteString(c, tc.after)
				}
			})
			sink := newSink(t, webhook.Config{URL: srv.url()}, ownClient(t))
			err := sink.Deliver(t.Context(), smallBatch)
			if tc.name == "head without body" {
				// The status counts; the body's end is lost with the connection.
				if err != nil {
					t.Fatalf("Deliver = %v; want delivered (the 200 arrived)", err)
				}
			} else {
				requireOutcome(t, err, schemas.SocketError)
			}
			if r := srv.requests.Load(); r != 1 {
				t.Fatalf("the endpoint read %d requests; want 1", r)
			}
		})
	}
}

// What ends a connection in net/http's client ends it here too: "Connection: close" from the
// endpoint, an HTTP/1.0 answer, and a body longer than the sink drains.
func TestDirectClosesWhatCannotBeReused(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		reused       bool
	}{
		{name: "keep-alive", answer: ok200, reused: true},
		{name: "Connection: close", answer: "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"},
		{name: "HTTP/1.0", answer: "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"},
		{name: "body longer than drained", answer: "HTTP/1.1 200 OK\r\nContent-Length: 70000\r\n\r\n" + strings.Repeat("x", 70000)},
		{name: "body until close", answer: "HTTP/1.1 200 OK\r\n\r\nall of it"},
		{name: "an answer nobody asked for", answer: ok200 + ok200},
		{name: "101 Switching Protocols", answer: "HTTP/1.1 101 Switching Protocols\r\nUpgrade: other\r\nConnection: Upgrade\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newScriptedServer(t, func(s *scriptedServer, c net.Conn, br *bufio.Reader) {
				for s.readRequest(br) {
					_, err := io.WriteString(c, tc.answer)
					if err != nil || !strings.HasPrefix(tc.answer, "HTTP/1.1 200 OK\r\nC") && !strings.HasPrefix(tc.answer, "HTTP/1.1 101") {
						return // an answer delimited by the end of the connection
					}
				}
			})
			sink := newSink(t, webhook.Config{URL: srv.url()}, ownClient(t))
			for i := range 3 {
				if err := sink.Deliver(t.Context(), smallBatch); err != nil && !strings.Contains(tc.name, "101") {
					t.Fatalf("delivery %d: %v", i+1, err)
				}
			}
			want := int32(3)
			if tc.reused {
				want = 1
			}
			if n := srv.conns.Load(); n != want {
				t.Fatalf("3 deliveries opened %d connections; want %d", n, want)
			}
		})
	}
}

// Informational answers before the real one are skipped, as net/http's client skips them.
func TestDirectSkipsInformationalAnswers(t *testing.T) {
	srv := newScriptedServer(t, func(s *scriptedServer, c net.Conn, br *bufio.Reader) {
		for s.readRequest(br) {
			_, _ = io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"+
				"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 7\r\nContent-Length: 0\r\n\r\n")
		}
	})
	sink := newSink(t, webhook.Config{URL: srv.url()}, ownClient(t))
	var de *sinks.DeliveryError
	if err := sink.Deliver(t.Context(), smallBatch); !errors.As(err, &de) || de.Outcome != schemas.Busy || de.StatusCode != http.StatusServiceUnavailable || de.RetryAfter != "7" {
		t.Fatalf("Deliver = %+v; want the 503 after the 1xx answers, Retry-After 7", de)
	}
}

// The caller's context ends an attempt waiting for its answer at once, and the connection,
// with an answer perhaps still on its way, is closed rather than reused.
func TestDirectCancelClosesTheConnection(t *testing.T) {
	arrived := make(chan struct{})
	ended := make(chan error, 1)
	srv := newScriptedServer(t, func(s *scriptedServer, c net.Conn, br *bufio.Reader) {
		if !s.readRequest(br) {
			return
		}
		close(arrived)
		_, err := br.ReadByte() // never answers: waits for the client to go away
		ended <- err
	})
	sink := newSink(t, webhook.Config{URL: srv.url()}, ownClient(t))
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-arrived
		cancel()
	}()
	requireOutcome(t, sink.Deliver(ctx, smallBatch), schemas.Canceled)
	if err := <-ended; !errors.Is(err, io.EOF) {
		t.Fatalf("the endpoint's read after the cancel = %v; want EOF (the connection closed)", err)
	}
}

// A header value that would start a new header line is refused before anything is sent.
func TestDirectRefusesAnInjectedHeader(t *testing.T) {
	srv := newScriptedServer(t, func(s *scriptedServer, c net.Conn, br *bufio.Reader) {
		for s.readRequest(br) {
			_, _ = io.WriteString(c, ok200)
		}
	})
	client := ownClient(t)
	req, err := http.NewRequest(http.MethodPost, srv.url(), strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header["X-Evil"] = []string{"a\r\nX-Injected: 1"}
	if resp, err := client.Do(req); err == nil {
		_ = resp.Body.Close()
		t.Fatal("a request with a CR LF in a header value was sent")
	}
	if n := srv.conns.Load(); n != 0 {
		t.Fatalf("the endpoint saw %d connections; want none", n)
	}
}

// A body over 16 KiB stays with net/http's Transport, which writes it while it already reads
// the answer: an endpoint answering 413 before it has read a large request gets its answer
// seen (the direct pool writes the whole request first).
func TestDirectLeavesLargeBodiesToNetHTTP(t *testing.T) {
	testOver := make(chan struct{})
	srv := newScriptedServer(t, func(s *scriptedServer, c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 413 Request Entity Too Large\r\nContent-Length: 0\r\n\r\n")
		<-testOver // neither reads the body nor closes
	})
	t.Cleanup(func() { close(testOver) })
	sink := newSink(t, webhook.Config{URL: srv.url()}, ownClient(t))
	body := make([]byte, 16<<20) // larger than the socket buffers
	var de *sinks.DeliveryError
	if err := sink.Deliver(t.Context(), &sinks.Batch{Subscription: "s", Body: body}); !errors.As(err, &de) || de.Outcome != schemas.PayloadTooLarge || de.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("Deliver = %+v; want HTTP 413", de)
	}
}

// A refused connection and an address the egress policy denies are reported as with
// net/http's client.
func TestDirectDialErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	sink := newSink(t, webhook.Config{URL: "http://" + addr + "/"}, ownClient(t))
	requireOutcome(t, sink.Deliver(t.Context(), smallBatch), schemas.SocketError)

	denied := webhook.NewClient(func(ctx context.Context, network, addr string) (net.Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: network, Err: sinks.ErrDestinationDenied}
	})
	sink = newSink(t, webhook.Config{URL: "http://" + addr + "/"}, denied)
	requireOutcome(t, sink.Deliver(t.Context(), smallBatch), schemas.InvalidDestination)
}

// The attempt timeout bounds the direct round trip, and reads as a timeout.
func TestDirectAttemptTimeout(t *testing.T) {
	srv := newScriptedServer(t, func(s *scriptedServer, c net.Conn, br *bufio.Reader) {
		s.readRequest(br)
		_, _ = br.ReadByte() // never answers
	})
	sink := newSink(t, webhook.Config{URL: srv.url(), Timeout: 50 * time.Millisecond}, ownClient(t))
	err := sink.Deliver(t.Context(), smallBatch)
	requireOutcome(t, err, schemas.TimedOut)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Deliver = %v; want the attempt timeout's cause, not the connection's deadline", err)
	}
}

// TestDirectSendsTheBodyWithoutACopy: a body the direct path sends is written whole before
// Deliver returns, so Deliver sends it from the caller's buffer instead of a copy, the largest
// allocation a delivery would otherwise make. A delivery of a 3 KiB body must allocate about
// what one of a 12-byte body does (the copy alone would be 3 KiB more).
func TestDirectSendsTheBodyWithoutACopy(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops pooled buffers at random and allocates in their place; .ci/run runs this without -race")
	}
	srv := newScriptedServer(t, func(s *scriptedServer, c net.Conn, br *bufio.Reader) {
		for s.readRequest(br) {
			if _, err := io.WriteString(c, ok200); err != nil {
				return
			}
		}
	})
	sink, err := webhook.New(webhook.Config{URL: srv.url()}, ownClient(t))
	if err != nil {
		t.Fatal(err)
	}
	perDelivery := func(size int) uint64 {
		body := append([]byte(`[{"id":"1"}]`), bytes.Repeat([]byte(" "), size-12)...)
		b := &sinks.Batch{Subscription: "s", Body: body, Events: []*schemas.Event{{ID: "1", DataVersion: "1"}}}
		deliver := func() {
			if err := sink.Deliver(context.Background(), b); err != nil {
				t.Fatal(err)
			}
		}
		for range 10 { // the connection, the pool and the endpoint's buffers
			deliver()
		}
		const n = 50
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			deliver()
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / n
	}
	const size = 3 << 10
	small, large := perDelivery(12), perDelivery(size)
	if large > small+size/2 {
		t.Fatalf("a delivery of %d bytes allocated %d bytes, one of 12 bytes %d: the body was copied", size, large, small)
	}
	if got := srv.requests.Load(); got != 120 {
		t.Fatalf("the endpoint read %d requests; want 120", got)
	}
}

// An answer whose head passes 64 KiB is refused, on the direct pool as on net/http's
// transport, instead of being read into memory: net/http's default bound (10 MiB) let one
// attempt allocate over 100 MB parsing a head of small header lines, and a hostile endpoint
// answers every attempt of every subscription that way.
func TestDirectBoundsTheAnswerHead(t *testing.T) {
	const limit = 64 << 10
	for _, tc := range []struct {
		name string
		body []byte // a small body goes to the direct pool, a large one to net/http's transport
	}{
		{name: "direct", body: smallBatch.Body},
		{name: "net/http", body: bytes.Repeat([]byte("x"), 64<<10)},
	} {
		t.Run(tc.name+"/one long line", func(t *testing.T) {
			srv := newScriptedServer(t, func(s *scriptedServer, c net.Conn, br *bufio.Reader) {
				if !s.readRequest(br) {
					return
				}
				// A head one header line over the limit, then complete: a client that reads
				// it all would take it as delivered.
				pad := strings.Repeat("a", 16<<10)
				if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Pad: "); err != nil {
					return
				}
				for range limit/len(pad) + 1 {
					if _, err := io.WriteString(c, pad); err != nil {
						return // the client stopped reading
					}
				}
				_, _ = io.WriteString(c, "\r\nContent-Length: 0\r\n\r\n")
			})
			sink := newSink(t, webhook.Config{URL: srv.url()}, ownClient(t))
			err := sink.Deliver(t.Context(), &sinks.Batch{Subscription: "s", Body: tc.body})
			de := requireOutcome(t, err, schemas.GenericError)
			if !strings.Contains(de.Error(), "exceeded") {
				t.Fatalf("Deliver = %v; want the head's limit named", err)
			}
		})
		t.Run(tc.name+"/many short lines", func(t *testing.T) {
			// 8 MiB of distinct one-letter headers, complete: read whole, each line costs a map
			// entry and strings, 12 times the bytes on the wire.
			var head bytes.Buffer
			head.WriteString("HTTP/1.1 500 Internal Server Error\r\n")
			for i := 0; head.Len() < 8<<20; i++ {
				fmt.Fprintf(&head, "X%07d: a\r\n", i)
			}
			head.WriteString("Content-Length: 0\r\n\r\n")
			srv := newScriptedServer(t, func(s *scriptedServer, c net.Conn, br *bufio.Reader) {
				if !s.readRequest(br) {
					return
				}
				_, _ = c.Write(head.Bytes()) // fails once the client stops reading
			})
			sink := newSink(t, webhook.Config{URL: srv.url()}, ownClient(t))
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			err := sink.Deliver(t.Context(), &sinks.Batch{Subscription: "s", Body: tc.body})
			runtime.ReadMemStats(&after)
			if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
				t.Fatalf("an attempt answered with an 8 MiB head allocated %d MiB; want at most 16 (the head refused at 64 KiB)", got>>20)
			}
			if de := requireOutcome(t, err, schemas.GenericError); !strings.Contains(de.Error(), "exceeded") {
				t.Fatalf("Deliver = %v; want the head's limit named", err)
			}
		})
	}
}
