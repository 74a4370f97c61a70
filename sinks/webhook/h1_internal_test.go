package webhook

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// pipeDialer dials in-memory connections whose far end answers every request 200, and
// counts the connections it made and those closed since.
type pipeDialer struct {
	dialed, closed atomic.Int32
}

type countedConn struct {
	net.Conn
	closed *atomic.Int32
	once   atomic.Bool
}

func (c *countedConn) Close() error {
	if c.once.CompareAndSwap(false, true) {
		c.closed.Add(1)
	}
	return c.Conn.Close()
}

func (d *pipeDialer) dial(context.Context, string, string) (net.Conn, error) {
	near, far := net.Pipe()
	d.dialed.Add(1)
	go func() {
		defer far.Close()
		br := bufio.NewReader(far)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			if _, err := io.WriteString(far, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"); err != nil {
				return
			}
		}
	}()
	return &countedConn{Conn: near, closed: &d.closed}, nil
}

// advance moves the bubble's virtual time forward by d and waits until every goroutine in it
// is blocked again (testkit.Advance, which this package's tests cannot import: testkit
// imports the router, which imports this package).
func advance(d time.Duration) {
	synctest.Wait()
	<-time.After(d)
	synctest.Wait()
}

func post(t *testing.T, c *http.Client, u string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader("{}"))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
}

// Connections idle for the idle timeout are closed, the oldest first, with no request to
// notice: the pool's timer does it (net/http's Transport closes its idle ones likewise).
func TestDirectClosesIdleConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var d pipeDialer
		p := newDirectPool(d.dial, 4, 8, 90*time.Second)
		c := &http.Client{Transport: &transport{Transport: &http.Transport{}, direct: p}}
		post(t, c, "http://a.example/")
		advance(60 * time.Second)
		post(t, c, "http://b.example/")
		if d.dialed.Load() != 2 || d.closed.Load() != 0 {
			t.Fatalf("dialed %d, closed %d; want 2 kept", d.dialed.Load(), d.closed.Load())
		}
		advance(31 * time.Second) // a's connection has been idle 91 s, b's 31 s
		if d.closed.Load() != 1 {
			t.Fatalf("%d closed after a's idle timeout; want a's only", d.closed.Load())
		}
		post(t, c, "http://b.example/") // b's connection, reused
		advance(89 * time.Second)
		if d.dialed.Load() != 2 || d.closed.Load() != 1 {
			t.Fatalf("dialed %d, closed %d before b's idle timeout; want 2, 1", d.dialed.Load(), d.closed.Load())
		}
		advance(2 * time.Second)
		if d.closed.Load() != 2 {
			t.Fatalf("%d closed after b's idle timeout; want both", d.closed.Load())
		}
		c.CloseIdleConnections() // nothing left; stops nothing
	})
}

// The pool keeps at most maxPerHost idle connections per host and maxIdle in all; the rest
// are closed when their answers are read. CloseIdleConnections closes what it keeps.
func TestDirectPoolBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var d pipeDialer
		p := newDirectPool(d.dial, 2, 3, time.Minute)
		c := &http.Client{Transport: &transport{Transport: &http.Transport{}, direct: p}}
		// Four answers held open at once to a, then two to b: six connections.
		var bodies []io.ReadCloser
		for _, host := range []string{"a", "a", "a", "a", "b", "b"} {
			req, _ := http.NewRequest(http.MethodPost, "http://"+host+".example/", strings.NewReader("{}"))
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			bodies = append(bodies, resp.Body)
		}
		for _, b := range bodies {
			_ = b.Close()
		}
		// a keeps 2 (the per-host bound), b 1 (the bound in all); 3 closed.
		if d.dialed.Load() != 6 || d.closed.Load() != 3 {
			t.Fatalf("dialed %d, closed %d; want 6 and 3", d.dialed.Load(), d.closed.Load())
		}
		c.CloseIdleConnections()
		if d.closed.Load() != 6 {
			t.Fatalf("%d closed after CloseIdleConnections; want all 6", d.closed.Load())
		}
	})
}

// A URL the transport's proxy applies to goes to net/http's Transport, which sends it to the
// proxy; so does https. Plain http without a proxy goes to the direct pool.
func TestDirectHonoursTheProxy(t *testing.T) {
	proxied := make(chan string, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		proxied <- req.RequestURI
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	}()
	proxyURL := &url.URL{Scheme: "http", Host: ln.Addr().String()}
	var d pipeDialer
	tr := &transport{
		Transport: &http.Transport{Proxy: func(r *http.Request) (*url.URL, error) {
			if r.URL.Host == "proxied.example" {
				return proxyURL, nil
			}
			return nil, nil
		}},
		direct: newDirectPool(d.dial, 4, 8, time.Minute),
	}
	c := &http.Client{Transport: tr}
	t.Cleanup(c.CloseIdleConnections)
	post(t, c, "http://proxied.example/hook")
	if got := <-proxied; got != "http://proxied.example/hook" {
		t.Fatalf("the proxy was asked for %q; want the absolute URL", got)
	}
	if d.dialed.Load() != 0 {
		t.Fatal("the direct pool dialed for a proxied URL")
	}
	post(t, c, "http://direct.example/hook")
	if d.dialed.Load() != 1 {
		t.Fatalf("the direct pool dialed %d times for a URL without a proxy; want 1", d.dialed.Load())
	}
	for _, tc := range []struct {
		url  string
		body io.Reader
		n    int64
	}{
		{"https://direct.example/", nil, 0},
		{"http://direct.example/", strings.NewReader(strings.Repeat("x", maxDirectBody+1)), maxDirectBody + 1},
		{"http://direct.example/", io.LimitReader(strings.NewReader("{}"), 2), 0}, // no length, no GetBody
	} {
		req, _ := http.NewRequest(http.MethodPost, tc.url, tc.body)
		if tc.n == 0 && tc.body != nil {
			req.ContentLength, req.GetBody = 0, nil
		}
		if tr.sendsDirectly(req) {
			t.Errorf("%s with %d bytes of body (GetBody %t) would go to the direct pool", tc.url, req.ContentLength, req.GetBody != nil)
		}
	}
}
