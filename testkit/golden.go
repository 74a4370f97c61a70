package testkit

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// update is the -update flag of every test binary that imports testkit: `go test ./pkg/
// -update` rewrites the golden files [Golden] compares with. A test package that imports
// testkit uses this flag and must not define its own -update.
var update = flag.Bool("update", false, "rewrite testdata/*.golden files with the current output")

// Golden compares got with the golden file testdata/<name>.golden of the package under test
// and fails the test, showing the lines that differ, when they are not equal. Run the test with
// -update to write got to the file instead (and review the diff before committing it). name may
// contain '/' to use subdirectories of testdata.
func Golden(t testing.TB, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", filepath.FromSlash(name)+".golden")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatalf("golden %s: %v", path, err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatalf("golden %s: %v", path, err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden %s: %v (run the test with -update to create it)", path, err)
	}
	if string(want) == got {
		return
	}
	t.Errorf("output differs from %s (run with -update to accept it after review):\n%s", path, lineDiff(string(want), got))
}

// lineDiff lists the lines that differ between want and got, position by position: "-" for the
// golden line, "+" for the new one. It is meant for timelines, where a change usually shifts
// times on a few lines rather than inserting lines.
func lineDiff(want, got string) string {
	w := strings.Split(strings.TrimSuffix(want, "\n"), "\n")
	g := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	var b strings.Builder
	for i := range max(len(w), len(g)) {
		var wl, gl string
		wok, gok := i < len(w), i < len(g)
		if wok {
			wl = w[i]
		}
		if gok {
			gl = g[i]
		}
		if wok && gok && wl == gl {
			continue
		}
		if wok {
			b.WriteString("line " + strconv.Itoa(i+1) + " - " + wl + "\n")
		}
		if gok {
			b.WriteString("line " + strconv.Itoa(i+1) + " + " + gl + "\n")
		}
	}
	return b.String()
}
