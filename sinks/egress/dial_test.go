package egress_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/egress"
)

// fakeDNS is a resolver whose A answer for every name is whatever the test stores, served
// in-process over net.Pipe: no packet leaves the machine.
type fakeDNS struct {
	answer atomic.Pointer[netip.Addr]
	wg     sync.WaitGroup
}

func newFakeDNS(t *testing.T) (*fakeDNS, *net.Resolver) {
	f := &fakeDNS{}
	t.Cleanup(f.wg.Wait) // every exchange ends when the resolver closes its end
	return f, &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		client, server := net.Pipe()
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer server.Close()
			f.serve(server)
		}()
		return client, nil
	}}
}

// serve answers length-prefixed DNS queries (the stream framing the Go resolver uses on a
// connection that is not a PacketConn): A queries with the stored address, others with no
// records.
func (f *fakeDNS) serve(c net.Conn) {
	for {
		var n uint16
		if binary.Read(c, binary.BigEndian, &n) != nil {
			return
		}
		q := make([]byte, n)
		if _, err := io.ReadFull(c, q); err != nil || len(q) < 12 {
			return
		}
		end := 12 // the question: labels, then type and class
		for end < len(q) && q[end] != 0 {
			end += int(q[end]) + 1
		}
		end += 5
		if end > len(q) {
			return
		}
		qtype := binary.BigEndian.Uint16(q[end-4:])
		resp := append([]byte{q[0], q[1], 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0}, q[12:end]...)
		if a := f.answer.Load(); a != nil && qtype == 1 {
			resp[7] = 1
			ip := a.As4()
			resp = append(resp, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4)
			resp = append(resp, ip[:]...)
		}
		if binary.Write(c, binary.BigEndian, uint16(len(resp))) != nil {
			return
		}
		if _, err := c.Write(resp); err != nil {
			return
		}
	}
}

// listen listens on addr and returns the listener and its port.
func listen(t *testing.T, addr string) (net.Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return ln, port
}

// requireFirstAcceptIsOurs proves that nothing connected to ln before this call: it dials ln
// itself and checks that the first connection ln accepts is that one.
func requireFirstAcceptIsOurs(t *testing.T, ln net.Listener) {
	t.Helper()
	own, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	if d, ok := ln.(*net.TCPListener); ok {
		_ = d.SetDeadline(time.Now().Add(30 * time.Second))
	}
	got, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if got.RemoteAddr().String() != own.LocalAddr().String() {
		t.Fatalf("the listener accepted a connection from %s before ours (%s): the denied dial got through", got.RemoteAddr(), own.LocalAddr())
	}
}

// TestDialRefusesRebinding: a name that resolved to an allowed address when the endpoint was
// checked, and resolves to a denied one when egrid connects, is refused at connect time, and
// no connection reaches the denied address.
func TestDialRefusesRebinding(t *testing.T) {
	dns, resolver := newFakeDNS(t)
	p, err := egress.New(egress.Config{Deny: []string{"127.0.0.2/32"}}, egress.Options{Resolver: resolver})
	if err != nil {
		t.Fatal(err)
	}
	denied, port := listen(t, "127.0.0.2:0")
	url := "http://hook.rebind.test:" + port + "/events"

	allowed := netip.MustParseAddr("127.0.0.1")
	dns.answer.Store(&allowed)
	if err := p.CheckURL(context.Background(), url); err != nil {
		t.Fatalf("CheckURL while the name resolves to 127.0.0.1: %v", err)
	}

	rebound := netip.MustParseAddr("127.0.0.2")
	dns.answer.Store(&rebound)
	// The listener never answers: should the denial fail, the request ends at this bound.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{DialContext: p.DialContext}}
	defer client.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("[]"))
	resp, err := client.Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("POST to a name that now resolves to a denied address answered %s", resp.Status)
	}
	var de *egress.DeniedError
	if !errors.As(err, &de) || !errors.Is(err, sinks.ErrDestinationDenied) {
		t.Fatalf("POST error %v is not a denial", err)
	}
	want := `endpoint hook.rebind.test:` + port + ` (127.0.0.2) denied by egress rule "egress.deny: 127.0.0.2/32"`
	if de.Error() != want {
		t.Fatalf("denial %q, want %q", de.Error(), want)
	}
	requireFirstAcceptIsOurs(t, denied)
}

