package httpserver

import (
	"bufio"
	"net"
	"net/http"
	"time"
)

// AnswerStall bounds how long one write of an answer may wait for the client to take it in:
// a client that reads nothing of its answer for that long is disconnected. The server has
// no overall write timeout — a pull delivery :receive long-polls for up to 120 s before it
// answers, and a dead-letter replay streams its progress for as long as it runs — so
// without this a client that sends a request and never reads the answer would hold its
// connection, the handler's goroutine, the answer in memory and whatever the handler holds
// (a publish slot) for ever, once the answer is more than the kernel's socket buffers take.
// The bound is on stalls, not on the whole answer: a slow client that keeps reading gets
// all of it.
const AnswerStall = time.Minute

// answerChunk is the most of an answer one write sends under one AnswerStall deadline.
const answerChunk = 64 << 10

// BoundAnswers gives each write of h's answers AnswerStall to be taken in by the client
// (at most 64 KiB per deadline, however large the handler's write), and the flush of the
// answer's rest after h returns as long; past it the write fails and net/http closes the
// connection. A handler that sets its own write deadline (http.ResponseController's
// SetWriteDeadline), as the :receive answer does, manages its answer's deadline alone from
// then on. Time spent by the handler between writes (a long poll, a replay waiting for
// deliveries) does not count. [New] applies it.
func BoundAnswers(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bw := &boundedWriter{ResponseWriter: w, rc: http.NewResponseController(w)}
		defer bw.finish()
		h.ServeHTTP(bw, r)
	})
}

// boundedWriter is the ResponseWriter of [BoundAnswers].
type boundedWriter struct {
	http.ResponseWriter
	rc  *http.ResponseController
	own bool // the handler set its own write deadline, or hijacked the connection
}

// arm gives the next write AnswerStall, unless the handler manages its deadline itself.
func (w *boundedWriter) arm() {
	if !w.own {
		_ = w.rc.SetWriteDeadline(time.Now().Add(AnswerStall))
	}
}

func (w *boundedWriter) Write(p []byte) (int, error) {
	if w.own {
		return w.ResponseWriter.Write(p)
	}
	n := 0
	for len(p) > 0 {
		part := p[:min(len(p), answerChunk)]
		w.arm()
		m, err := w.ResponseWriter.Write(part)
		n += m
		if err != nil {
			return n, err
		}
		p = p[len(part):]
	}
	return n, nil
}

// finish gives the flush net/http makes of the answer's rest after the handler returned its
// own AnswerStall: the deadline of the handler's last write may have passed meanwhile.
func (w *boundedWriter) finish() { w.arm() }

// SetWriteDeadline hands the answer's deadline to the handler (http.ResponseController
// calls it).
func (w *boundedWriter) SetWriteDeadline(t time.Time) error {
	w.own = true
	return w.rc.SetWriteDeadline(t)
}

// FlushError flushes the answer written so far, within AnswerStall.
func (w *boundedWriter) FlushError() error {
	w.arm()
	return w.rc.Flush()
}

// Flush is [boundedWriter.FlushError] for handlers that assert http.Flusher.
func (w *boundedWriter) Flush() { _ = w.FlushError() }

// Hijack hands the connection, and so its deadlines, to the handler.
func (w *boundedWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.own = true
	return w.rc.Hijack()
}

// Unwrap gives http.ResponseController the underlying writer (read deadlines, full duplex).
func (w *boundedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
