package testkit

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal has Linux kill cmd's process with SIGKILL when the thread that starts
// it exits; [startChild] keeps that thread alive for as long as the test binary runs the
// process. A new process group is not needed: the servers started so do not start processes
// of their own.
func setParentDeathSignal(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
