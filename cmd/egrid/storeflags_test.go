package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/egridio/egrid/router/metrics"
)

func TestParseDiskSize(t *testing.T) {
	tests := []struct {
		in      string
		n       uint64
		percent bool
		bad     bool
	}{
		{in: "0", n: 0},
		{in: "1048576", n: 1 << 20},
		{in: "512MiB", n: 512 << 20},
		{in: "2 GiB", n: 2 << 30},
		{in: "1GB", n: 1e9},
		{in: "5%", n: 5, percent: true},
		{in: "60%", bad: true},
		{in: "lots", bad: true},
		{in: "-1MiB", bad: true},
		{in: "16777215TiB", n: 16777215 << 40},
		{in: "16777216TiB", bad: true}, // 2^64 bytes: wrapped around to 0
		{in: "16777217TiB", bad: true}, // wrapped around to 1 TiB
		{in: "18446744073709551615", n: 1<<64 - 1},
		{in: "18446744073709551615KB", bad: true},
	}
	for _, tc := range tests {
		n, percent, err := parseDiskSize(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("parseDiskSize(%q) = %d, %v; want an error", tc.in, n, percent)
			}
			continue
		}
		if err != nil || n != tc.n || percent != tc.percent {
			t.Errorf("parseDiskSize(%q) = %d, %v, %v; want %d, %v", tc.in, n, percent, err, tc.n, tc.percent)
		}
	}
}

// An absolute --min-free-disk at or above the size of the data directory's volume is refused,
// with the volume's size and what to pass instead: every publish would get 507, and the
// store's recovery, which waits for the floor to be free, would wait forever. The volume is
// read from the nearest existing parent while the data directory does not exist yet.
func TestMinFreeBytesBelowTheVolume(t *testing.T) {
	parent := t.TempDir()
	total, err := volumeBytes(parent)
	if err != nil {
		t.Skipf("reading the size of the volume: %v (egrid watches no free space on this platform)", err)
	}
	dir := filepath.Join(parent, "not", "yet")
	volume := "(" + strconv.FormatUint(total, 10) + " bytes"
	tests := []struct {
		floor string
		want  uint64
		bad   string // what the error must say
	}{
		{floor: "0", want: 0},
		{floor: "1MiB", want: 1 << 20},
		{floor: strconv.FormatUint(total-1, 10), want: total - 1},
		{floor: strconv.FormatUint(total, 10), bad: volume},
		{floor: strconv.FormatUint(total+1, 10), bad: volume},
		{floor: "16777215TiB", bad: volume},
		{floor: "16777216TiB", bad: "more than 16 EiB"}, // wrapped around to 0 before
		{floor: "50%", want: total * 50 / 100},
	}
	for _, tc := range tests {
		n, err := storeSettings{MinFreeDisk: tc.floor}.minFreeBytes(dir)
		if tc.bad != "" {
			if err == nil || !strings.Contains(err.Error(), tc.bad) || !strings.Contains(err.Error(), "such as") {
				t.Errorf("--min-free-disk %s: %d, %v; want an error saying %q and what to pass", tc.floor, n, err, tc.bad)
			}
			continue
		}
		if err != nil || n != tc.want {
			t.Errorf("--min-free-disk %s: %d, %v; want %d", tc.floor, n, err, tc.want)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("minFreeBytes created %s (%v)", dir, err)
	}
}

// The default floor is 256 MiB or 1 % of the volume, whichever is smaller, but at least the
// 16 MiB the store needs to reopen itself after a full disk (a quarter of a volume under
// 64 MiB): on a 200 MB volume it was 2 MB, so publishes went on into the space the store
// would need to come back.
func TestDefaultFloorLeavesRoomToReopen(t *testing.T) {
	tests := []struct{ volume, want uint64 }{
		{volume: 1 << 40, want: 256 << 20},
		{volume: 10 << 30, want: 10 << 30 / 100},
		{volume: 200 << 20, want: 16 << 20},
		{volume: 40 << 20, want: 10 << 20},
	}
	for _, tc := range tests {
		if got := defaultFloor(tc.volume); got != tc.want {
			t.Errorf("default floor on a volume of %d bytes = %d, want %d", tc.volume, got, tc.want)
		}
	}
}

// A --min-free-disk below the free space the store needs to reopen itself after a full disk
// (16 MiB) is taken, and the start warns that after a failed write the store waits for 16 MiB
// free, not the floor: a floor of 8 MiB left a store failed with 12 MiB free and nothing said
// why. A floor at or above 16 MiB, 0 (the check off) and the default say nothing.
func TestMinFreeDiskBelowTheReopenFloorWarns(t *testing.T) {
	if _, err := volumeBytes(t.TempDir()); err != nil {
		t.Skipf("reading the size of the volume: %v (egrid watches no free space on this platform)", err)
	}
	tests := []struct {
		floor string
		warn  bool
	}{
		{floor: "8MiB", warn: true},
		{floor: "1", warn: true},
		{floor: "16MiB"},
		{floor: "0"},
		{floor: ""},
	}
	for _, tc := range tests {
		var logs bytes.Buffer
		log := slog.New(slog.NewTextHandler(&logs, nil))
		s, err := openStore(serveSettings{DataDir: filepath.Join(t.TempDir(), "data"), Store: storeSettings{MinFreeDisk: tc.floor}}, log, new(metrics.Set))
		if err != nil {
			t.Fatalf("--min-free-disk %q: %v", tc.floor, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		got := strings.Contains(logs.String(), "level=WARN") && strings.Contains(logs.String(), "16.0 MiB")
		if got != tc.warn {
			t.Errorf("--min-free-disk %q: warned = %v, want %v; logs:\n%s", tc.floor, got, tc.warn, logs.String())
		}
	}
}
