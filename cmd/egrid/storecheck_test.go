package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
)

// runCheck runs `egrid store check --data-dir dir` in-process.
func runCheck(t *testing.T, dir string) (int, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"egrid", "store", "check", "--data-dir", dir}, env{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }})
	return code, out.String() + errOut.String()
}

// `egrid store check` finds a sound store sound, and reports each kind of damage with exit
// status 1: a damaged table block (naming the lost entries) and a missing marker.
func TestStoreCheck(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "data")
	s, err := disk.Open(dir, disk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutTopic(ctx, "orders", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSubscription(ctx, "orders", "billing", nil); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 2000 {
		ev := &schemas.Event{ID: fmt.Sprint(i), Raw: fmt.Appendf(nil, `{"id":"%d","data":"%s"}`, i, strings.Repeat(fmt.Sprint(i), 100))}
		if _, err := s.Append(ctx, "orders", at, []*schemas.Event{ev}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	code, out := runCheck(t, dir)
	if code != 0 || !strings.Contains(out, "1 topics, 1 subscriptions, 2000 journal entries") || !strings.Contains(out, "no damage found") {
		t.Fatalf("check of a sound store: exit %d\n%s", code, out)
	}

	tables, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
	var biggest string
	var size int64
	for _, f := range tables {
		if fi, err := os.Stat(f); err == nil && fi.Size() > size {
			biggest, size = f, fi.Size()
		}
	}
	f, err := os.OpenFile(biggest, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xff}, 64), size/3); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	code, out = runCheck(t, dir)
	if code != 1 || !strings.Contains(out, `DAMAGE: disk store: corrupt: topic "orders": journal entries`) {
		t.Errorf("check of a damaged table: exit %d\n%s", code, out)
	}

	markers, _ := filepath.Glob(filepath.Join(dir, "marker.manifest.*"))
	if len(markers) != 1 {
		t.Fatalf("markers: %v", markers)
	}
	if err := os.Remove(markers[0]); err != nil {
		t.Fatal(err)
	}
	code, out = runCheck(t, dir)
	if code != 1 || !strings.Contains(out, "no manifest marker") {
		t.Errorf("check without the manifest marker: exit %d\n%s", code, out)
	}
}
