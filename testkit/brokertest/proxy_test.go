package brokertest_test

import (
	"bufio"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egridio/egrid/testkit/brokertest"
)

// echoServer is a loopback TCP server that writes back every line and counts its connections.
func echoServer(t *testing.T) (addr string, conns *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	conns = new(atomic.Int64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String(), conns
}

// roundTrip sends a line through addr and returns what came back, or the error.
func roundTrip(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

// A proxy that is down keeps its port (so no other process can take it and pass a
// reconnecting client on to the broker), closes every connection it accepts before anything
// reaches the broker, and passes traffic again once it is up.
func TestProxyDownKeepsItsPort(t *testing.T) {
	target, conns := echoServer(t)
	p := brokertest.NewProxy(t, target)
	if got, err := roundTrip(p.Addr()); err != nil || got != "ping\n" {
		t.Fatalf("through the proxy: %q, %v; want the echo", got, err)
	}
	p.Down()
	if ln, err := net.Listen("tcp", p.Addr()); err == nil {
		_ = ln.Close()
		t.Fatalf("the port %s of a proxy that is down could be taken by another listener", p.Addr())
	}
	before := conns.Load()
	if got, err := roundTrip(p.Addr()); err == nil {
		t.Errorf("through a proxy that is down: %q; want the connection closed", got)
	}
	if n := conns.Load(); n != before {
		t.Errorf("the broker got %d connections while the proxy was down", n-before)
	}
	select { // the refused connection was signalled (roundTrip has returned: it came first)
	case <-p.Refused():
	default:
		t.Error("a connection refused while down was not signalled on Refused")
	}
	p.Up()
	if got, err := roundTrip(p.Addr()); err != nil || got != "ping\n" {
		t.Fatalf("through the proxy after Up: %q, %v; want the echo", got, err)
	}
	select {
	case <-p.Refused():
		t.Error("a connection while up was signalled on Refused")
	default:
	}
}
