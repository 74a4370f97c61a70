package httpapi

import (
	"io"
	"net/http"

	"github.com/egridio/egrid/schemas/bufpool"
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
		return body, nil, err
	}
	buf = bufpool.Get(int(n) + 1)
	body = (*buf)[:n]
	// A body longer than its Content-Length is a protocol error net/http already refuses.
	if _, err := io.ReadFull(req.Body, body); err != nil {
		bufpool.Put(buf)
		return nil, nil, err
	}
	return body, buf, nil
}
