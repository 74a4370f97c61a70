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

// volumeBytes returns the size of the file system holding dir.
func volumeBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return uint64(st.Blocks) * uint64(st.Bsize), nil //nolint:unconvert // field types differ by platform
}

// allocatedBytes returns the disk space path's blocks take, which a preallocated file holds
// beyond its size.
func allocatedBytes(path string) (uint64, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, false
	}
	return uint64(st.Blocks) * 512, true //nolint:unconvert // field types differ by platform
}
