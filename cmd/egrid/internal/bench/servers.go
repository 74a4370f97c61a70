package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas/bufpool"
)

// sinkServer counts delivered events and answers 200; status and onEvent let a scenario
// decide per path. It reads each body into a pooled buffer, as egrid reads a publish, so the
// sink spends as little as it can of the cores both sides of a comparison share; onEvent must
// not keep the body after it returns.
type sinkServer struct {
	srv      *http.Server
	url      string
	events   atomic.Int64
	requests atomic.Int64
	onEvent  func(path string, body []byte)
	status   func(path string) int
}

func startSink() (*sinkServer, error) {
	s := &sinkServer{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.url = "http://" + ln.Addr().String()
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := bufpool.Get(int(max(r.ContentLength, 0)) + 1)
		defer bufpool.Put(buf)
		body, _ := readInto(*buf, r.Body)
		*buf = body
		if s.status != nil {
			if code := s.status(r.URL.Path); code != http.StatusOK {
				w.WriteHeader(code)
				return
			}
		}
		s.requests.Add(1)
		// Every request's events are counted, the baseline's too (its client counts them for
		// the result), so the sink does the same work for both sides of a comparison.
		if n := countEvents(body); !strings.HasPrefix(r.URL.Path, "/raw") {
			s.events.Add(int64(n))
		}
		if s.onEvent != nil {
			s.onEvent(r.URL.Path, body)
		}
	})}
	goWithRole(roleSink, func() { _ = s.srv.Serve(ln) })
	return s, nil
}

func (s *sinkServer) close() { _ = s.srv.Close() }

// countEvents counts the events in a delivery body: the elements of a JSON array, or 1. It
// skips each string's contents with bytes.IndexByte, as an endpoint's JSON reader would, so
// the sink's share of a run's CPU is its HTTP server's, not this count's.
func countEvents(body []byte) int {
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '[' {
		return 1
	}
	// Events are objects at depth 1.
	n, depth := 0, 0
	for i := 0; i < len(body); i++ {
		switch c := body[i]; c {
		case '"':
			i = stringEnd(body, i+1)
		case '[', '{':
			if depth == 1 && c == '{' {
				n++
			}
			depth++
		case ']', '}':
			depth--
		}
	}
	return n
}

// stringEnd returns the index of the quote that ends the JSON string whose contents start at
// from (len(b) if it never ends): the first quote not escaped by an odd run of backslashes.
func stringEnd(b []byte, from int) int {
	for {
		q := bytes.IndexByte(b[from:], '"')
		if q < 0 {
			return len(b)
		}
		q += from
		esc := 0
		for j := q - 1; j >= from && b[j] == '\\'; j-- {
			esc++
		}
		if esc%2 == 0 {
			return q
		}
		from = q + 1
	}
}

// syncServer is the ingest baseline: it reads each body, appends it to a file and answers once
// it is synced; concurrent requests share one fsync (the same group commit egrid does).
type syncServer struct {
	srv  *http.Server
	url  string
	f    *os.File
	reqs chan syncReq
	done chan struct{}
	fwd  *forwarder // the read+fsync+deliver server's; nil for the others

	mu     sync.Mutex
	synced []time.Duration // how long each fsync took, in order
}

type syncReq struct {
	body []byte
	ok   chan error
}

// startSyncServer starts a read+fsync server with its file in dir. With validate set it is the
// read+validate+fsync server: it runs validate on each body first and answers 400, appending
// nothing, to a body that fails.
func startSyncServer(dir string, validate func(body []byte) error) (*syncServer, error) {
	return startSyncServerWith(dir, syncOptions{validate: validate, role: roleSink})
}

// startForwardServer starts the read+fsync+deliver server: the read+fsync server that, once a
// body is synced, posts it to forward (see [forwarder]). Its goroutines, the forwarder's
// included, carry the role roleForward: it is the part of the run egrid stands in for when
// egrid takes, journals and delivers every event.
func startForwardServer(dir, forward string) (*syncServer, error) {
	return startSyncServerWith(dir, syncOptions{forward: forward, role: roleForward})
}

// syncOptions are what a read+fsync server does beside reading and syncing each body.
type syncOptions struct {
	validate func(body []byte) error // nil: no check
	forward  string                  // "": the body is not delivered on
	role     string                  // the pprof role of its goroutines
}

func startSyncServerWith(dir string, opt syncOptions) (*syncServer, error) {
	f, err := os.CreateTemp(dir, "baseline-*.log")
	if err != nil {
		return nil, err
	}
	s := &syncServer{f: f, reqs: make(chan syncReq, 4096), done: make(chan struct{})}
	goWithRole(opt.role, s.writer)
	if opt.forward != "" {
		s.fwd = startForwarder(opt.role, opt.forward)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.url = "http://" + ln.Addr().String()
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The body is read into a pooled buffer of its announced size, as egrid's publish
		// handler reads it: growing and zeroing a buffer per request (io.ReadAll) cost this
		// baseline about a third of its CPU per event at 100 events per request.
		buf := bufpool.Get(int(max(r.ContentLength, 0)) + 1)
		defer bufpool.Put(buf)
		body, _ := readInto(*buf, r.Body)
		*buf = body
		if opt.validate != nil {
			if err := opt.validate(body); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
		}
		req := syncReq{body: body, ok: make(chan error, 1)}
		s.reqs <- req
		if err := <-req.ok; err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if s.fwd != nil {
			// A copy, as egrid keeps each event's own copy: the pooled buffer goes back
			// once this request is answered.
			s.fwd.bodies <- bytes.Clone(body)
		}
	})}
	goWithRole(opt.role, func() { _ = s.srv.Serve(ln) })
	return s, nil
}

