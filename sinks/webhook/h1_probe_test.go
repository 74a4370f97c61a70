//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package webhook

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// writeCounter is a TCP connection that counts the writes made on it; its SyscallConn is the
// TCP connection's, so peerGone can look into it.
type writeCounter struct {
	*net.TCPConn
	writes atomic.Int32
}

func (c *writeCounter) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.TCPConn.Write(b)
}

// A connection the endpoint closed while it sat idle is seen closed when taken from the pool
// and not written to: the request goes out on a new connection at the first try.
func TestDirectLooksAtIdleConnectionsBeforeUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	closed := make(chan struct{})
	go func() {
		for n := 0; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
					if n == 0 {
						_ = c.Close() // the first connection: closed once idle
						close(closed)
						return
					}
				}
			}()
		}
	}()
	var conns []*writeCounter
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		wc := &writeCounter{TCPConn: c.(*net.TCPConn)}
		conns = append(conns, wc)
		return wc, nil
	}
	p := newDirectPool(dial, 4, 8, time.Minute)
	p.probeAfter = 0 // look at every connection taken
	client := &http.Client{Transport: &transport{Transport: &http.Transport{}, direct: p}}
	t.Cleanup(client.CloseIdleConnections)
	u := "http://" + ln.Addr().String() + "/"
	post(t, client, u)
	<-closed
	// The endpoint's close reaches this side's socket soon after; until it has, the look
	// finds nothing and the resend covers it. Wait for it (bounded) with a look of our own.
	for deadline := time.Now().Add(10 * time.Second); !peerGone(conns[0]); {
		if time.Now().After(deadline) {
			t.Fatal("the endpoint's close never reached the client's socket")
		}
		runtime.Gosched()
	}
	post(t, client, u)
	if len(conns) != 2 {
		t.Fatalf("%d connections dialed; want 2", len(conns))
	}
	if w := conns[0].writes.Load(); w != 1 {
		t.Fatalf("the closed connection was written to %d times; want once (the first request only)", w)
	}
	// A connection in use, idle for less than probeAfter, is not looked at: the pool hands it
	// out as it is.
	p.probeAfter = time.Hour
	post(t, client, u)
	if len(conns) != 2 || conns[1].writes.Load() != 2 {
		t.Fatalf("%d connections, %d writes on the second; want the second reused", len(conns), conns[1].writes.Load())
	}
}
