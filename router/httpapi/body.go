package httpapi

import (
	"io"
	"math/bits"
	"net/http"
	"sync"
)

// A publish's body is read into a pooled buffer and handed back once the request is answered:
// the decoders copy all an event keeps (its strings and Raw), so nothing accepted points into
// it (schemas.TestDecodedEventsKeepNoBody; TestPublishedEventsOutliveTheirBody here). At 100
// events per request the body was a quarter of the bytes a publish allocated, and garbage
// collection a tenth of the CPU of `egrid bench --scenario publish100`.
//
// Buffers come in powers of two from 4 KiB up to room for the largest request (1 MiB, and one
// byte more to tell a body over it), one pool each, so a small request never holds a large
// buffer and a large one finds one of its size.
const (
	minBodyClass = 12 // 4 KiB
	maxBodyClass = 21 // 2 MiB
)

var bodyPools [maxBodyClass + 1]sync.Pool

// bodyClass returns the pool of buffers of at least n bytes, or -1 for n too large to keep.
func bodyClass(n int) int {
	c := max(bits.Len(uint(n-1)), minBodyClass)
	if c > maxBodyClass {
		return -1
	}
	return c
}

// readBody reads at most limit+1 bytes of the request body. When the client sent a
// Content-Length the body is read into a buffer of that size from a pool (no regrowing on the
// hot path), and buf is what the caller hands back with releaseBody once nothing reads the
// body any more; buf is nil otherwise.
func readBody(req *http.Request, limit int) (body []byte, buf *[]byte, err error) {
	n := req.ContentLength
	if n < 0 || n > int64(limit) {
		body, err = io.ReadAll(io.LimitReader(req.Body, int64(limit)+1))
		return body, nil, err
	}
	if c := bodyClass(int(n) + 1); c >= 0 {
		var ok bool
		if buf, ok = bodyPools[c].Get().(*[]byte); !ok {
			b := make([]byte, 1<<c)
			buf = &b
		}
		body = (*buf)[:n]
	} else {
		body = make([]byte, n, n+1)
	}
	// A body longer than its Content-Length is a protocol error net/http already refuses.
	if _, err := io.ReadFull(req.Body, body); err != nil {
		releaseBody(buf)
		return nil, nil, err
	}
	return body, buf, nil
}

// releaseBody hands a buffer from readBody back to its pool; nil is ignored.
func releaseBody(buf *[]byte) {
	if buf != nil {
		bodyPools[bodyClass(cap(*buf))].Put(buf)
	}
}
