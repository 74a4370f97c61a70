package testkit

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// childTestMode, in the environment, makes TestChildDiesWithTestBinary the test binary that
// starts a child and is then killed.
const childTestMode = "EGRID_TESTKIT_CHILD_TEST"

// A server started by startChild dies with the test binary even when that binary is killed
// and runs no cleanups. The test runs itself again as such a binary, which starts a
// long-running stand-in for MinIO (sleep) through startChild, reports its pid, and is killed.
func TestChildDiesWithTestBinary(t *testing.T) {
	if os.Getenv(childTestMode) != "" {
		sleep := sleepCommand(t)
		if _, err := startChild(sleep); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("child pid %d\n", sleep.Process.Pid)
		_, _ = os.Stdin.Read(make([]byte, 1)) // until killed
		return
	}
	sleepCommand(t) // skip without sleep before starting anything
	bin := exec.Command(os.Args[0], "-test.run=^TestChildDiesWithTestBinary$", "-test.count=1")
	bin.Env = append(os.Environ(), childTestMode+"=1")
	stdin, err := bin.StdinPipe() // open until the binary is killed
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := bin.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	bin.Stderr = os.Stderr
	if err := bin.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = bin.Process.Kill()
		_ = bin.Wait()
		t.Fatalf("the test binary reported no child (%v): %q", err, line)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "child pid ")))
	if err != nil {
		t.Fatalf("reading the child's pid from %q: %v", line, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) }) // when it survived
	if !processAlive(pid) {
		t.Fatalf("the child %d is not running before the test binary is killed", pid)
	}
	_ = bin.Process.Signal(syscall.SIGKILL)
	_ = bin.Wait()
	// The kernel signals the child as the binary exits; it dies a moment later.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(10 * time.Second); processAlive(pid); {
		if time.Now().After(deadline) {
			t.Fatalf("the child %d still runs 10 s after the test binary that started it was killed", pid)
		}
		<-tick.C
	}
}

// The parent-death signal follows the thread that started the process, and the Go runtime
// ends a thread when a goroutine locked to it returns. startChild keeps the process off such
// a thread: a child started from a goroutine that then returns locked survives its thread.
func TestChildSurvivesTheCallersThread(t *testing.T) {
	sleep := sleepCommand(t)
	type started struct {
		exited <-chan struct{}
		tid    int
		err    error
	}
	res := make(chan started, 1)
	var attempt func(chan<- started)
	attempt = func(res chan<- started) {
		runtime.LockOSThread() // and never unlocked: the thread ends with this goroutine
		if syscall.Gettid() == syscall.Getpid() {
			// The runtime never ends the main thread: try from another, holding this one
			// until then so that the other is not it.
			defer runtime.UnlockOSThread()
			other := make(chan started, 1)
			go attempt(other)
			res <- <-other
			return
		}
		exited, err := startChild(sleep)
		res <- started{exited, syscall.Gettid(), err}
	}
	go attempt(res)
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { _ = sleep.Process.Kill(); <-r.exited })
	task := fmt.Sprintf("/proc/self/task/%d", r.tid)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := os.Stat(task); errors.Is(err, os.ErrNotExist) {
			break // the thread has exited, and sent any parent-death signal
		}
		if time.Now().After(deadline) {
			t.Fatalf("the caller's thread %d has not exited after 10 s", r.tid)
		}
		<-tick.C
	}
	// A parent-death SIGKILL already sent makes the process die of it, whatever comes after.
	_ = sleep.Process.Signal(syscall.SIGTERM)
	<-r.exited
	if ws, ok := sleep.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGTERM {
		t.Errorf("the child ended with %v, want killed by our SIGTERM (it died with the thread of the goroutine that started it)", sleep.ProcessState)
	}
}

// sleepCommand is a long-running process to start, or skips the test when there is no sleep.
func sleepCommand(t *testing.T) *exec.Cmd {
	t.Helper()
	p, err := exec.LookPath("sleep")
	if err != nil {
		t.Skipf("skipping: no sleep command to start as a child: %v", err)
	}
	return exec.Command(p, "3600")
}

// processAlive says whether pid runs: it exists and is not a zombie waiting for a parent
// (init in a container may not reap it) to collect it.
func processAlive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...; comm may hold spaces and parentheses, the state follows the last ')'.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return true
	}
	state := s[i+2]
	return state != 'Z' && state != 'X'
}
