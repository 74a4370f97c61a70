//go:build !unix

package main

import "errors"

// volumeBytes is not implemented here: the embedded store checks no free space on this
// platform either (see router/store/disk).
func volumeBytes(string) (uint64, error) { return 0, errors.ErrUnsupported }