// TestDialChecksResolvedAddress: a name in the hosts file (localhost) that resolves to a
// denied address is refused when the connection is made, since names are judged by what they
// resolve to; with the address allowed, the same dial connects.
func TestDialChecksResolvedAddress(t *testing.T) {
	ln, port := listen(t, "127.0.0.1:0")
	p, err := egress.New(egress.Config{DenyLoopback: true}, egress.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.DialContext(context.Background(), "tcp4", "localhost:"+port)
	if !errors.Is(err, sinks.ErrDestinationDenied) || !strings.Contains(err.Error(), `egress rule "loopback is denied; allow with egress.allow: [127.0.0.0/8]"`) {
		t.Fatalf("dialing localhost with loopback denied: %v, want the loopback rule", err)
	}
	requireFirstAcceptIsOurs(t, ln)

	open, err := egress.New(egress.Config{DenyLoopback: true, Allow: []string{"127.0.0.1"}}, egress.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := open.DialContext(context.Background(), "tcp4", "localhost:"+port)
	if err != nil {
		t.Fatalf("dialing an allowed address: %v", err)
	}
	c.Close()
}

// TestDialAllowPatternTrustsName: a host pattern in Allow lets a name reach the private
// address it resolves to, but never egrid's own address.
func TestDialAllowPatternTrustsName(t *testing.T) {
	dns, resolver := newFakeDNS(t)
	ln, port := listen(t, "127.0.0.1:0")
	addr := netip.MustParseAddr("127.0.0.1")
	dns.answer.Store(&addr)
	p, err := egress.New(egress.Config{DenyLoopback: true, Allow: []string{"*.hooks.test"}}, egress.Options{Resolver: resolver})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DialContext(context.Background(), "tcp4", "other.test:"+port); !errors.Is(err, sinks.ErrDestinationDenied) {
		t.Fatalf("a name outside the pattern: %v, want a denial", err)
	}
	c, err := p.DialContext(context.Background(), "tcp4", "billing.hooks.test:"+port)
	if err != nil {
		t.Fatalf("a name the pattern allows: %v", err)
	}
	c.Close()
	p.DenySelf(ln.Addr().String())
	if _, err := p.DialContext(context.Background(), "tcp4", "billing.hooks.test:"+port); err == nil || !strings.Contains(err.Error(), "egrid's own address") {
		t.Fatalf("egrid's own address through an allowed name: %v, want the own-address rule", err)
	}
}

// TestDialJudgesEmbeddedIPv4: at connect time too, an IPv6 address that carries an IPv4
// address (IPv4-compatible, 6to4, local-use NAT64) is judged by that IPv4 address, and the
// refusal comes before the connection is attempted.
func TestDialJudgesEmbeddedIPv4(t *testing.T) {
	if ln, err := net.Listen("tcp6", "[::1]:0"); err != nil {
		t.Skipf("this host has no IPv6 sockets (%v), so an IPv6 address cannot be dialled", err)
	} else {
		ln.Close()
	}
	p, err := egress.New(egress.Config{DenyLoopback: true}, egress.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"[::127.0.0.1]:9", "[2002:7f00:1::]:9", "[64:ff9b:1::7f00:1]:9"} {
		_, err := p.DialContext(context.Background(), "tcp", addr)
		if !errors.Is(err, sinks.ErrDestinationDenied) || !strings.Contains(err.Error(), `egress rule "loopback is denied; allow with egress.allow: [127.0.0.0/8]"`) {
			t.Errorf("dialing %s with loopback denied: %v, want the loopback rule", addr, err)
		}
	}
}
