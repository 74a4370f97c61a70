package brokertest

import (
	"context"
	"errors"
	"net"
	"net/url"
	"sync"
	"testing"

	"github.com/egridio/egrid/sinks/broker"
)

// Proxy is a TCP proxy on a loopback port in front of a broker: what a test takes down, stalls
// and brings back instead of the broker itself. It is safe for concurrent use and stops when
// the test ends.
type Proxy struct {
	target string
	addr   string

	mu       sync.Mutex
	cond     *sync.Cond
	ln       net.Listener
	conns    map[net.Conn]struct{}
	down     bool
	stalled  bool
	held     chan struct{} // closed when a stalled connection holds data
	heldOnce bool
	done     bool
	wg       sync.WaitGroup
	refused  chan struct{} // capacity 1: a connection was refused while down
}

// NewProxy starts a proxy to target (host:port) on a free loopback port.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("starting a proxy to %s: %v", target, err)
	}
	p := &Proxy{target: target, addr: ln.Addr().String(), ln: ln, conns: make(map[net.Conn]struct{}), refused: make(chan struct{}, 1)}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept(ln)
	t.Cleanup(p.close)
	return p
}

// Addr returns the proxy's host:port.
func (p *Proxy) Addr() string { return p.addr }

// Refused returns a channel that receives when the proxy refuses a connection while it is
// down: a client noticed the broker gone and tried to connect again. It holds one value at
// most, so a receive means at least one refusal since the one before.
func (p *Proxy) Refused() <-chan struct{} { return p.refused }

// Down takes the broker away, as when it stops: open connections are cut, and a new one is
// closed as soon as it is accepted, before anything reaches the broker. The proxy keeps its
// port meanwhile: closing its listener would free the port for any other process to take
// (another test's proxy to the same broker, say), and a client reconnecting there would
// reach the broker after all.
func (p *Proxy) Down() {
	p.mu.Lock()
	p.down, p.stalled = true, false
	conns := p.takeConns()
	p.cond.Broadcast()
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// Up brings the broker back on the same address (after [Proxy.Down] or [Proxy.Stall]).
// Connections that were stalled are cut: their requests are lost, as in a broker restart.
func (p *Proxy) Up() {
	p.mu.Lock()
	var conns []net.Conn
	if p.stalled {
		conns = p.takeConns()
	}
	p.down, p.stalled = false, false
	p.cond.Broadcast()
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// Stall makes the broker stop answering: connections stay open and accepted, but no byte is
// forwarded either way until [Proxy.Up]. The returned channel is closed once a request is
// being held.
func (p *Proxy) Stall() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = true
	p.held = make(chan struct{})
	p.heldOnce = false
	return p.held
}

// Connections returns how many client connections the proxy holds open to the broker.
func (p *Proxy) Connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) / 2
}

// WaitConnections waits until the proxy holds exactly n client connections open, or ctx ends;
// it returns how many it holds then. A connection a client closed leaves the proxy once the
// proxy has read its end.
func (p *Proxy) WaitConnections(ctx context.Context, n int) int {
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.conns)/2 != n && ctx.Err() == nil {
		p.cond.Wait()
	}
	return len(p.conns) / 2
}

func (p *Proxy) takeConns() []net.Conn {
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
		delete(p.conns, c)
	}
	p.cond.Broadcast() // WaitConnections
	return conns
}

func (p *Proxy) close() {
	p.mu.Lock()
	p.done, p.down, p.stalled = true, true, false
	ln := p.ln
	p.ln = nil
	conns := p.takeConns()
	p.cond.Broadcast()
	p.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	for _, c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			p.refuse(c)
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			_ = up.Close()
			p.refuse(c)
			continue
		}
		p.conns[c] = struct{}{}
		p.conns[up] = struct{}{}
		p.cond.Broadcast() // WaitConnections
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

// refuse closes c, a connection accepted while the proxy is down, and signals Refused first
// (so the signal is there by the time the client sees the close).
func (p *Proxy) refuse(c net.Conn) {
	select {
	case p.refused <- struct{}{}:
	default:
	}
	_ = c.Close()
}

// pipe copies src to dst, holding data while the proxy is stalled.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer func() {
		_ = dst.Close()
		_ = src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.cond.Broadcast() // WaitConnections
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.pass() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// pass waits while the proxy is stalled; it reports whether the data may go through.
func (p *Proxy) pass() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.stalled {
		if !p.heldOnce {
			p.heldOnce = true
			close(p.held)
		}
		p.cond.Wait()
	}
	return !p.down && !p.done
}

// Through returns s with kind's server reached through a new [Proxy], and the proxy.
func Through(t testing.TB, s broker.Servers, kind broker.Kind) (broker.Servers, *Proxy) {
	t.Helper()
	switch kind {
	case broker.NATSJetStream:
		n := *s.NATS
		p := NewProxy(t, hostOf(n.URL))
		n.URL = replaceHost(t, n.URL, p.Addr())
		s.NATS = &n
		return s, p
	case broker.RabbitMQ:
		r := *s.RabbitMQ
		p := NewProxy(t, hostOf(r.URL))
		r.URL = replaceHost(t, r.URL, p.Addr())
		s.RabbitMQ = &r
		return s, p
	case broker.RedisStream:
		r := *s.Redis
		p := NewProxy(t, r.Addr)
		r.Addr = p.Addr()
		s.Redis = &r
		return s, p
	case broker.PostgreSQL:
		d := *s.Postgres
		p := NewProxy(t, hostOf(d.DSN))
		d.DSN = replaceHost(t, d.DSN, p.Addr())
		s.Postgres = &d
		return s, p
	}
	t.Fatalf("broker %s is not reached over TCP", kind)
	return s, nil
}

// DeadPort returns s with kind's server moved to a loopback port nothing listens on.
func DeadPort(t testing.TB, s broker.Servers, kind broker.Kind) broker.Servers {
	t.Helper()
	out, p := Through(t, s, kind)
	p.Down()
	return out
}

func replaceHost(t testing.TB, raw, host string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		t.Fatalf("cannot put a proxy in front of %q: %v", raw, errors.Join(err, errors.New("no host")))
	}
	u.Host = host
	return u.String()
}
