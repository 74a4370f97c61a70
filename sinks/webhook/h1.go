package webhook

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"
)

// transport is the round tripper of the clients [NewClient] makes. Most requests go to
// net/http's Transport. A plain-http request with a small body and no proxy goes to the
// direct pool instead, which makes the round trip on the caller's goroutine, on a kept-alive
// connection of its own: it writes the request and reads the answer with the standard
// library's own HTTP/1.1 wire code ([http.Request.Write], [http.ReadResponse]), or, for the
// shapes nearly every request and answer has, with code of its own that writes and reads the
// same bytes in a fraction of the CPU (h1_wire.go).
// net/http's Transport hands each request to a connection's write goroutine and its answer
// back from the connection's read goroutine, two hand-offs between goroutines per request that
// cost about as much CPU as egrid's own work per delivered event when deliveries are not
// batched (see the README's benchmark notes).
//
// Everything else stays on net/http's Transport: https (HTTP/2, TLS), proxied URLs, and
// bodies over maxDirectBody, which net/http writes while it already reads the answer, so an
// endpoint answering 413 before it has read a large request still gets its answer seen.
type transport struct {
	*http.Transport
	direct *directPool
}

// maxDirectBody is the largest request body the direct pool sends: one write into the
// connection's send buffer (Linux starts every TCP socket with 16 KiB), so the request is on
// its way before the answer is read.
const maxDirectBody = 16 << 10

// RoundTrip implements [http.RoundTripper].
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.sendsDirectly(req) {
		return t.direct.roundTrip(req)
	}
	return t.Transport.RoundTrip(req)
}

// sendsDirectly reports whether req goes to the direct pool: plain http, no proxy for its
// URL, and no body or one of at most maxDirectBody bytes that can be sent again (GetBody).
func (t *transport) sendsDirectly(req *http.Request) bool {
	if t.direct == nil || req.URL == nil || req.URL.Scheme != "http" || req.URL.Host == "" {
		return false
	}
	if req.Body != nil && req.Body != http.NoBody && (req.ContentLength <= 0 || req.ContentLength > maxDirectBody || req.GetBody == nil) {
		return false
	}
	if t.Proxy != nil {
		if u, err := t.Proxy(req); u != nil || err != nil {
			return false
		}
	}
	return true
}

// CloseIdleConnections closes the idle connections of both.
func (t *transport) CloseIdleConnections() {
	t.Transport.CloseIdleConnections()
	if t.direct != nil {
		t.direct.closeIdle()
	}
}

// directPool keeps idle HTTP/1.1 connections per host:port, the most recently used first
// (so a quiet period lets the oldest time out). It is safe for concurrent use.
type directPool struct {
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	maxPerHost  int
	maxIdle     int
	idleTimeout time.Duration
	probeAfter  time.Duration // see probeAfter

	mu    sync.Mutex
	idle  map[string][]*directConn // by host:port, oldest first
	count int                      // idle connections in all
	timer *time.Timer              // closes connections idle for idleTimeout; nil while none are
}

type directConn struct {
	c    net.Conn
	key  string
	br   *bufio.Reader // reads through the connection's counting reader
	bw   *bufio.Writer
	read int64 // bytes read from c
	// headEnd, while an answer's head is read, is the value of read past which the head is
	// too large (see maxResponseHeaderBytes); zero while a body is read.
	headEnd int64
	idleAt  time.Time
}

// maxResponseHeaderBytes bounds the head of an answer (status line and headers, informational
// answers before it included) on both paths: the direct pool's reads stop there, and
// [NewClient] gives it to net/http's Transport as its MaxResponseHeaderBytes (over HTTP/2, the
// header list size it announces). http.ReadResponse itself reads a head of any size, and
// net/http's default bound, 10 MiB, let one attempt allocate 114-164 MB parsing a head of
// small header lines (a map entry and strings per line): a hostile endpoint answering every
// attempt of many subscriptions that way held gigabytes. 64 KiB is the bound egrid's own
// server puts on a request's headers (httpserver.DefaultMaxHeaderBytes) and the most of a
// body the sink drains; real endpoints answer with a few hundred bytes of headers, and the
// proxies in front of them refuse far less than this (nginx's 4-8 KiB proxy buffer, 32 KiB
// at AWS's load balancers).
const maxResponseHeaderBytes = 64 << 10

// errHeadTooLarge is the failure of an attempt whose answer's head exceeds
// maxResponseHeaderBytes, in net/http's words.
var errHeadTooLarge = fmt.Errorf("net/http: server response headers exceeded %d bytes; aborted", maxResponseHeaderBytes)

