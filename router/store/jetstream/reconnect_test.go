package jetstream_test

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/egridio/egrid/schemas"
)

// TestReadAcrossAReconnect reads a journal through a connection that is cut in the middle of
// the read, while the consumer is delivering, and comes back at once: the messages sent
// meanwhile are lost on the way, and the consumer, which acknowledges nothing, goes on after
// them. The read may fail (the caller reads again) or come back short, but what it returns is
// a contiguous run from its start: a hole would make a subscription actor skip those events
// for good.
func TestReadAcrossAReconnect(t *testing.T) {
	p := newCutProxy(t, strings.TrimPrefix(serverURL, "nats://"))
	nc, err := nats.Connect("nats://"+p.addr(), nats.ReconnectWait(5*time.Millisecond),
		nats.ReconnectJitter(0, 0), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	s := open(t, nc, newPrefix(t))
	ctx := t.Context()
	if err := s.PutTopic(ctx, "orders", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	const total = 2000
	raw := []byte(`{"pad":"` + strings.Repeat("x", 4000) + `"}`)
	for b := 0; b < total/500; b++ {
		evs := make([]*schemas.Event, 500)
		for i := range evs {
			evs[i] = &schemas.Event{ID: fmt.Sprint(b*500 + i + 1), Raw: raw}
		}
		if _, err := s.Append(ctx, "orders", time.Unix(1, 0), evs); err != nil {
			t.Fatal(err)
		}
	}
	var cut, failed int
	for try := range 4 {
		p.cutAfter(int64(1+try) << 20) // 1-4 MB into the ~8 MB the read brings
		entries, err := s.Read(ctx, "orders", 1, total)
		if p.armed() {
			continue // the read ended before the cut; nothing to check
		}
		cut++
		if err != nil {
			failed++
			t.Logf("read %d failed across the reconnect (the caller reads again): %v", try, err)
			continue
		}
		for i, e := range entries {
			if e.Seq != uint64(i+1) || e.Event.ID != fmt.Sprint(i+1) {
				t.Fatalf("read %d: entry %d of the run is %d (event %s): a hole before it", try, i, e.Seq, e.Event.ID)
			}
		}
		t.Logf("read %d across the reconnect: a contiguous run of %d entries", try, len(entries))
	}
	if cut == 0 {
		t.Fatal("no read was cut: every read ended before its cut")
	}
}

// cutProxy forwards a NATS client's connections to the server and, once armed, cuts the one
// in use after so many bytes went from the server to the client; the client reconnects
// through it at once.
type cutProxy struct {
	ln     net.Listener
	target string

	mu   sync.Mutex
	left int64 // bytes to the client until the cut; 0 when not armed
	cur  []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.cur {
			c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			p.mu.Lock()
			p.cur = []net.Conn{client, server}
			p.mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(server, client); server.Close() })
			wg.Go(func() { p.down(client, server) })
		}
	})
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) cutAfter(n int64) {
	p.mu.Lock()
	p.left = n
	p.mu.Unlock()
}

func (p *cutProxy) armed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.left > 0
}

// down copies from server to client, counting down an armed cut.
func (p *cutProxy) down(client, server net.Conn) {
	defer client.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			p.mu.Lock()
			cut := false
			if p.left > 0 {
				p.left -= int64(n)
				cut = p.left <= 0
				p.left = max(p.left, 0)
			}
			p.mu.Unlock()
			if cut {
				client.Close()
				server.Close()
				return
			}
			if _, err := client.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
