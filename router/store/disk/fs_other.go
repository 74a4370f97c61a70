//go:build !unix

package disk

import "errors"

func fchmod(uintptr, uint32) error { return nil }

func freeBytes(string) (uint64, error) { return 0, errors.ErrUnsupported }
