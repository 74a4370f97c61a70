//go:build unix

package httpserver

import "syscall"

// DefaultConnections is the default of [Config.MaxConnections]: [DefaultMaxConnections], or
// half the process's open-file limit (RLIMIT_NOFILE, which the Go runtime raises to the hard
// limit at start) when that is lower, so the store's files and the outgoing deliveries keep
// descriptors when clients hold every connection they may.
func DefaultConnections() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return DefaultMaxConnections
	}
	return max(1, min(DefaultMaxConnections, int(min(lim.Cur, 1<<30)/2)))
}
