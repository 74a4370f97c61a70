package testkit

import (
	"context"
	"net"
	"sync"
)

// PipeListener is a net.Listener whose connections are made in memory (net.Pipe) by its
// DialContext, so a real http.Server runs inside a synctest bubble: its read and write
// deadlines follow virtual time, and a client that does not read blocks the server's next
// write at once (a pipe has no buffer). Give an http.Client its DialContext
// (http.Transport{DialContext: ln.DialContext}), or write requests on a dialled connection
// yourself.
type PipeListener struct {
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

// NewPipeListener returns a listener with no connections yet.
func NewPipeListener() *PipeListener {
	return &PipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// Accept implements net.Listener.
func (l *PipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener: Accept and DialContext fail from then on. Idempotent.
func (l *PipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr implements net.Listener: a loopback address.
func (l *PipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// DialContext returns the client end of a new connection, once the server accepted it; the
// network and address are ignored.
func (l *PipeListener) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	c, s := net.Pipe()
	select {
	case l.conns <- s:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
