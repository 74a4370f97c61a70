//go:build unix

package webhook_test

import (
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user and system CPU time so far (getrusage).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
