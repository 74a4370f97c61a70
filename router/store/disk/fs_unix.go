//go:build unix

package disk

import (
	"errors"
	"io/fs"
	"syscall"
)

func fchmod(fd uintptr, mode uint32) error { return syscall.Fchmod(int(fd), mode) }

// freeBytes returns the bytes available to an unprivileged writer on the file system holding
// dir.
func freeBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil //nolint:unconvert // field types differ by platform
}

// lockHeld reports whether err, from locking a lock file, says another process holds the
// lock: fcntl's F_SETLK answers EAGAIN or EACCES, bare, where a lock file that cannot be
// created (permission denied, a path through a file) is an *fs.PathError.
func lockHeld(err error) bool {
	var pe *fs.PathError
	return err != nil && !errors.As(err, &pe) && (errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES))
}
