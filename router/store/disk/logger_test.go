package disk_test

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/testkit"
)

// usageFS fails every GetDiskUsage with the error text msg. Pebble asks after each flush and
// compaction and reports the failure as a background error, as it reports each retry of a
// compaction over a damaged table file.
type usageFS struct {
	vfs.FS
	mu    sync.Mutex
	msg   string
	calls map[string]int
}

func (fs *usageFS) GetDiskUsage(path string) (vfs.DiskUsage, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.calls[fs.msg]++
	return vfs.DiskUsage{}, errors.New(fs.msg)
}

func (fs *usageFS) fail(msg string) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.msg = msg
}

func (fs *usageFS) count(msg string) int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.calls[msg]
}

// pebbleErrors returns the ERROR lines of pebble in logs.
func pebbleErrors(logs *syncBuffer) []string {
	var out []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "level=ERROR") && strings.Contains(l, "component=pebble") {
			out = append(out, l)
		}
	}
	return out
}

// Pebble's background errors that repeat do not flood the log: the first is an ERROR at once,
// the repeats within a minute one line at the minute's end with their count, and a different
// error is an ERROR at once. A minute without the error forgets it.
func TestRepeatedBackgroundErrorsAreLoggedOncePerMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const eio, enospc = "reading disk usage: input/output error", "reading disk usage: no space left on device"
		fs := &usageFS{FS: vfs.NewMem(), msg: eio, calls: map[string]int{}}
		var logs syncBuffer
		log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		s, err := disk.OpenFS("db", disk.Options{Logger: log}, fs)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ctx := t.Context()
		if err := s.PutTopic(ctx, "orders", nil); err != nil {
			t.Fatal(err)
		}
		for i := range 5 { // each flush and compaction asks again
			if _, err := s.Append(ctx, "orders", publishTime, []*schemas.Event{testEvent(fmt.Sprint(i))}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.CompactedSize(ctx); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		if n := fs.count(eio); n < 5 {
			t.Fatalf("pebble asked for the disk usage %d times; want one background error at least per flush", n)
		}
		got := pebbleErrors(&logs)
		if len(got) != 1 || !strings.Contains(got[0], eio) || strings.Contains(got[0], "moreLikeThis") {
			t.Fatalf("after %d identical background errors the log holds %d ERROR lines of pebble, want the first alone:\n%s",
				fs.count(eio), len(got), strings.Join(got, "\n"))
		}

		fs.fail(enospc) // a different error is written at once
		if _, err := s.CompactedSize(ctx); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		got = pebbleErrors(&logs)
		if len(got) != 2 || !strings.Contains(got[1], enospc) || strings.Contains(got[1], "moreLikeThis") {
			t.Fatalf("after a different background error the log holds:\n%s\nwant it written at once", strings.Join(got, "\n"))
		}

		testkit.Advance(time.Minute) // the minute ends: the repeats are counted
		want := []string{fmt.Sprintf(`err=%q moreLikeThis=%d within=1m0s`, eio, fs.count(eio)-1)}
		if n := fs.count(enospc); n > 1 {
			want = append(want, fmt.Sprintf(`err=%q moreLikeThis=%d within=1m0s`, enospc, n-1))
		}
		got = pebbleErrors(&logs)
		if len(got) != 2+len(want) {
			t.Fatalf("after a minute the log holds:\n%s\nwant the count of each error's repeats once", strings.Join(got, "\n"))
		}
		for _, w := range want {
			if !strings.Contains(strings.Join(got[2:], "\n"), w) {
				t.Errorf("after a minute the log holds:\n%s\nwant a line with %s", strings.Join(got, "\n"), w)
			}
		}

		testkit.Advance(2 * time.Minute) // nothing repeated: nothing more is written
		if again := pebbleErrors(&logs); len(again) != len(got) {
			t.Fatalf("minutes without the errors wrote:\n%s", strings.Join(again[len(got):], "\n"))
		}
		fs.fail(eio) // a minute without it forgot it: it is written at once again
		if _, err := s.CompactedSize(ctx); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if again := pebbleErrors(&logs); len(again) != len(got)+1 || !strings.Contains(again[len(got)], eio) {
			t.Fatalf("the error again after quiet minutes: the log holds\n%s\nwant it written at once", strings.Join(again, "\n"))
		}
	})
}
