package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Tmpfs mounts a tmpfs of size bytes on a new directory and unmounts it at the end of the
// test: a small disk a test can fill. It skips the test when mounting is not permitted (not
// root, no mount namespace), except under CI=true, where it fails.
func Tmpfs(t testing.TB, size int64) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0700", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		msg := fmt.Sprintf("this test fills a small tmpfs and needs to mount one (run as root, or in a container with CAP_SYS_ADMIN): mount: %v: %s", err, out)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "--lazy", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// FillDisk writes a file of zeros in dir until its file system is full (at most 4 GiB) and
// returns the file's path: removing it frees the space again.
func FillDisk(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for range 1 << 16 { // bounded: 4 GiB
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	return path
}
