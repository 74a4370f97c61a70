package testkit

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/sinks/blob"
)

// MinIOVersion is the MinIO server StartMinIO builds when no `minio` binary is found: a
// module version of github.com/minio/minio known to build with this Go and to work with
// minio-go v7.
const MinIOVersion = "v0.0.0-20260212201848-7aac2a2c5b7c"

// MinIO is a MinIO server started for a test by [StartMinIO]. Its data lives in a temporary
// directory that survives [MinIO.Stop] and [MinIO.Start], so a test can take the server away
// and bring it back.
type MinIO struct {
	// Endpoint is the server's host:port on 127.0.0.1.
	Endpoint string
	// AccessKey and SecretKey are the root credentials, random for each server.
	AccessKey, SecretKey string

	t       testing.TB
	bin     string
	dataDir string
	console string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done <-chan struct{} // closed when cmd has exited
	log  bytes.Buffer
}

// StartMinIO starts a real MinIO server on a free 127.0.0.1 port with a temporary data
// directory, waits until it answers, and stops it when the test ends. On Linux the server
// also dies with the test binary when that exits without running cleanups (`go test -timeout`,
// an escaped panic, a kill); elsewhere it is then left running. A server answering on the
// port that is not the one started (another test's, which took the port first) is not taken
// for it: the start is tried again on other ports. It is for integration tests, which run
// outside synctest bubbles and assert outcomes, never timings.
//
// The server binary is, in order: $EGRID_MINIO_BIN; `minio` on PATH; or a build of
// github.com/minio/minio@[MinIOVersion] kept in the user cache directory
// (<cache>/egrid/minio-<version>/minio). The first test that needs it builds it with
// `go install` under a file lock, so parallel test packages share one build; that takes 2-4
// minutes and about 1.5 GB of memory once, and the test log says so. When the binary can be
// neither found nor built (no Go toolchain, no module proxy), the test is skipped with the
// reason — except under CI=true, where it fails.
func StartMinIO(t testing.TB) *MinIO {
	t.Helper()
	return startMinIO(t, func() (api, console string) { return freeAddr(t), freeAddr(t) })
}

// minioTries is how many address pairs StartMinIO tries: a port found free can be taken by
// another process before the server binds it, and the server then exits.
const minioTries = 3

// startMinIO is [StartMinIO] with the server's API and console addresses for each try taken
// from addrs.
func startMinIO(t testing.TB, addrs func() (api, console string)) *MinIO {
	t.Helper()
	bin, err := minioBinary(t)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no MinIO server for this test (CI=true never skips): %v", err)
		}
		t.Skipf("skipping: no MinIO server: %v (install minio on PATH or set EGRID_MINIO_BIN)", err)
	}
	// Credentials of its own, so that a server of another test which took the port first
	// refuses them rather than pass for this one.
	m := &MinIO{t: t, bin: bin, dataDir: t.TempDir(), AccessKey: "egrid-" + randomHex(t, 6), SecretKey: randomHex(t, 20)}
	t.Cleanup(m.Stop)
	for try := 1; ; try++ {
		m.Endpoint, m.console = addrs()
		err := m.start()
		if err == nil {
			return m
		}
		if try == minioTries {
			t.Fatalf("starting MinIO: %v\n%s", err, m.output())
		}
		t.Logf("starting MinIO on %s failed (%v); trying another port", m.Endpoint, err)
	}
}

// randomHex returns n random bytes in hex.
func randomHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("making MinIO credentials: %v", err)
	}
	return hex.EncodeToString(b)
}

// Config returns a dead-letter store config for the server, creating buckets on first use.
func (m *MinIO) Config() blob.Config {
	return blob.Config{Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: m.SecretKey, CreateBuckets: true}
}

// Store returns a [blob.Store] on the server.
func (m *MinIO) Store() *blob.Store {
	m.t.Helper()
	s, err := blob.New(m.Config(), nil)
	if err != nil {
		m.t.Fatalf("minio store: %v", err)
	}
	return s
}

