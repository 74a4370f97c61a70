//go:build unix

package secretfile

import (
	"os"
	"syscall"
)

// openFlags open without waiting: opening a named pipe for reading waits for a writer, which
// would hold the start before the pipe could be refused.
const openFlags = os.O_RDONLY | syscall.O_NONBLOCK

// blocking clears O_NONBLOCK on a regular file before it is read (a regular file's reads
// ignore it on every unix, but a FUSE file system may not).
func blocking(f *os.File) error { return syscall.SetNonblock(int(f.Fd()), false) }
