package httpserver

import (
	"log/slog"
	"net"
	"sync"
)

// LimitListener returns a listener that keeps at most n accepted connections open: at the
// limit, Accept waits until one of them is closed before it accepts the next, so new clients
// wait in the kernel's listen backlog (and are refused by the kernel once that is full) and the
// process keeps its file descriptors. It logs a warning on log (when not nil) each time the
// limit is reached. n must be positive.
//
// It is golang.org/x/net/netutil.LimitListener plus that warning: an operator has to learn that
// clients wait because of this limit rather than see them time out in silence.
func LimitListener(l net.Listener, n int, log *slog.Logger) net.Listener {
	if n <= 0 {
		panic("httpserver: LimitListener needs a positive limit")
	}
	return &limitListener{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{}), log: log}
}

type limitListener struct {
	net.Listener
	sem       chan struct{}
	closeOnce sync.Once
	done      chan struct{}
	log       *slog.Logger
}

// acquire takes a slot, waiting for one while the limit is reached; false once the listener
// is closed.
func (l *limitListener) acquire() bool {
	select {
	case <-l.done:
		return false
	case l.sem <- struct{}{}:
		return true
	default:
	}
	if l.log != nil {
		l.log.Warn("connection limit reached: new connections wait until one closes (raise --max-connections if clients are legitimate)",
			"maxConnections", cap(l.sem))
	}
	select {
	case <-l.done:
		return false
	case l.sem <- struct{}{}:
		return true
	}
}

func (l *limitListener) release() { <-l.sem }

// Accept waits for a free slot, then accepts a connection whose Close frees it.
func (l *limitListener) Accept() (net.Conn, error) {
	if !l.acquire() {
		// Closed: Accept on the closed listener returns the error net/http expects.
		return l.Listener.Accept()
	}
	c, err := l.Listener.Accept()
	if err != nil {
		l.release()
		return nil, err
	}
	return &limitConn{Conn: c, release: l.release}, nil
}

// Close closes the listener and wakes an Accept waiting for a slot.
func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
