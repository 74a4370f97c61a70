package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/egridio/egrid/schemas/bufpool"
	"github.com/egridio/egrid/schemas/clip"
)

// readBody reads at most limit+1 bytes of the request body. When the client sent a
// Content-Length the body is read into a pooled buffer of that size (no regrowing on the hot
// path), and buf is what the caller hands back with bufpool.Put once the request is answered;
// buf is nil otherwise.
//
// Handing it back is safe because the decoders copy all an event keeps (its strings and Raw),
// so nothing accepted points into the body (schemas.TestDecodedEventsKeepNoBody;
// TestPublishedEventsOutliveTheirBody here).
func readBody(req *http.Request, limit int) (body []byte, buf *[]byte, err error) {
	n := req.ContentLength
	if n < 0 || n > int64(limit) {
		body, err = io.ReadAll(io.LimitReader(req.Body, int64(limit)+1))
		if err != nil {
			return nil, nil, shortBody(err, len(body), n)
		}
		return body, nil, nil
	}
	buf = bufpool.Get(int(n) + 1)
	body = (*buf)[:n]
	// A body longer than its Content-Length is a protocol error net/http already refuses.
	if got, err := io.ReadFull(req.Body, body); err != nil {
		bufpool.Put(buf)
		return nil, nil, shortBody(err, got, n)
	}
	return body, buf, nil
}

// shortBody says why a body announced as want bytes stopped after got: the client ended it
// early, or it did not arrive within the server's read timeout. want is -1 for a body of
// unannounced length (chunked), which ends early when the connection ends before its last,
// zero-length chunk. Other errors pass unchanged.
func shortBody(err error, got int, want int64) error {
	if want < 0 {
		switch {
		case errors.Is(err, io.ErrUnexpectedEOF):
			return fmt.Errorf("the chunked body ended after %d bytes, before its last (zero-length) chunk: send the whole body, ended by its last chunk, or send it with a Content-Length", got)
		case errors.Is(err, os.ErrDeadlineExceeded):
			return fmt.Errorf("%d bytes of the chunked body arrived before the server's time to read a request ran out: send the body faster, or ask the operator for a longer --body-timeout", got)
		}
		return err
	}
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("the body ended after %d of the %d bytes its Content-Length announced: send the whole body with a Content-Length that matches it", got, want)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%d of the body's %d bytes arrived before the server's time to read a request ran out: send the body faster, or ask the operator for a longer --body-timeout", got, want)
	}
	return err
}

// jsonProblem is encoding/json's error message with what it repeats of the body shortened
// ([clip.String]): it quotes an unknown member's name whole (with DisallowUnknownFields), and a
// number too large for its field whole, so a 1 MB name made a 1 MB answer.
func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		short := *te
		short.Value = clip.String(te.Value)
		return short.Error()
	}
	const unknown = "json: unknown field "
	if q, ok := strings.CutPrefix(err.Error(), unknown); ok {
		if name, uerr := strconv.Unquote(q); uerr == nil {
			return unknown + clip.Quote(name)
		}
	}
	return err.Error()
}
