//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A secret file that is a named pipe is refused at once with an error saying what it is,
// where the read waited for a writer: serve never started. Here a writer waits to write a
// secret into the pipe, so that a read that did wait returns rather than hanging the test.
func TestSecretFileIsANamedPipe(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "admin-token")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	want := "the secret file " + fifo + " is a named pipe (FIFO), not a regular file"
	for _, c := range []struct {
		name string
		read func() error
		says string
	}{
		{"--admin-token-file", func() error {
			_, err := resolveServe(t, []string{"--admin-token-file", fifo}, nil, serverConfig{})
			return err
		}, "--admin-token-file: " + want},
		{"${file:}", func() error {
			_, err := decodeConfig([]byte("server:\n  adminToken: ${file:"+fifo+"}\n"), func(string) string { return "" })
			return err
		}, "line 2: ${file:" + fifo + "}: " + want},
	} {
		t.Run(c.name, func(t *testing.T) {
			done := make(chan struct{})
			go func() {
				defer close(done)
				w, err := os.OpenFile(fifo, os.O_WRONLY, 0) // waits for a reader
				if err != nil {
					return
				}
				_, _ = w.WriteString("from-the-pipe\n")
				w.Close()
			}()
			err := c.read()
			// Release the writer if it still waits: a non-blocking reader lets its open return.
			r, openErr := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
			if openErr != nil {
				t.Fatal(openErr)
			}
			<-done
			r.Close()
			if err == nil || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("error %v, want one saying %q", err, c.says)
			}
		})
	}
}
