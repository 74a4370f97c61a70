//go:build !linux

package disk_test

import "os"

// datasync syncs f (fsync(2): there is no fdatasync here).
func datasync(f *os.File) error { return f.Sync() }
