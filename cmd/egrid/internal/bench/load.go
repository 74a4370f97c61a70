package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// loadClient is the load generator's HTTP client: keep-alive, enough idle connections.
func loadClient(conc int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConns: conc * 2, MaxIdleConnsPerHost: conc * 2, DisableCompression: true,
	}}
}

// eventBody returns a JSON array of n Event Grid events of about 1 KB each. Their ids are
// idPrefix, the request number's [idDigits] digits (zeros here; see [requestBodies]) and the
// event's index.
func eventBody(n int, idPrefix string, subject string) []byte {
	pad := strings.Repeat("x", 820)
	var b bytes.Buffer
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":"%s-%s-%d","subject":%q,"eventType":"Bench.Event","eventTime":"2026-01-01T00:00:00Z","dataVersion":"1.0","data":{"pad":%q,"sent":0}}`, idPrefix, idZeros, i, subject, pad)
	}
	b.WriteByte(']')
	return b.Bytes()
}

// idDigits is how many hex digits of a request's number each event id of the load
// generator's bodies carries.
const idDigits = 12

var idZeros = strings.Repeat("0", idDigits)

// requestBodies numbers a load generator's requests into their events' ids, so that every
// event has an id of its own, in no particular order, as publishers' (GUIDs, typically) have:
// egrid keeps a delivery history per event id, and a body posted unchanged made every request
// overwrite the same 100 histories. Each goroutine fills its own copy of the body between requests; net/http is done
// with a request's body once its response's body has been read and closed.
type requestBodies struct {
	body []byte
	ids  []int         // where the request number's digits go in body
	n    atomic.Uint64 // requests numbered so far
}

// newRequestBodies finds the request-number digits of a body from eventBody or
// cloudEventBody. A body without them is sent unchanged.
func newRequestBodies(body []byte) *requestBodies {
	rb := &requestBodies{body: body}
	const field = `"id":"`
	for off := 0; ; {
		i := bytes.Index(body[off:], []byte(field))
		if i < 0 {
			break
		}
		off += i + len(field)
		dash := bytes.IndexByte(body[off:], '-')
		if dash < 0 {
			break
		}
		if d := off + dash + 1; d+idDigits <= len(body) && string(body[d:d+idDigits]) == idZeros {
			rb.ids = append(rb.ids, d)
		}
	}
	return rb
}

// fill writes the next request's number into buf, a copy of rb.body.
func (rb *requestBodies) fill(buf []byte) {
	if len(rb.ids) == 0 {
		return
	}
	var digits [idDigits]byte
	// Scrambled, as GUIDs are in no order: an odd multiplier is a bijection on the 48 bits
	// written, so no two requests share their digits.
	n := rb.n.Add(1) * 0x9e3779b97f4a7c15
	for i := idDigits - 1; i >= 0; i-- {
		digits[i] = "0123456789abcdef"[n&15]
		n >>= 4
	}
	for _, at := range rb.ids {
		copy(buf[at:at+idDigits], digits[:])
	}
}

// load posts body to url from Concurrency goroutines for d and returns how many requests were
// answered 200 and over how long (loaded.rate: requests/s). Requests in flight at the end of d
// are finished and counted, and the rate is taken over the whole time, so a slow request is
// never thrown away.
func (b *Runner) load(ctx context.Context, label, url string, body []byte, d time.Duration) (loaded, error) {
	return b.loadUpTo(ctx, label, url, body, d, 0)
}

