package disk

import (
	"context"
	"fmt"
	"log/slog"
)

// pebbleLogger passes pebble's messages to slog. Fatalf does not exit the process as pebble's
// default logger does: it logs and panics with a *fatalError. Pebble calls Fatalf when a write
// to its log fails (the commit pipeline cannot go on); in the goroutine committing a batch the
// store recovers that panic and turns it into an error (see Store.commit). In pebble's
// background goroutines (a failed MANIFEST write, detected corruption) the panic ends the
// process, as pebble intends.
type pebbleLogger struct{ log *slog.Logger }

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
	panic(f)
}

func (l pebbleLogger) output(level slog.Level, format string, args []any) {
	if l.log.Enabled(context.Background(), level) {
		l.log.Log(context.Background(), level, fmt.Sprintf(format, args...), "component", "pebble")
	}
}

// fatalError is what pebbleLogger.Fatalf panics with: pebble's message and, when it passed
// one, the error that caused it.
type fatalError struct {
	msg   string
	cause error
}

func (e *fatalError) Error() string { return e.msg }

func (e *fatalError) Unwrap() error { return e.cause }
