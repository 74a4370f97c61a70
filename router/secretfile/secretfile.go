package secretfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
)

// MaxSize bounds a secret file: it holds one secret (a token, a key, a password, a PEM
// private key), so 64 KiB is ample, and a path naming something larger is refused rather than
// read into memory whole.
const MaxSize = 64 << 10

// ErrNotRegular is wrapped by Read's error when the path names something other than a
// regular file: a directory, a named pipe, a socket or a device.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is wrapped by Read's error when the file is over [MaxSize].
var ErrTooLarge = errors.New("over 64 KiB")

// Read returns the content of the secret file at path and its mode, both from one open
// descriptor: the mode is the file's whose content is returned. Symbolic links are followed
// (Kubernetes mounts secrets as links into a versioned directory). The error names the path.
func Read(path string) ([]byte, fs.FileMode, error) {
	f, err := os.OpenFile(path, openFlags, 0)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	mode := info.Mode()
	if !mode.IsRegular() {
		return nil, mode, fmt.Errorf("the secret file %s is %s, %w: name the file that holds the secret", path, kind(mode), ErrNotRegular)
	}
	if info.Size() > MaxSize {
		return nil, mode, fmt.Errorf("the secret file %s is %w (%d bytes): it must hold the secret alone; check the path", path, ErrTooLarge, info.Size())
	}
	if err := blocking(f); err != nil {
		return nil, mode, err
	}
	raw, err := io.ReadAll(io.LimitReader(f, MaxSize+1)) // the size fstat gave may be stale
	if err != nil {
		return nil, mode, err
	}
	if len(raw) > MaxSize {
		return nil, mode, fmt.Errorf("the secret file %s is %w: it must hold the secret alone; check the path", path, ErrTooLarge)
	}
	return raw, mode, nil
}

// Exposed reports whether mode lets group or others read, write or enter the file: the
// policy every secret file is judged by (chmod 600 is the remedy). On Windows it is false:
// access there is set by the file's ACL, which the mode does not show (Go reports every
// writable file as 0666 and every read-only one as 0444), so no key file would pass.
func Exposed(mode fs.FileMode) bool {
	return runtime.GOOS != "windows" && mode.Perm()&0o077 != 0
}

// kind names what a mode that is not a regular file's describes.
func kind(mode fs.FileMode) string {
	switch {
	case mode.IsDir():
		return "a directory"
	case mode&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case mode&fs.ModeSocket != 0:
		return "a socket"
	case mode&fs.ModeDevice != 0, mode&fs.ModeCharDevice != 0:
		return "a device"
	}
	return "a special file (" + mode.Type().String() + ")"
}
