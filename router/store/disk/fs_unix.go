//go:build unix

package disk

import "syscall"

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
