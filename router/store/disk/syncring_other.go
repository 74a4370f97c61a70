//go:build !linux

package disk

import "errors"

// syncRing is Linux's; elsewhere the write-ahead log syncs with the file's own sync.
type syncRing struct{}

func newSyncRing() (*syncRing, error) { return nil, errors.ErrUnsupported }

func (*syncRing) close() {}

func (*syncRing) datasync(uintptr) error { return errors.ErrUnsupported }
