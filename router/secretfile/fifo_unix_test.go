//go:build unix

package secretfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/egridio/egrid/router/secretfile"
)

// makeFIFO creates a named pipe, private to its owner, in a new directory.
func makeFIFO(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A named pipe is refused at once with an error saying what it is. A read by path would wait
// for a writer (for ever at start); here a writer that opens it and writes a "secret" is
// waiting, so that a read that did wait would return rather than hang the test.
func TestReadRefusesANamedPipe(t *testing.T) {
	p := makeFIFO(t)
	err := readFIFO(t, p, func(p string) error {
		_, _, err := secretfile.Read(p)
		return err
	})
	if !errors.Is(err, secretfile.ErrNotRegular) || !strings.Contains(err.Error(), "the secret file "+p+" is a named pipe (FIFO), not a regular file") {
		t.Fatalf("Read(a FIFO) = %v; want ErrNotRegular naming it", err)
	}
}

// readFIFO calls read(p) with a writer waiting to write "from-the-pipe\n" into the pipe p and
// close it, and returns read's error once the writer is done (released by the test's own
// reader when read did not open the pipe).
func readFIFO(t *testing.T, p string, read func(string) error) error {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		w, err := os.OpenFile(p, os.O_WRONLY, 0) // waits for a reader
		if err != nil {
			return
		}
		_, _ = w.WriteString("from-the-pipe\n")
		w.Close()
	}()
	err := read(p)
	// Release the writer if it is still waiting: a non-blocking reader lets its open return
	// and its write go into the pipe's buffer.
	r, openErr := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if openErr != nil {
		t.Fatal(openErr)
	}
	<-done
	r.Close()
	return err
}
