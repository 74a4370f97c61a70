package httpserver

import (
	"context"
	"log"
	"log/slog"
	"strings"
)

// errorLog returns the *log.Logger net/http writes its own errors to, turning its lines into
// structured records on l: a constant message with the varying parts (the client's address,
// the retry delay) as attributes, so that a flood of them — a scanner's failed TLS
// handshakes, accepts failing when the process is out of descriptors — is one message that a
// log folder (package logfold) can fold.
func errorLog(l *slog.Logger) *log.Logger {
	return log.New(errorLogWriter{l}, "", 0)
}

type errorLogWriter struct{ l *slog.Logger }

func (w errorLogWriter) Write(p []byte) (int, error) {
	line := strings.TrimRight(string(p), "\n")
	ctx := context.Background()
	switch {
	case strings.HasPrefix(line, "http: TLS handshake error from "):
		rest := strings.TrimPrefix(line, "http: TLS handshake error from ")
		addr, err, _ := strings.Cut(rest, ": ")
		w.l.Log(ctx, slog.LevelWarn, "http: TLS handshake error", "remote", addr, "err", err)
	case strings.HasPrefix(line, "http: Accept error: "):
		rest := strings.TrimPrefix(line, "http: Accept error: ")
		err, retry, _ := strings.Cut(rest, "; retrying in ")
		w.l.Log(ctx, slog.LevelError, "http: accepting a connection failed; retrying", "err", err, "in", retry)
	default:
		w.l.Log(ctx, slog.LevelWarn, line)
	}
	return len(p), nil
}