// Read reads from the connection, counting the bytes; while an answer's head is read, no
// further than its limit.
func (pc *directConn) Read(b []byte) (int, error) {
	if pc.headEnd > 0 {
		left := pc.headEnd - pc.read
		if left <= 0 {
			return 0, errHeadTooLarge
		}
		if int64(len(b)) > left {
			b = b[:left]
		}
	}
	n, err := pc.c.Read(b)
	pc.read += int64(n)
	return n, err
}

func newDirectPool(dial func(ctx context.Context, network, addr string) (net.Conn, error), maxPerHost, maxIdle int, idleTimeout time.Duration) *directPool {
	if dial == nil { // as net/http's Transport dials without a DialContext
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	return &directPool{dial: dial, maxPerHost: maxPerHost, maxIdle: maxIdle, idleTimeout: idleTimeout, probeAfter: probeAfter, idle: make(map[string][]*directConn)}
}

// hostPort is the address of req's URL as net/http dials it: port 80 when none is given.
func hostPort(req *http.Request) string {
	host, port := req.URL.Hostname(), req.URL.Port()
	if port != "" && strings.IndexByte(host, ':') < 0 && len(host)+1+len(port) == len(req.URL.Host) {
		return req.URL.Host // name:port as it is, without building it again per request
	}
	if port == "" {
		port = "80"
	}
	return net.JoinHostPort(host, port)
}

// roundTrip sends req on an idle connection to its host, or a new one, and reads the
// answer's head; the body is read by the caller (see directBody). A connection idle for a
// second or more is looked at first (take), so one the endpoint closed meanwhile (its
// keep-alive timeout passed) is not used. One it closes as the request goes out, or within
// that second, fails before any answer arrives: the request is then sent once more on a new
// connection, as net/http does for a connection its read goroutine saw closed. In the rare
// case that the endpoint read the request and closed the connection without answering, that
// second send is a duplicate delivery, which Event Grid's at-least-once delivery allows and
// the retry policy would have made anyway, later.
func (p *directPool) roundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if err := validHeader(req.Header); err != nil {
		closeBody(req)
		return nil, err
	}
	key := hostPort(req)
	for try := 0; ; try++ {
		pc := p.take(key)
		reused := pc != nil
		if pc == nil {
			c, err := p.dial(ctx, "tcp", key)
			if err != nil {
				closeBody(req)
				return nil, err
			}
			pc = &directConn{c: c, key: key, bw: bufio.NewWriter(c)}
			pc.br = bufio.NewReader(pc)
		}
		if try > 0 && req.Body != nil && req.Body != http.NoBody {
			// A copy with the body again: RoundTrip does not change the caller's request.
			body, err := req.GetBody()
			if err != nil {
				_ = pc.c.Close()
				return nil, err
			}
			again := new(http.Request)
			*again = *req
			again.Body = body
			req = again
		}
		before := pc.read
		resp, err := p.exchange(ctx, pc, req)
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if !reused || try > 0 || pc.read != before || !closedBeforeAnswer(err) {
			return nil, err
		}
	}
}

// exchange writes req on pc and reads the head of its answer. On failure it closes pc.
func (p *directPool) exchange(ctx context.Context, pc *directConn, req *http.Request) (*http.Response, error) {
	// The context ends a blocked write or read by moving the connection's deadline to the
	// past; the connection is then closed, never reused.
	stop := context.AfterFunc(ctx, func() { _ = pc.c.SetDeadline(time.Unix(1, 0)) })
	fail := func(err error) (*http.Response, error) {
		stop()
		_ = pc.c.Close()
		return nil, err
	}
	if err := writeRequest(pc.bw, req); err != nil {
		return fail(err)
	}
	if err := pc.bw.Flush(); err != nil {
		return fail(err)
	}
	pc.headEnd = pc.read + maxResponseHeaderBytes
	resp, err := readResponse(pc.br, req)
	// Informational answers (100 Continue, 103 Early Hints) come before the real one, and
	// net/http skips them too.
	for n := 0; err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols; n++ {
		if n == 5 {
			return fail(errors.New("too many 1xx informational responses"))
		}
		resp, err = readResponse(pc.br, req)
	}
	if err != nil && pc.read >= pc.headEnd {
		// The head reached its bound: whatever net/textproto made of the line cut there
		// (a "malformed MIME header"), the failure is the head's size.
		err = errHeadTooLarge
	}
	pc.headEnd = 0
	if err != nil {
		return fail(err)
	}
	keep := !resp.Close && !req.Close && resp.StatusCode != http.StatusSwitchingProtocols
	resp.Body = &directBody{r: resp.Body, pc: pc, p: p, stop: stop, keep: keep, eof: resp.Body == http.NoBody}
	return resp, nil
}

