package disk

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// pebbleFormatOf returns the format of pebble's files in dir.
func pebbleFormatOf(t *testing.T, dir string) pebble.FormatMajorVersion {
	t.Helper()
	desc, err := pebble.Peek(dir, vfs.Default)
	if err != nil || !desc.Exists {
		t.Fatalf("pebble.Peek(%s) = %v, %v", dir, desc, err)
	}
	return desc.FormatMajorVersion
}

// A store whose pebble files are in an older format is raised to the pinned one at Open, saying
// so, and no further: a newer pebble linked in does not change the files by itself. Before,
// every Open raised them to whatever the linked pebble called newest, silently.
func TestOpenRaisesPebbleFormatToThePinnedOne(t *testing.T) {
	const older = pebble.FormatTableFormatV6
	if older >= pebbleFormat {
		t.Fatalf("pebble format %d is not older than the pinned %d", older, pebbleFormat)
	}
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "db")
	s, err := Open(dir, Options{tune: func(o *pebble.Options) { o.FormatMajorVersion = older }})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutTopic(ctx, "orders", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := pebbleFormatOf(t, dir); got != older {
		t.Fatalf("store made in pebble format %d; want %d", got, older)
	}

	for pass, wantLine := range []bool{true, false} {
		var logs lockedBuffer
		s, err := Open(dir, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := s.Topics(ctx); err != nil || len(got) != 1 {
			t.Errorf("pass %d: Topics = %v, %v; want orders", pass, got, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if got := pebbleFormatOf(t, dir); got != pebbleFormat {
			t.Errorf("pass %d: pebble format %d after Open; want the pinned %d", pass, got, pebbleFormat)
		}
		line := regexp.MustCompile(`level=INFO msg="disk store: raised the format of pebble's files[^"]*" dir=\S+ from=(\d+) to=(\d+)`).FindStringSubmatch(logs.String())
		if wantLine && (line == nil || line[1] != "21" || line[2] != "24") {
			t.Errorf("pass %d: no INFO line saying pebble's format was raised from 21 to 24; logs:\n%s", pass, logs.String())
		}
		if !wantLine && line != nil {
			t.Errorf("pass %d: pebble's format said raised again: %s", pass, line[0])
		}
	}
}

// A store whose pebble files are in a format this egrid's pebble does not know (a newer
// egrid raised it) is refused with ErrNewerFormat, saying what to do, rather than with pebble's
// error.
func TestOpenRefusesANewerPebbleFormat(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	markers, err := filepath.Glob(filepath.Join(dir, "marker.format-version.*"))
	if err != nil || len(markers) != 1 {
		t.Fatalf("format-version markers %v, %v", markers, err)
	}
	newer := markers[0][:strings.LastIndex(markers[0], ".")] + ".999"
	if err := os.Rename(markers[0], newer); err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir, Options{})
	if !errors.Is(err, ErrNewerFormat) || !strings.Contains(err.Error(), "format 999") || !strings.Contains(err.Error(), "run the egrid release that wrote it") {
		t.Fatalf("Open = %v; want ErrNewerFormat naming pebble's format and what to do", err)
	}
}

// README's "On-disk format" names the pebble format the store keeps.
func TestPebbleFormatIsTheOneTheREADMEGives(t *testing.T) {
	b, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("pebble's format major\\s+version\\s+([0-9]+)\\s+\\(`pebble\\.(\\w+)`").FindSubmatch(b)
	if m == nil {
		t.Fatal("README does not give pebble's format major version (\"pebble's format major version N (`pebble.Name`)\")")
	}
	named, known := map[string]pebble.FormatMajorVersion{"FormatValueSeparation": pebble.FormatValueSeparation}[string(m[2])]
	if string(m[1]) != fmt.Sprint(uint64(pebbleFormat)) || !known || named != pebbleFormat {
		t.Errorf("README gives pebble format %s (pebble.%s); the store keeps %d", m[1], m[2], uint64(pebbleFormat))
	}
}
