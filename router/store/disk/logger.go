package disk

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// pebbleLogger passes pebble's messages to slog. Fatalf does not exit the process as pebble's
// default logger does. Pebble calls it when it cannot go on: a write to its log or MANIFEST
// failed (a full disk), or an invariant broke. Fatalf logs the message, fails the generation
// (fatal), and then:
//
//   - in a committing goroutine ("fatal commit error"), panics with a *fatalError, which the
//     store's commit goroutine recovers (generation.commit);
//   - anywhere else (a flush or compaction writing the MANIFEST, pebble.Open), blocks its
//     goroutine for good: pebble must not go on in that goroutine, a panic there would end
//     the process, and the store gives the whole instance up anyway (fenced, replaced by a
//     new one once the disk has room). The goroutine stays parked until the process exits.
type pebbleLogger struct {
	log   *slog.Logger
	fatal func(error) // fails the generation; nil for tools that open pebble on their own
}

func (l pebbleLogger) Infof(format string, args ...any) { l.output(slog.LevelInfo, format, args) }

func (l pebbleLogger) Errorf(format string, args ...any) { l.output(slog.LevelError, format, args) }

func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.log.Error(msg, "component", "pebble", "fatal", true)
	f := &fatalError{msg: msg}
	for _, a := range args {
		if err, ok := a.(error); ok {
			f.cause = err
			break
		}
	}
	if l.fatal != nil {
		l.fatal(f)
	}
	if strings.Contains(msg, "fatal commit error") || l.fatal == nil {
		panic(f)
	}
	select {} // see the type's comment: this goroutine of the failed instance never goes on
}

func (l pebbleLogger) output(level slog.Level, format string, args []any) {
	if l.log.Enabled(context.Background(), level) {
		l.log.Log(context.Background(), level, fmt.Sprintf(format, args...), "component", "pebble")
	}
}

// corruptionReport is pebble's report of a damaged block (EventListener.DataCorruption) as
// one line: the file, its bounds and the error's message. Pebble's own String formats the
// error with %+v, which writes each error in its chain with its Go stack trace: some 4 KB a
// report, and one flipped block made egrid store check write 65 KB to stderr. The stack says
// nothing to an operator; the store says what the damage means itself (corruption.go).
func corruptionReport(info pebble.DataCorruptionInfo) string {
	var b strings.Builder
	fmt.Fprintf(&b, "on-disk corruption: %s", info.Path)
	if info.IsRemote {
		fmt.Fprintf(&b, " (remote locator %q)", info.Locator)
	}
	fmt.Fprintf(&b, "; bounds: %s", info.Bounds.String())
	if info.Details != nil {
		b.WriteString("; details: ")
		b.WriteString(strings.Join(strings.Fields(info.Details.Error()), " "))
	}
	return b.String()
}

// fatalError is what pebbleLogger.Fatalf fails a generation with: pebble's message and, when
// it passed one, the error that caused it.
type fatalError struct {
	msg   string
	cause error
}

func (e *fatalError) Error() string { return e.msg }

func (e *fatalError) Unwrap() error { return e.cause }

// repeatInterval is how often [repeats] writes a report that keeps coming: once a minute, with
// the count of the ones it held back.
const repeatInterval = time.Minute

// maxRepeatKeys bounds the reports [repeats] tracks at once; more distinct ones are written as
// they come.
const maxRepeatKeys = 1000

// repeats keeps pebble's repeated reports of one problem from flooding the log. Pebble retries
// a compaction over a damaged table file for as long as the process runs (in level 0 at
// once, but for the store's wait, compactions.go), and reports each failure
// (EventListener.BackgroundError, and DataCorruption for the damaged block), as it reports a
// failing disk-usage probe after each flush: many lines, burying everything else, while the
// store reports each piece of damage once itself (corruption.go). repeats writes the first report of a key at
// once; the same key again within the interval is counted, and at the interval's end one line
// with the same level, message and attributes says how many more there were (moreLikeThis,
// within: the attributes of package logfold's summaries); while the key keeps coming that is
// one line an interval, and an interval without it forgets it. A different key is written at
// once. Its timers are stopped, and the counts written, by close.
//
// It is safe for concurrent use; the mutex is never held while the log writes.
type repeats struct {
	log      *slog.Logger
	interval time.Duration

	mu     sync.Mutex
	keys   map[string]*repeat
	closed bool
}

// repeat is a key's report in its interval.
type repeat struct {
	level slog.Level
	msg   string
	attrs []any
	more  int // held back since the last line
	timer *time.Timer
}

func newRepeats(log *slog.Logger, interval time.Duration) *repeats {
	return &repeats{log: log, interval: interval, keys: make(map[string]*repeat)}
}

// report writes msg at level with attrs, or counts it when key was written within the interval.
func (r *repeats) report(level slog.Level, key, msg string, attrs ...any) {
	key = level.String() + "\x00" + msg + "\x00" + key
	r.mu.Lock()
	if rp, ok := r.keys[key]; ok {
		rp.more++
		r.mu.Unlock()
		return
	}
	if !r.closed && len(r.keys) < maxRepeatKeys {
		rp := &repeat{level: level, msg: msg, attrs: attrs}
		r.keys[key] = rp
		rp.timer = time.AfterFunc(r.interval, func() { r.tick(key, rp) })
	}
	r.mu.Unlock()
	r.log.Log(context.Background(), level, msg, attrs...)
}

// tick ends an interval of key: it writes the count of the reports held back in it and starts
// the next, or forgets the key when there were none.
func (r *repeats) tick(key string, rp *repeat) {
	r.mu.Lock()
	if r.keys[key] != rp {
		r.mu.Unlock()
		return // closed meanwhile
	}
	more := rp.more
	rp.more = 0
	if more == 0 {
		delete(r.keys, key)
	} else {
		rp.timer.Reset(r.interval)
	}
	r.mu.Unlock()
	r.summarise(rp, more)
}

func (r *repeats) summarise(rp *repeat, more int) {
	if more > 0 {
		r.log.Log(context.Background(), rp.level, rp.msg, append(slices.Clip(rp.attrs), "moreLikeThis", more, "within", r.interval)...)
	}
}

// close stops the timers and writes the counts held back. Later reports are written as they
// come (a given-up pebble instance may still report).
func (r *repeats) close() {
	r.mu.Lock()
	r.closed = true
	pending := make([]*repeat, 0, len(r.keys))
	more := make([]int, 0, len(r.keys))
	for key, rp := range r.keys {
		rp.timer.Stop()
		pending = append(pending, rp)
		more = append(more, rp.more)
		delete(r.keys, key)
	}
	r.mu.Unlock()
	for i, rp := range pending {
		r.summarise(rp, more[i])
	}
}
