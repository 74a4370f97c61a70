package httpserver_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/egridio/egrid/router/httpserver"
	"github.com/egridio/egrid/testkit"
)

// countingListener counts the bytes the server reads from its connections.
type countingListener struct {
	*testkit.PipeListener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.PipeListener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, n: &l.n}, nil
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// An HTTP/2 request whose handler has not read its body yet — a publish waiting for a publish
// slot — can have sent at most MaxReceiveBuffer of it, which the server holds in memory, not
// net/http's 1 MiB.
func TestHTTP2UnreadBodyIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		srv := httpserver.New(httpserver.Config{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-release // waits without reading, as a publish waiting for a slot does
			_, _ = io.Copy(io.Discard, r.Body)
		}), httpserver.Requests{}, nil)
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetUnencryptedHTTP2(true) // HTTP/2 without TLS, over in-memory pipes
		ln := &countingListener{PipeListener: testkit.NewPipeListener()}
		go func() { _ = srv.Serve(ln) }()
		tr := &http.Transport{DialContext: ln.DialContext, Protocols: new(http.Protocols)}
		tr.Protocols.SetUnencryptedHTTP2(true)
		defer func() {
			tr.CloseIdleConnections()
			_ = srv.Close()
			synctest.Wait()
		}()
		var once sync.Once
		let := func() { once.Do(func() { close(release) }) }
		defer let() // before the server closes, also when the test fails

		body := bytes.NewReader(make([]byte, 1<<20))
		answered := make(chan error, 1)
		go func() {
			req, _ := http.NewRequest(http.MethodPost, "http://egrid/topics/t/events", body)
			resp, err := tr.RoundTrip(req)
			if err == nil {
				_ = resp.Body.Close()
				if resp.ProtoMajor != 2 {
					t.Errorf("served over %s; want HTTP/2", resp.Proto)
				}
			}
			answered <- err
		}()
		synctest.Wait() // the client has sent what the server's window lets it
		// Frame headers, settings and the request's headers add a few hundred bytes.
		if got, limit := ln.n.Load(), int64(httpserver.MaxReceiveBuffer+4<<10); got > limit {
			t.Fatalf("the server took in %d KiB of a request whose handler has not read its body; want at most %d KiB", got>>10, limit>>10)
		}
		let()
		if err := <-answered; err != nil {
			t.Fatalf("the request, once read: %v", err)
		}
		if got := ln.n.Load(); got < 1<<20 {
			t.Fatalf("the server took in %d bytes; want the whole 1 MiB body", got)
		}
	})
}