// forwarder delivers the read+fsync+deliver server's synced bodies: forwardWorkers
// goroutines, as many as the deliveries egrid keeps in flight per subscription in the
// latency scenario, each posting one body at a time to url with net/http's client, as a Go
// program would. A body whose post fails is counted, not posted again.
type forwarder struct {
	url    string
	client *http.Client
	bodies chan []byte
	failed atomic.Int64
	wg     sync.WaitGroup
}

// forwardWorkers is how many posts the forwarder has in flight at most.
const forwardWorkers = 64

func startForwarder(role, url string) *forwarder {
	fw := &forwarder{url: url, client: loadClient(forwardWorkers), bodies: make(chan []byte, 1<<16)}
	for range forwardWorkers {
		fw.wg.Add(1)
		goWithRole(role, func() {
			defer fw.wg.Done()
			for body := range fw.bodies {
				if fw.post(body) != nil {
					fw.failed.Add(1)
				}
			}
		})
	}
	return fw
}

func (fw *forwarder) post(body []byte) error {
	req, err := http.NewRequest(http.MethodPost, fw.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := fw.client.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("answered %s", resp.Status)
	}
	return err
}

// close stops the forwarder once it has posted every body it was given.
func (fw *forwarder) close() {
	close(fw.bodies)
	fw.wg.Wait()
	fw.client.CloseIdleConnections()
}

// readInto appends all of r to dst, growing it only when r holds more than its capacity.
func readInto(dst []byte, r io.Reader) ([]byte, error) {
	for {
		if len(dst) == cap(dst) {
			dst = slices.Grow(dst, max(cap(dst), 512))
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

func (s *syncServer) writer() {
	defer close(s.done)
	var batch []syncReq
	for req := range s.reqs {
		batch = append(batch[:0], req)
	gather:
		for {
			select {
			case more, ok := <-s.reqs:
				if !ok {
					break gather
				}
				batch = append(batch, more)
			default:
				break gather
			}
		}
		var err error
		for _, r := range batch {
			if _, werr := s.f.Write(r.body); werr != nil {
				err = werr
			}
		}
		start := time.Now()
		if serr := s.f.Sync(); serr != nil {
			err = serr
		}
		took := time.Since(start)
		s.mu.Lock()
		s.synced = append(s.synced, took)
		s.mu.Unlock()
		for _, r := range batch {
			r.ok <- err
		}
	}
}

// fsyncs returns how long each of the server's fsyncs so far took.
func (s *syncServer) fsyncs() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.synced)
}

func (s *syncServer) close() {
	_ = s.srv.Close()
	close(s.reqs)
	<-s.done
	if s.fwd != nil {
		s.fwd.close()
	}
	_ = s.f.Close()
	_ = os.Remove(s.f.Name())
}

// egridServer is a router on a fresh disk store, served on 127.0.0.1.
type egridServer struct {
	r     *router.Router
	st    *disk.Store
	srv   *http.Server
	url   string
	close func()
}

// tableRow reports what the router's store wrote to table files per event while it took
// (or delivered) events, w being the difference of two readings: the store's write
// amplification besides its log, which takes each event's bytes once (disk.Store.TableWrites,
// exported as egrid_store_table_written_bytes_total).
func tableRow(scenario, per string, w disk.TableWrites, events int64) Result {
	r := Result{Scenario: scenario, Metric: "table bytes written per " + per + " event", Unit: "bytes/event",
		Note: fmt.Sprintf("flushes %.1f MB, compactions %.1f MB (compressed, as stored), for %d events of about 1 KB", float64(w.Flushed)/1e6, float64(w.Compacted)/1e6, events)}
	if events > 0 {
		r.Value = float64(w.Flushed+w.Compacted) / float64(events)
	}
	return r
}

func (b *Runner) startEgrid(cfg router.Config) (*egridServer, error) {
	b.runs++
	dir := filepath.Join(b.opt.Dir, fmt.Sprintf("store-%d", b.runs))
	st, err := disk.Open(dir, disk.Options{FdatasyncLog: b.opt.FdatasyncLog})
	if err != nil {
		return nil, err
	}
	cfg.InsecureDev = true
	cfg.MaxSubscriptionsPerTopic = 1 << 20
	cfg.SkipEndpointValidation = true // the bench's sinks (and its idle 127.0.0.1:9) do not implement the handshake
	r, err := router.New(cfg, router.Deps{Store: st, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		st.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = r.Close(context.Background())
		_ = st.Close()
		return nil, err
	}
	s := &egridServer{r: r, st: st, url: "http://" + ln.Addr().String()}
	s.srv = &http.Server{Handler: httpapi.New(r)}
	go s.srv.Serve(ln)
	s.close = sync.OnceFunc(func() { // a scenario may close it early, then again on return
		_ = s.srv.Close()
		_ = r.Close(context.Background())
		_ = st.Close()
		// Its files go at once: what the page cache still holds of them is then never
		// written back while later scenarios use the disk.
		_ = os.RemoveAll(dir)
	})
	return s, nil
}

// startTopic starts a router with cfg and creates the topic "bench" on it.
func (b *Runner) startTopic(ctx context.Context, cfg router.Config) (*egridServer, error) {
	eg, err := b.startEgrid(cfg)
	if err != nil {
		return nil, err
	}
	if _, err := eg.r.CreateTopic(ctx, "bench", router.TopicSpec{}); err != nil {
		eg.close()
		return nil, err
	}
	return eg, nil
}

// publishURL is the topic's Event Grid publish endpoint.
func (s *egridServer) publishURL() string { return s.url + "/topics/bench/api/events" }
