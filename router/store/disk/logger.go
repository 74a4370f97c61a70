package disk

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
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

// fatalError is what pebbleLogger.Fatalf fails a generation with: pebble's message and, when
// it passed one, the error that caused it.
type fatalError struct {
	msg   string
	cause error
}

func (e *fatalError) Error() string { return e.msg }

func (e *fatalError) Unwrap() error { return e.cause }
