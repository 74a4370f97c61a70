//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package webhook

import (
	"net"
	"syscall"
)

// peerGone reports whether c can no longer carry a request: the endpoint closed it (a read
// would return the end of the stream), reset it, or sent bytes nobody asked for. It peeks
// without waiting and without consuming anything; a connection it cannot look into counts
// as usable, and a request sent on it finds out (see directPool.roundTrip).
func peerGone(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	var b [1]byte
	_ = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		gone = n > 0 || err == nil || (err != syscall.EAGAIN && err != syscall.EWOULDBLOCK)
		return true // done: never wait for the descriptor to become readable
	})
	return gone
}
