package broker_test

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
)

// fakePostgres is a PostgreSQL server that completes the startup of every connection (no
// authentication) and then stops answering, as a server that keeps its connections and hangs
// does: it answers the simple-protocol statements watermill-sql creates its tables with when
// answerDDL is set, and nothing else. It records the first statement it leaves unanswered
// (unanswered) and each connection the client closes, or terminates, after its startup
// (closed); a cancel request it reads and closes, as PostgreSQL does. With hold set, it answers
// no startup until hold is closed, and tells of each startup it reads on starting.
type fakePostgres struct {
	ln         net.Listener
	answerDDL  bool
	hold       chan struct{}
	starting   chan struct{}
	stop       chan struct{}
	unanswered chan struct{}
	closed     chan struct{}
	once       sync.Once
	mu         sync.Mutex
	conns      []net.Conn
	wg         sync.WaitGroup
}

func newFakePostgres(t *testing.T, answerDDL bool) *fakePostgres {
	t.Helper()
	return newFakePostgresHolding(t, answerDDL, nil)
}

// newFakePostgresHolding returns a fake that answers no startup until hold is closed.
func newFakePostgresHolding(t *testing.T, answerDDL bool, hold chan struct{}) *fakePostgres {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakePostgres{ln: ln, answerDDL: answerDDL, hold: hold, starting: make(chan struct{}, 64), stop: make(chan struct{}),
		unanswered: make(chan struct{}), closed: make(chan struct{}, 64)}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, c)
			f.mu.Unlock()
			f.wg.Add(1)
			go func() { defer f.wg.Done(); f.serve(c) }()
		}
	}()
	t.Cleanup(func() {
		close(f.stop)
		_ = ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			_ = c.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

func (f *fakePostgres) dsn() string {
	return "postgres://egrid@" + f.ln.Addr().String() + "/egrid?sslmode=disable"
}

func (f *fakePostgres) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for { // the startup packet (after an SSL request, refused), or a cancel request
		var n int32
		if binary.Read(r, binary.BigEndian, &n) != nil || n < 8 {
			return
		}
		body := make([]byte, n-4)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		switch binary.BigEndian.Uint32(body) {
		case 80877102: // cancel request
			return
		case 80877103: // SSL request
			_, _ = c.Write([]byte{'N'})
			continue
		}
		break
	}
	if f.hold != nil {
		f.starting <- struct{}{}
		select {
		case <-f.hold:
		case <-f.stop:
			return
		}
	}
	// AuthenticationOk, BackendKeyData, ReadyForQuery.
	_, _ = c.Write(pgMsg('R', u32(0)))
	_, _ = c.Write(pgMsg('K', append(u32(42), u32(7)...)))
	_, _ = c.Write(pgMsg('Z', []byte{'I'}))
	for {
		typ, err := r.ReadByte()
		if err != nil {
			f.closed <- struct{}{}
			return
		}
		var n int32
		if binary.Read(r, binary.BigEndian, &n) != nil || n < 4 {
			f.closed <- struct{}{}
			return
		}
		if _, err := io.CopyN(io.Discard, r, int64(n-4)); err != nil {
			f.closed <- struct{}{}
			return
		}
		switch {
		case typ == 'X':
			f.closed <- struct{}{}
			return
		case typ == 'Q' && f.answerDDL:
			_, _ = c.Write(pgMsg('C', []byte("CREATE TABLE\x00")))
			_, _ = c.Write(pgMsg('Z', []byte{'I'}))
		default:
			f.once.Do(func() { close(f.unanswered) })
		}
	}
}

// pgMsg frames a backend message.
func pgMsg(typ byte, body []byte) []byte {
	return append(append([]byte{typ}, u32(uint32(len(body)+4))...), body...)
}
