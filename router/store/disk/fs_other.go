//go:build !unix

package disk

import "errors"

func fchmod(uintptr, uint32) error { return nil }

func freeBytes(string) (uint64, error) { return 0, errors.ErrUnsupported }

// lockHeld reports whether err, from locking a lock file, says another process holds the
// lock: not known on this platform.
func lockHeld(error) bool { return false }

func volumeBytes(string) (uint64, error) { return 0, errors.ErrUnsupported }

func allocatedBytes(string) (uint64, bool) { return 0, false }