// Stop kills the server; its data stays. Calls while it is stopped fail as with an unreachable
// MinIO. Stop is idempotent.
func (m *MinIO) Stop() {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.cmd = nil
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Start starts a stopped server again on the same address and data directory and waits until
// it answers.
func (m *MinIO) Start() {
	m.t.Helper()
	if err := m.start(); err != nil {
		m.t.Fatalf("restarting MinIO on %s: %v\n%s", m.Endpoint, err, m.output())
	}
}

func (m *MinIO) output() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.log.String()
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (m *MinIO) start() error {
	cmd := exec.Command(m.bin, "server", m.dataDir, "--address", m.Endpoint, "--console-address", m.console, "--quiet")
	cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+m.AccessKey, "MINIO_ROOT_PASSWORD="+m.SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off",
	)
	out := lockedWriter{mu: &m.mu, b: &m.log}
	cmd.Stdout, cmd.Stderr = out, out
	done, err := startChild(cmd)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.cmd, m.done = cmd, done
	m.mu.Unlock()
	if err := m.awaitReady(done); err != nil {
		m.Stop()
		return err
	}
	return nil
}

// awaitReady asks the server for its buckets until it answers, the process exits, or 60 s
// pass. Probing an external process is the one place the test kit waits on the clock.
//
// An answer counts only while our process runs: when another server took the port before ours
// bound it, ours exits, and the answer came from the other one. That one refuses this server's
// credentials (each [StartMinIO] makes its own), so it does not answer in the meantime either.
func (m *MinIO) awaitReady(exited <-chan struct{}) error {
	store, err := blob.New(blob.Config{Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: m.SecretKey}, nil)
	if err != nil {
		return err
	}
	errExited := errors.New("the minio process exited (its port taken by another process?)")
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		last = store.Ping(ctx)
		cancel()
		select {
		case <-exited:
			return errExited
		default:
		}
		if last == nil {
			return nil
		}
		select {
		case <-exited:
			return errExited
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("not answering after 60 s: %v", last)
}

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// minioBinary finds or builds the MinIO server binary.
func minioBinary(t testing.TB) (string, error) {
	if p := os.Getenv("EGRID_MINIO_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("EGRID_MINIO_BIN=%s: %w", p, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("minio"); err == nil {
		return p, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no user cache directory to build minio into: %w", err)
	}
	dir := filepath.Join(cache, "egrid", "minio-"+MinIOVersion)
	bin := filepath.Join(dir, "minio")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	return buildMinIO(t, dir, bin)
}

// buildMinIO builds the server into dir under an exclusive file lock: the first test package
// to get here builds, the others wait for it and then find the binary.
func buildMinIO(t testing.TB, dir, bin string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", errors.New("minio is not installed and there is no Go toolchain to build it")
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("opening the build lock: %w", err)
	}
	defer lock.Close()
	t.Logf("waiting for the MinIO build lock %s", lock.Name())
	if err := lockFile(lock); err != nil {
		return "", fmt.Errorf("locking %s: %w", lock.Name(), err)
	}
	defer unlockFile(lock)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil // another package built it while we waited
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "minio-build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	t.Logf("building the MinIO server github.com/minio/minio@%s into %s: once per machine, 2-4 minutes and ~1.5 GB of memory", MinIOVersion, dir)
	cmd := exec.Command(goBin, "install", "github.com/minio/minio@"+MinIOVersion)
	cmd.Dir = tmp // outside any module, so go.mod is left alone
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("running go install: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return "", fmt.Errorf("building minio failed after %s: %v\n%s", time.Since(start).Round(time.Second), err, tail(out.String(), 2000))
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return "", err
			}
			if err := os.Rename(filepath.Join(tmp, "minio"), bin); err != nil {
				return "", fmt.Errorf("installing the minio binary: %w", err)
			}
			t.Logf("built MinIO in %s: %s", time.Since(start).Round(time.Second), bin)
			return bin, nil
		case <-tick.C:
			t.Logf("still building MinIO (%s so far)", time.Since(start).Round(time.Second))
		}
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// String describes the server for logs.
func (m *MinIO) String() string {
	return "minio " + m.Endpoint + " (data " + m.dataDir + ", pid " + strconv.Itoa(m.pid()) + ")"
}

func (m *MinIO) pid() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil || m.cmd.Process == nil {
		return 0
	}
	return m.cmd.Process.Pid
}
