package testkit

import (
	"os/exec"
	"runtime"
)

// startChild starts cmd as a server process that must not outlive the test binary and returns
// a channel closed once the process has exited and been waited for.
//
// t.Cleanup alone does not stop such a process: when `go test -timeout` fires, a panic escapes
// a test or the binary is killed, the binary exits without running cleanups, and the server
// would keep running (reparented to init) with its data directory. So on Linux the process is
// started with a parent-death signal (SIGKILL, see child_linux.go). Elsewhere it is not: the
// server then outlives a test binary that dies without its cleanups.
//
// Linux sends the parent-death signal when the thread that started the process exits, not
// the whole process (prctl(2), PR_SET_PDEATHSIG; golang/go#27505). A Go program's threads are
// shared by goroutines, and the runtime ends a thread whenever a goroutine returns while it is
// locked to it (runtime.LockOSThread without Unlock, as some libraries do). So the process is
// started, and waited for, by a goroutine of its own that holds its thread locked for the
// process's whole life: no other goroutine runs on that thread, so none can end it, and the
// goroutine unlocks it (returning the thread to the runtime) only after the process has
// exited. A lock held so costs one idle thread per running server.
func startChild(cmd *exec.Cmd) (exited <-chan struct{}, err error) {
	setParentDeathSignal(cmd)
	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return done, nil
}
