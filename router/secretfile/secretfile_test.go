package secretfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egridio/egrid/router/secretfile"
)

// write creates a file holding content with mode (whatever the umask) in a new directory.
func write(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// Read returns a regular file's content and its mode; a link is followed to the file.
func TestReadRegularFile(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mode    os.FileMode
		exposed bool
	}{
		{name: "private", mode: 0o600},
		{name: "owner read only", mode: 0o400},
		{name: "readable by others", mode: 0o644, exposed: true},
		{name: "readable by group", mode: 0o640, exposed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := write(t, "s3cret\n", tc.mode)
			got, mode, err := secretfile.Read(p)
			if err != nil || string(got) != "s3cret\n" {
				t.Fatalf("Read = %q, %v; want the file's content", got, err)
			}
			if mode.Perm() != tc.mode || !mode.IsRegular() || secretfile.Exposed(mode) != tc.exposed {
				t.Errorf("mode %v, exposed %v; want %v, exposed %v", mode, secretfile.Exposed(mode), tc.mode, tc.exposed)
			}
		})
	}
	target := write(t, "linked", 0o600)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(target, link); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	if got, mode, err := secretfile.Read(link); err != nil || string(got) != "linked" || mode.Perm() != 0o600 {
		t.Errorf("through a link: %q, %v, %v; want the target's content and mode", got, mode, err)
	}
}

// A directory is refused with an error saying so, where reading it gave "is a directory" from
// the read, after the mode of the directory had been judged as a secret file's.
func TestReadRefusesADirectory(t *testing.T) {
	dir := t.TempDir()
	_, _, err := secretfile.Read(dir)
	if !errors.Is(err, secretfile.ErrNotRegular) || !strings.Contains(err.Error(), "the secret file "+dir+" is a directory, not a regular file: name the file that holds the secret") {
		t.Fatalf("Read(a directory) = %v; want ErrNotRegular naming it", err)
	}
}

// A file is read up to MaxSize bytes; one over it is refused, also when its size grows after
// the open (the read itself is bounded).
func TestReadBoundsTheSize(t *testing.T) {
	at := write(t, strings.Repeat("k", secretfile.MaxSize), 0o600)
	if got, _, err := secretfile.Read(at); err != nil || len(got) != secretfile.MaxSize {
		t.Fatalf("a file of MaxSize: %d bytes, %v", len(got), err)
	}
	over := write(t, strings.Repeat("k", secretfile.MaxSize+1), 0o600)
	_, _, err := secretfile.Read(over)
	if !errors.Is(err, secretfile.ErrTooLarge) || !strings.Contains(err.Error(), "the secret file "+over+" is over 64 KiB") || !strings.Contains(err.Error(), "it must hold the secret alone") {
		t.Fatalf("a file over MaxSize: %v; want ErrTooLarge naming it", err)
	}
}

// A path that does not exist is the open's error, naming the path.
func TestReadMissingFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "nonexistent")
	if _, _, err := secretfile.Read(p); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), p) {
		t.Fatalf("Read(a missing file) = %v; want ErrNotExist naming the path", err)
	}
}
