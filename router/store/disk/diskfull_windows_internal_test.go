//go:build windows

package disk

import (
	"fmt"
	"io/fs"
	"syscall"
	"testing"
)

// A write Windows failed because the disk is full (ERROR_DISK_FULL, ERROR_HANDLE_DISK_FULL)
// is a full disk, answered 507, and an access denial is not.
func TestWindowsDiskFullErrors(t *testing.T) {
	for _, tc := range []struct {
		errno syscall.Errno
		full  bool
	}{{112, true}, {39, true}, {5, false}} {
		err := fmt.Errorf("pebble: %w", &fs.PathError{Op: "write", Path: `C:\egrid\000042.log`, Err: tc.errno})
		if got := diskFull(err); got != tc.full {
			t.Errorf("diskFull(errno %d) = %v, want %v", tc.errno, got, tc.full)
		}
	}
}