// closedBeforeAnswer reports whether err, met before any byte of an answer was read, says
// the endpoint closed the connection: an end of the stream where the status line should be
// (ReadResponse reports it as unexpected), or a reset or broken pipe.
func closedBeforeAnswer(err error) bool {
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// validHeader refuses a header net/http's Transport would refuse: a name that is not a token,
// or a value with a control character, which would let it write another header line.
func validHeader(h http.Header) error {
	for name, values := range h {
		if !validHeaderName(name) {
			return fmt.Errorf("net/http: invalid header field name %q", name)
		}
		for _, v := range values {
			if !validHeaderValue(v) {
				return fmt.Errorf("net/http: invalid header field value for %q", name)
			}
		}
	}
	return nil
}

// directBody is an answer's body: closing it after reading it to its end puts the connection
// back in the pool, unless the context ended meanwhile or either side asked to close it.
// Closing it before its end closes the connection and reads nothing more, as net/http's
// Transport does: the bodies [http.ReadResponse] makes (chunked ones, and those with a
// Content-Length it reads itself) read on to their end when closed, which for an endpoint
// that streams without end lasted until the attempt timeout.
type directBody struct {
	r    io.ReadCloser
	pc   *directConn
	p    *directPool
	stop func() bool
	keep bool
	eof  bool
	done bool
}

func (b *directBody) Read(buf []byte) (int, error) {
	if b.done {
		return 0, errors.New("http: read on closed response body")
	}
	n, err := b.r.Read(buf)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *directBody) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	if !b.eof {
		b.stop()
		return b.pc.c.Close()
	}
	_ = b.r.Close() // at its end: reads nothing more
	// Bytes already waiting after the answer were not asked for (net/http's read goroutine
	// drops such a connection too): the next request must not read them as its answer.
	if b.stop() && b.keep && b.pc.br.Buffered() == 0 {
		b.p.put(b.pc)
		return nil
	}
	return b.pc.c.Close()
}

// probeAfter is how long a connection must have been idle before take looks whether the
// endpoint closed it meanwhile. Endpoints close idle connections after seconds (Node.js after
// 5 s, nginx after 75 s), so one used within the last second is sent on without a look: the
// look is a system call, and a busy subscription reuses its connections every few
// milliseconds.
const probeAfter = time.Second

// take returns the most recently used idle connection to key that the endpoint has not
// closed as far as can be seen, or nil. Those it finds closed it closes.
func (p *directPool) take(key string) *directConn {
	for {
		p.mu.Lock()
		conns := p.idle[key]
		if len(conns) == 0 {
			p.mu.Unlock()
			return nil
		}
		pc := conns[len(conns)-1]
		conns[len(conns)-1] = nil
		if len(conns) == 1 {
			delete(p.idle, key)
		} else {
			p.idle[key] = conns[:len(conns)-1]
		}
		p.count--
		p.mu.Unlock()
		if time.Since(pc.idleAt) < p.probeAfter || !peerGone(pc.c) {
			return pc
		}
		_ = pc.c.Close()
	}
}

// put keeps pc for the next request to its host, or closes it when the pool is full.
func (p *directPool) put(pc *directConn) {
	pc.idleAt = time.Now()
	p.mu.Lock()
	conns := p.idle[pc.key]
	if len(conns) >= p.maxPerHost || p.count >= p.maxIdle {
		p.mu.Unlock()
		_ = pc.c.Close()
		return
	}
	p.idle[pc.key] = append(conns, pc)
	p.count++
	if p.timer == nil {
		p.timer = time.AfterFunc(p.idleTimeout, p.expire)
	}
	p.mu.Unlock()
}

// expire closes the connections idle for idleTimeout and looks again when the next one will
// be.
func (p *directPool) expire() {
	now := time.Now()
	var old []*directConn
	p.mu.Lock()
	next := time.Duration(0)
	for key, conns := range p.idle {
		n := 0
		for n < len(conns) && now.Sub(conns[n].idleAt) >= p.idleTimeout {
			n++
		}
		old = append(old, conns[:n]...)
		if n == len(conns) {
			delete(p.idle, key)
			continue
		}
		p.idle[key] = append(conns[:0], conns[n:]...)
		clear(conns[len(conns)-n:])
		if wait := p.idleTimeout - now.Sub(p.idle[key][0].idleAt); next == 0 || wait < next {
			next = wait
		}
	}
	p.count -= len(old)
	if next > 0 {
		p.timer = time.AfterFunc(next, p.expire)
	} else {
		p.timer = nil
	}
	p.mu.Unlock()
	for _, pc := range old {
		_ = pc.c.Close()
	}
}

// closeIdle closes every idle connection.
func (p *directPool) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = make(map[string][]*directConn)
	p.count = 0
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	p.mu.Unlock()
	for _, conns := range idle {
		for _, pc := range conns {
			_ = pc.c.Close()
		}
	}
}
