package webhook

import (
	"errors"
	"io"
	"sync"
)

// errBodyReleased is what a request body read returns once Deliver has returned. net/http
// may go on writing a request body after the response has arrived (the endpoint answered
// early); the batch's buffer belongs to the caller again by then ([sinks.Sink]).
var errBodyReleased = errors.New("webhook: request body read after the attempt ended")

// guardedBody hands out readers over a caller's buffer that stop working at release, so no
// read of the buffer happens after Deliver returns.
type guardedBody struct {
	mu       sync.Mutex
	buf      []byte
	released bool
	first    guardedReader // the first reader, allocated with the guard
	handed   bool
}

func newGuardedBody(buf []byte) *guardedBody {
	g := &guardedBody{buf: buf}
	g.first.g = g
	return g
}

// reader returns a fresh reader from the start of the buffer (http.Request.GetBody may ask
// for another one).
func (g *guardedBody) reader() io.ReadCloser {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.handed {
		g.handed = true
		return &g.first
	}
	return &guardedReader{g: g}
}

// release ends every reader: reads after it return errBodyReleased. It waits for a read in
// progress to finish.
func (g *guardedBody) release() {
	g.mu.Lock()
	g.released = true
	g.buf = nil
	g.mu.Unlock()
}

type guardedReader struct {
	g   *guardedBody
	off int
}

func (r *guardedReader) Read(p []byte) (int, error) {
	r.g.mu.Lock()
	defer r.g.mu.Unlock()
	if r.g.released {
		return 0, errBodyReleased
	}
	if r.off >= len(r.g.buf) {
		return 0, io.EOF
	}
	n := copy(p, r.g.buf[r.off:])
	r.off += n
	return n, nil
}

func (r *guardedReader) Close() error { return nil }
