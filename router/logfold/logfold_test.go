package logfold_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/logfold"
	"github.com/egridio/egrid/testkit"
)

// buffer collects log output; safe for the timer goroutine that writes summaries.
type buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *buffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := strings.TrimSpace(b.b.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func newLogger(out *buffer, opts logfold.Options) (*slog.Logger, *logfold.Handler) {
	inner := slog.NewTextHandler(out, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // virtual time: keep lines comparable
			}
			return a
		},
	})
	h := logfold.New(inner, opts)
	return slog.New(h), h
}

func TestFloodIsFoldedIntoOneLinePerWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out buffer
		log, _ := newLogger(&out, logfold.Options{Window: time.Second})
		store := log.With("component", "store")
		for i := range 21000 {
			store.Error("publish failed", "topic", "orders", "n", i)
		}
		log.Error("another failure") // a different message is not folded
		synctest.Wait()
		want := []string{
			`level=ERROR msg="publish failed" component=store topic=orders n=0`,
			`level=ERROR msg="another failure"`,
		}
		if got := out.lines(); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("within the window the log holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		testkit.Advance(time.Second) // the window ends
		want = append(want, `level=ERROR msg="publish failed" component=store moreLikeThis=20999 within=1s`)
		if got := out.lines(); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("after the window the log holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		// The next record opens a new window and is written.
		store.Error("publish failed", "topic", "orders", "n", 21000)
		synctest.Wait()
		if got := out.lines(); len(got) != 4 || got[3] != `level=ERROR msg="publish failed" component=store topic=orders n=21000` {
			t.Fatalf("a record after the window: log holds\n%s", strings.Join(got, "\n"))
		}
	})
}

func TestBurstDebugAndFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out buffer
		log, h := newLogger(&out, logfold.Options{Window: time.Minute, Burst: 2})
		for i := range 5 {
			log.Warn("accept failed", "i", i)
			log.Debug("delivery attempt", "i", i) // below the fold level: every one written
			log.Info("topic created", "i", i)
		}
		// The same message at another level is another key.
		log.Error("accept failed", "i", 9)
		h.Flush()
		synctest.Wait()
		want := []string{
			`level=WARN msg="accept failed" i=0`,
			`level=DEBUG msg="delivery attempt" i=0`,
			`level=INFO msg="topic created" i=0`,
			`level=WARN msg="accept failed" i=1`,
			`level=DEBUG msg="delivery attempt" i=1`,
			`level=INFO msg="topic created" i=1`,
			`level=DEBUG msg="delivery attempt" i=2`,
			`level=INFO msg="topic created" i=2`,
			`level=DEBUG msg="delivery attempt" i=3`,
			`level=INFO msg="topic created" i=3`,
			`level=DEBUG msg="delivery attempt" i=4`,
			`level=INFO msg="topic created" i=4`,
			`level=ERROR msg="accept failed" i=9`,
			`level=WARN msg="accept failed" moreLikeThis=3 within=1m0s`,
		}
		if got := out.lines(); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("log holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		// Flush ended the windows: their timers write nothing more.
		testkit.Advance(time.Hour)
		if got := out.lines(); len(got) != len(want) {
			t.Fatalf("after the flush the timers wrote more:\n%s", strings.Join(got[len(want):], "\n"))
		}
	})
}

func TestMaxKeysBoundsTheState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out buffer
		log, _ := newLogger(&out, logfold.Options{MaxKeys: 2, Level: slog.LevelInfo})
		for range 3 {
			log.Info("a")
			log.Info("b")
			log.Info("c") // a third key: not tracked, so never folded
		}
		testkit.Advance(time.Second)
		got := strings.Join(out.lines(), "\n")
		want := strings.Join([]string{
			"level=INFO msg=a", "level=INFO msg=b", "level=INFO msg=c",
			"level=INFO msg=c", "level=INFO msg=c",
		}, "\n")
		// The two summaries come from two timers firing at the same instant, in either order.
		if !strings.HasPrefix(got, want+"\n") || !strings.Contains(got, "msg=a moreLikeThis=2") || !strings.Contains(got, "msg=b moreLikeThis=2") {
			t.Fatalf("log holds\n%s", got)
		}
	})
}

func TestUnfoldedRecordsAreNeverFolded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out buffer
		log, h := newLogger(&out, logfold.Options{Window: time.Second, Unfolded: logattr.IsUnfolded})
		ctx := logattr.Unfolded(t.Context())
		for i := range 5 {
			log.WarnContext(ctx, "dead letters dropped", "eventIds", i)
		}
		log.Warn("dead letters dropped", "eventIds", "plain")
		log.Warn("dead letters dropped", "eventIds", "folded") // the plain line's window folds this one
		testkit.Advance(2 * time.Second)
		h.Flush()
		lines := out.lines()
		for i := range 5 {
			if !strings.Contains(strings.Join(lines, "\n"), "eventIds="+string(rune('0'+i))) {
				t.Errorf("unfolded line %d missing; log:\n%s", i, strings.Join(lines, "\n"))
			}
		}
		if got := strings.Join(lines, "\n"); !strings.Contains(got, "moreLikeThis=1") || strings.Contains(got, "eventIds=folded") {
			t.Errorf("lines without the mark must fold as before; log:\n%s", got)
		}
	})
}
