package webhook_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/webhook"
)

// endpointEnv, set in this test binary's environment, makes it BenchmarkDeliver's endpoint
// instead of running tests: it serves on 127.0.0.1, prints its address and exits when its
// standard input closes.
const endpointEnv = "EGRID_WEBHOOK_BENCH_ENDPOINT"

func TestMain(m *testing.M) {
	if os.Getenv(endpointEnv) != "" {
		serveBenchEndpoint()
		return
	}
	os.Exit(m.Run())
}

func serveBenchEndpoint() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	})}
	go func() { _ = srv.Serve(ln) }()
	fmt.Println(ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = srv.Close()
}

// startBenchEndpoint runs the endpoint in a child process (this test binary again), so the
// benchmark process's CPU time is the client's alone. It returns the endpoint's address.
func startBenchEndpoint(b *testing.B) string {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), endpointEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = stdin.Close() // the endpoint exits
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("reading the endpoint's address: %v", err)
	}
	return strings.TrimSpace(line)
}

// countingConn counts the writes (one syscall each) a client makes on its connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// BenchmarkDeliver measures one attempt of a single 1 KB Event Grid event to a local endpoint
// over a reused connection: the sink's cost plus the loopback round trip (compare with the
// Go client POST 1 KB anchor in reference/machine-limits.md). The endpoint runs in a child
// process, so cpu-ns/op, this process's user+system CPU time per delivery, is the client
// side alone (the sink and net/http's client), steadier than ns/op on a shared machine.
// writes/op counts the client's writes to the connection: one per request when headers and
// body go out together.
func BenchmarkDeliver(b *testing.B) {
	addr := startBenchEndpoint(b)
	var writes atomic.Int64
	var d net.Dialer
	client := webhook.NewClient(func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, writes: &writes}, nil
	})
	defer client.CloseIdleConnections()
	s, err := webhook.New(webhook.Config{URL: "http://" + addr + "/api/updates?code=secret"}, client)
	if err != nil {
		b.Fatal(err)
	}
	body := append(append([]byte(`[{"id":"evt-1","data":"`), bytes.Repeat([]byte("x"), 1024-27)...), `"}]`...)
	batch := &sinks.Batch{
		Topic: "orders", Subscription: "billing", Schema: schemas.EventGrid,
		Body: body, ContentType: schemas.ContentTypeJSON,
		Events: []*schemas.Event{{ID: "evt-1", Type: "Orders.Created", DataVersion: "1.0", Raw: body[1 : len(body)-1]}},
	}
	ctx := context.Background()
	if err := s.Deliver(ctx, batch); err != nil { // connect before measuring
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	writes.Store(0)
	start := cpuTime(b)
	for b.Loop() {
		if err := s.Deliver(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(writes.Load())/float64(b.N), "writes/op")
}
