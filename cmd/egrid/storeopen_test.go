package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// serveOnce runs `egrid serve` in-process on dataDir, for a store that does not open: it
// returns once opening the store failed.
func serveOnce(t *testing.T, dataDir string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	code := run(context.Background(), []string{"egrid", "serve", "--insecure-dev", "--listen", "127.0.0.1:0", "--data-dir", dataDir},
		env{Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }})
	return code, out.String()
}

// TestStoreOpenErrorsSayWhy: a store that does not open says why and what to do, each cause
// its own: a data directory that is a file, one another process holds, one egrid may not
// read or write. Every failure said "is another egrid using it?", and store check on a
// running server's store said only "resource temporarily unavailable".
func TestStoreOpenErrorsSayWhy(t *testing.T) {
	notHeld := "another egrid" // the hint of a held store, wrong for the other causes

	t.Run("not a directory", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "data")
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, dir := range []string{file, filepath.Join(file, "sub")} {
			code, out := serveOnce(t, dir)
			if code != 1 || !strings.Contains(out, file+" is a file, not a directory") || !strings.Contains(out, "--data-dir") || strings.Contains(out, notHeld) {
				t.Errorf("serve --data-dir %s: exit %d, %q; want exit 1 saying %s is a file and to use --data-dir", dir, code, out, file)
			}
		}
		code, out := cliRun(t, "store", "check", "--data-dir", file)
		if code != 2 || !strings.Contains(out, file+" is a file, not a directory") || strings.Contains(out, notHeld) {
			t.Errorf("store check --data-dir %s: exit %d, %q; want exit 2 saying it is a file", file, code, out)
		}
	})

	t.Run("held by another process", func(t *testing.T) {
		data := filepath.Join(t.TempDir(), "data")
		srv := startServer(t, "--insecure-dev", "--data-dir", data)
		code, out := serveOnce(t, data)
		if code != 1 || !strings.Contains(out, "another process holds the store in "+data) || !strings.Contains(out, "--data-dir") {
			t.Errorf("a second serve on a running server's store: exit %d, %q; want exit 1 saying another process holds it", code, out)
		}
		code, out = cliRun(t, "store", "check", "--data-dir", data)
		if code != 2 || !strings.Contains(out, "another process holds the store in "+data) || !strings.Contains(out, "stop the server") || !strings.Contains(out, "a copy") {
			t.Errorf("store check on a running server's store: exit %d, %q; want exit 2 saying a server holds it: stop it or check a copy", code, out)
		}
		srv.stop(t)
		if code, out := cliRun(t, "store", "check", "--data-dir", data); code != 0 {
			t.Errorf("store check once the server stopped: exit %d, %q", code, out)
		}
	})

	t.Run("permission denied", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("running as root, which file permissions do not bind: a directory egrid may not read or write cannot be made")
		}
		for _, mode := range []os.FileMode{0o000, 0o500, 0o300} {
			data := filepath.Join(t.TempDir(), "data")
			if err := os.Mkdir(data, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(data, mode); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.Chmod(data, 0o700) }) // so TempDir's cleanup can remove it
			code, out := serveOnce(t, data)
			if code != 1 || !strings.Contains(out, "permission denied") || !strings.Contains(out, data) ||
				!strings.Contains(out, "read, write and enter") || strings.Contains(out, notHeld) {
				t.Errorf("serve on a data directory of mode %04o: exit %d, %q; want exit 1 naming it and the permission egrid needs", mode, code, out)
			}
		}
	})
}

// A data directory on a read-only file system: egrid serve says so and what to do, where it
// gave the bare "read-only file system"; egrid store check, which writes nothing, is not told
// to remount.
func TestStoreOpenErrorOnAReadOnlyFileSystem(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	cause := fmt.Errorf("opening disk store in %s: %w", dir, &os.PathError{Op: "open", Path: filepath.Join(dir, "LOCK"), Err: syscall.EROFS})
	msg := storeOpenError("opening", dir, cause, false).Error()
	if !strings.Contains(msg, "mounted read-only") || !strings.Contains(msg, "--data-dir") {
		t.Errorf("serve: %q; want the read-only mount named, with what to do", msg)
	}
	if msg := storeOpenError("checking", dir, cause, true).Error(); strings.Contains(msg, "mounted read-only") {
		t.Errorf("store check: %q; want no remount advice", msg)
	}
}
