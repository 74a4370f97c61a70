//go:build unix

package bench

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time the process has used, user and system: unlike wall-clock
// time it hardly changes when other work shares the machine.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// syncDisks writes back what the file systems hold dirty (sync(2)).
func syncDisks() { syscall.Sync() }
