//go:build unix

package main

import "syscall"

// volumeBytes returns the size of the volume holding dir.
func volumeBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return uint64(st.Blocks) * uint64(st.Bsize), nil //nolint:unconvert // field types differ by platform
}
