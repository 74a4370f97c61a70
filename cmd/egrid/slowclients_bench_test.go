package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkSlowBodyClients measures how the server stands up to slow-body clients: it opens
// EGRID_SLOW_CLIENTS (default 5 000) connections to `egrid serve` (default limits, a topic
// without keys under --insecure-dev), each sending publish headers announcing a 1 MiB body and
// then EGRID_SLOW_SENT bytes of it (default 256 KiB) and no more, and reports, once every connection has sent that much:
//
//   - held-at-connect: connections the server holds open then (its open descriptors minus
//     those it had before, read from /proc);
//   - publish-ms: how long an ordinary publish on a new connection then took to be answered
//     200 (retried after each 429) while the slow clients stay connected;
//   - held-after-publish, rss-MiB, peak-rss-MiB: connections held and the server's resident
//     memory once that publish was answered, and its peak resident memory over the run.
//
// EGRID_SLOW_BINARY names another egrid binary to measure instead (an older build, to
// compare). Run it with
//
//	go test -run '^$' -bench SlowBodyClients -benchtime 1x ./cmd/egrid/
func BenchmarkSlowBodyClients(b *testing.B) {
	n := 5000
	if v := os.Getenv("EGRID_SLOW_CLIENTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatalf("EGRID_SLOW_CLIENTS=%q: %v", v, err)
		}
	}
	sent := 256 << 10
	if v := os.Getenv("EGRID_SLOW_SENT"); v != "" {
		var err error
		if sent, err = strconv.Atoi(v); err != nil || sent >= 1<<20 {
			b.Fatalf("EGRID_SLOW_SENT=%q: a number of bytes below 1 MiB", v)
		}
	}
	bin := binary
	if v := os.Getenv("EGRID_SLOW_BINARY"); v != "" {
		bin = v
	}
	for b.Loop() {
		slowBodyRun(b, bin, n, sent)
	}
}

func slowBodyRun(b *testing.B, bin string, n, sent int) {
	saved := binary
	binary = bin
	defer func() { binary = saved }()
	srv := startLogged(b, nil, "", "--insecure-dev", "--data-dir", filepath.Join(b.TempDir(), "data"))
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Minute}
	req, _ := http.NewRequest(http.MethodPut, srv.url+"/admin/topics/orders", strings.NewReader(`{"properties":{}}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil || resp.StatusCode/100 != 2 {
		b.Fatalf("creating the topic: %v %v", resp, err)
	}
	resp.Body.Close()
	pid := srv.cmd.Process.Pid
	fdsBefore := countFDs(b, pid)

	u, _ := url.Parse(srv.url)
	head := "POST /topics/orders/api/events?api-version=2018-01-01 HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n" + strings.Repeat(" ", sent)
	conns := make([]net.Conn, n)
	var closed atomic.Int64
	var wg sync.WaitGroup
	work := make(chan int)
	for range 64 {
		wg.Go(func() {
			for i := range work {
				c, err := net.Dial("tcp", u.Host)
				if err != nil {
					b.Errorf("connection %d: %v", i, err)
					continue
				}
				conns[i] = c
				if _, err := io.WriteString(c, head); err != nil {
					closed.Add(1)
					continue
				}
				go func() {
					_, _ = io.Copy(io.Discard, c) // ends when the server closes it
					closed.Add(1)
				}()
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()

	heldAtConnect := countFDs(b, pid) - fdsBefore
	start := time.Now()
	status := 0
	for try := 0; try < 1000; try++ {
		resp, err := client.Post(srv.url+"/topics/orders/api/events?api-version=2018-01-01", "application/json", strings.NewReader(string(eventsBody([]string{fmt.Sprint("e", try)}))))
		if err != nil {
			b.Fatalf("an ordinary publish among the slow clients: %v", err)
		}
		resp.Body.Close()
		status = resp.StatusCode
		if status != http.StatusTooManyRequests {
			break
		}
	}
	publish := time.Since(start)
	rss, peak := memStatus(b, pid)
	held := countFDs(b, pid) - fdsBefore
	b.ReportMetric(float64(heldAtConnect), "held-at-connect")
	b.ReportMetric(float64(held), "held-after-publish")
	b.ReportMetric(float64(rss)/1024, "rss-MiB")
	b.ReportMetric(float64(peak)/1024, "peak-rss-MiB")
	b.ReportMetric(float64(publish.Milliseconds()), "publish-ms")
	b.Logf("%d slow clients (%d KiB of 1 MiB sent): server holds %d connections; an ordinary publish then: %d after %v; then %d connections held, RSS %d MiB (peak %d MiB); %d slow clients closed by the server so far",
		n, sent>>10, heldAtConnect, status, publish.Round(time.Millisecond), held, rss/1024, peak/1024, closed.Load())
}

// countFDs counts the open descriptors of process pid.
func countFDs(b *testing.B, pid int) int {
	es, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		b.Skipf("needs /proc: %v", err)
	}
	return len(es)
}

// memStatus returns VmRSS and VmHWM of process pid, in KiB.
func memStatus(b *testing.B, pid int) (rss, peak int) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Skipf("needs /proc: %v", err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && (f[0] == "VmRSS:" || f[0] == "VmHWM:") {
			v, _ := strconv.Atoi(f[1])
			if f[0] == "VmRSS:" {
				rss = v
			} else {
				peak = v
			}
		}
	}
	return rss, peak
}