// loadUpTo is load that also stops sending once max requests (max > 0) were answered 200;
// requests already sent are finished and counted, so it may count a few more.
func (b *Runner) loadUpTo(ctx context.Context, label, url string, body []byte, d time.Duration, max int64) (loaded, error) {
	client := loadClient(b.opt.Concurrency)
	defer client.CloseIdleConnections()
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	stop := b.progress(label, func() string { return fmt.Sprintf("%d requests", ok.Load()) })
	bodies := newRequestBodies(body)
	for range b.opt.Concurrency {
		wg.Add(1)
		goWithRole(roleLoadgen, func() {
			defer wg.Done()
			buf := bytes.Clone(body)
			for ctx.Err() == nil && time.Now().Before(deadline) && (max <= 0 || ok.Load() < max) {
				bodies.fill(buf)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(buf))
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					ok.Add(1)
				} else {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	stop()
	elapsed := time.Since(start)
	if ok.Load() == 0 {
		return loaded{}, fmt.Errorf("%s: no request succeeded (%d failed)", label, failed.Load())
	}
	return loaded{ok: ok.Load(), elapsed: elapsed}, nil
}

// loaded is what a load phase had answered 200, and how long it lasted.
type loaded struct {
	ok      int64
	elapsed time.Duration
}

// rate is the phase's answered requests per second.
func (l loaded) rate() float64 {
	if l.elapsed <= 0 {
		return 0
	}
	return float64(l.ok) / l.elapsed.Seconds()
}

// paced posts total single-event requests (body(i) gives the i-th) to url at Rate requests/s,
// at most Concurrency at a time, and returns each answered request's time to its answer.
//
// The pace is a token bucket ([rate.Limiter]) holding 10 ms worth of requests, so a sender
// that fell behind (a slow scheduler, a full pool) catches up by at most that much at once
// instead of losing the requests it missed.
//
// Each of the Concurrency senders keeps one connection and writes its requests and reads
// their answers itself ([pacedConn]), rather than through net/http's client, which wakes a
// connection's writer and reader goroutines besides the caller's for every request: at the
// latency scenario's pace that client took half as much CPU per request as egrid's router
// took per event (80–100 µs against 160, 2026-11-27; these senders take 25–43), and on this
// machine's two cores a publisher's CPU is taken from the router it measures, which a
// publisher on a machine of its own would not.
func (b *Runner) paced(ctx context.Context, label, url string, total int, body func(i int) string) []time.Duration {
	return b.pacedAnswers(ctx, label, url, total, body, nil)
}

// pacedAnswers is paced that also records when the i-th request's answer came (unix
// nanoseconds) in answered[i], when answered is not nil (len total).
func (b *Runner) pacedAnswers(ctx context.Context, label, url string, total int, body func(i int) string, answered []atomic.Int64) (acks []time.Duration) {
	withRole(ctx, roleLoadgen, func(ctx context.Context) { acks = b.pacedLoad(ctx, label, url, total, body, answered) })
	return acks
}

func (b *Runner) pacedLoad(ctx context.Context, label, rawURL string, total int, body func(i int) string, answered []atomic.Int64) []time.Duration {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "http" {
		fmt.Fprintf(b.opt.Progress, "   %s: %s is not a plain http URL\n", label, rawURL)
		return nil
	}
	conns := &pacedConns{addr: u.Host, head: "POST " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host +
		"\r\nContent-Type: application/json\r\nContent-Length: "}
	defer conns.closeAll()
	stopOnCancel := context.AfterFunc(ctx, conns.closeAll)
	defer stopOnCancel()
	limiter := rate.NewLimiter(rate.Limit(b.opt.Rate), max(1, b.opt.Rate/100))
	jobs := make(chan int) // unbuffered: the pacer waits while every sender is busy
	var mu sync.Mutex
	var acks []time.Duration
	var wg sync.WaitGroup
	stop := b.progress(label, func() string { mu.Lock(); defer mu.Unlock(); return fmt.Sprintf("%d answered", len(acks)) })
	defer stop()
	for range b.opt.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var pc pacedConn
			for i := range jobs {
				payload := body(i)
				sent := time.Now()
				if err := conns.post(&pc, payload); err != nil {
					continue
				}
				now := time.Now()
				if answered != nil {
					answered[i].Store(now.UnixNano())
				}
				mu.Lock()
				acks = append(acks, now.Sub(sent))
				mu.Unlock()
			}
			conns.drop(&pc)
		}()
	}
	for i := 0; i < total; i++ {
		if limiter.Wait(ctx) != nil {
			break
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return acks
}

// pacedConns are the paced senders' connections to one address; closeAll ends them all
// (when the run's context ends, so a sender waiting for an answer stops waiting).
type pacedConns struct {
	addr string
	head string // the request line and the headers up to Content-Length's value

	mu     sync.Mutex
	open   map[*pacedConn]bool
	closed bool
}

// pacedConn is one sender's keep-alive connection; nil c until it is dialled.
type pacedConn struct {
	c  net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

// post sends one request with body on pc, dialling it first when it has no connection, and
// reads the answer; anything but a 200 is an error. A connection that failed, or that the
// server asks to close, is closed and dialled again for the next request.
func (cs *pacedConns) post(pc *pacedConn, body string) error {
	if pc.c == nil {
		c, err := net.Dial("tcp", cs.addr)
		if err != nil {
			return err
		}
		cs.mu.Lock()
		if cs.closed {
			cs.mu.Unlock()
			_ = c.Close()
			return net.ErrClosed
		}
		if cs.open == nil {
			cs.open = make(map[*pacedConn]bool)
		}
		cs.open[pc] = true
		pc.c, pc.br, pc.bw = c, bufio.NewReader(c), bufio.NewWriterSize(c, 4<<10)
		cs.mu.Unlock()
	}
	pc.bw.WriteString(cs.head)
	pc.bw.Write(strconv.AppendInt(pc.bw.AvailableBuffer(), int64(len(body)), 10))
	pc.bw.WriteString("\r\n\r\n")
	pc.bw.WriteString(body)
	if err := pc.bw.Flush(); err != nil {
		cs.drop(pc)
		return err
	}
	resp, err := http.ReadResponse(pc.br, nil)
	if err != nil {
		cs.drop(pc)
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.Close {
		cs.drop(pc)
	}
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("answered %s", resp.Status)
	}
	return err
}

// drop closes pc's connection, if it has one.
func (cs *pacedConns) drop(pc *pacedConn) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if pc.c != nil {
		_ = pc.c.Close()
		delete(cs.open, pc)
		pc.c = nil
	}
}

// closeAll closes every connection and refuses new ones.
func (cs *pacedConns) closeAll() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.closed = true
	for pc := range cs.open {
		_ = pc.c.Close()
	}
	clear(cs.open)
}

// progress prints a live line every second until stop is called.
func (b *Runner) progress(label string, status func() string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		start := time.Now()
		for {
			select {
			case <-done:
				fmt.Fprintf(b.opt.Progress, "\r   %-28s %s in %s\n", label, status(), time.Since(start).Round(time.Millisecond))
				return
			case <-t.C:
				fmt.Fprintf(b.opt.Progress, "\r   %-28s %s ...", label, status())
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// drain waits until count() reaches want, bound passes or ctx ends, looking every 5 ms; it
// returns when the last progress happened (now, once want is reached).
func (b *Runner) drain(ctx context.Context, label string, count func() int64, want int64, bound time.Duration) time.Time {
	stop := b.progress(label, func() string { return fmt.Sprintf("%d/%d", count(), want) })
	defer stop()
	timeout := time.NewTimer(bound)
	defer timeout.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	last, lastN := time.Now(), count()
	for {
		n := count()
		if n != lastN {
			last, lastN = time.Now(), n
		}
		if n >= want {
			return time.Now()
		}
		select {
		case <-tick.C:
		case <-timeout.C:
			return last
		case <-ctx.Done():
			return last
		}
	}
}
