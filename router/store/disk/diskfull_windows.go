//go:build windows

package disk

import "syscall"

// diskFullErrnos are the errors Windows fails a write with when the disk is full:
// ERROR_DISK_FULL and ERROR_HANDLE_DISK_FULL. It never returns the ENOSPC that Go's syscall
// package defines for it, so a check for ENOSPC alone would answer 503 where Linux answers 507.
var diskFullErrnos = []error{syscall.Errno(112), syscall.Errno(39)}
