package disk

import "github.com/cockroachdb/pebble/v2/vfs"

// OpenFS is Open on the file system fs (an in-memory or fault-injecting one), for tests.
func OpenFS(dir string, opts Options, fs vfs.FS) (*Store, error) {
	opts.fs = fs
	return Open(dir, opts)
}
