package disk_test

import (
	"os"
	"syscall"
)

// datasync syncs f's data (fdatasync(2)), as pebble syncs its log.
func datasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
