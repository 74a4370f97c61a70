//go:build unix

package router_test

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time (user and system) the process has used so far. Benchmarks
// report it per event: unlike wall-clock rates it hardly moves when other work shares the
// machine, so it compares a change with its predecessor on a busy host.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
