package httpapi

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/debug"
	"strings"
	"testing"
	"testing/iotest"
	"testing/synctest"
	"time"

	"github.com/egridio/egrid/schemas/bufpool"
)

// TestPublishBodiesAreReused: reading a body with a Content-Length takes its buffer from the
// pool once one was handed back, instead of allocating one per request.
func TestPublishBodiesAreReused(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops pooled items at random; run without -race")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // a collection empties the pools
	for _, size := range []int{100, 5000, 100_000, 1 << 20} {
		body := bytes.Repeat([]byte("e"), size)
		reqs := make([]*http.Request, 101)
		for i := range reqs {
			reqs[i] = newRequest(body)
		}
		i := 0
		allocs := testing.AllocsPerRun(100, func() {
			got, buf, err := readBody(reqs[i], 1<<20)
			i++
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("readBody of %d bytes = %d bytes, %v", size, len(got), err)
			}
			bufpool.Put(buf)
		})
		if allocs != 0 {
			t.Errorf("reading a body of %d bytes allocates %.0f times; want its buffer from bufpool", size, allocs)
		}
	}
}

// TestOverLongBodiesAreNotKept: a body over the request limit, or one without a
// Content-Length, is read into a buffer of its own that nobody hands back.
func TestOverLongBodiesAreNotKept(t *testing.T) {
	r := newRequest(bytes.Repeat([]byte("e"), 3000))
	r.ContentLength = -1
	got, buf, err := readBody(r, 1<<20)
	if err != nil || len(got) != 3000 || buf != nil {
		t.Fatalf("readBody without a Content-Length = %d bytes, buffer %v, %v; want 3000, none", len(got), buf, err)
	}
	got, buf, err = readBody(newRequest(make([]byte, 2000)), 1000)
	if err != nil || len(got) != 1001 || buf != nil {
		t.Fatalf("readBody over the limit = %d bytes, buffer %v, %v; want the limit and one byte, none", len(got), buf, err)
	}
}

// TestShortBodiesSayWhatIsWrong: a body that ends before its Content-Length, or that the
// server's read timeout cuts, is refused with what happened and what to do, not with the
// reader's bare "unexpected EOF" or "i/o timeout".
func TestShortBodiesSayWhatIsWrong(t *testing.T) {
	r := newRequest(make([]byte, 600))
	r.ContentLength = 1000
	if _, _, err := readBody(r, 1<<20); err == nil || !strings.Contains(err.Error(), "the body ended after 600 of the 1000 bytes its Content-Length announced") {
		t.Errorf("a body shorter than its Content-Length: %v", err)
	}
	r = newRequest(nil)
	r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(make([]byte, 300)), iotest.ErrReader(fmt.Errorf("read tcp: %w", os.ErrDeadlineExceeded))))
	r.ContentLength = 1000
	if _, _, err := readBody(r, 1<<20); err == nil || !strings.Contains(err.Error(), "300 of the body's 1000 bytes arrived before the server's time to read a request ran out") {
		t.Errorf("a body cut by the read timeout: %v", err)
	}
}

// TestShortChunkedBodiesSayWhatIsWrong: a chunked body that the connection ends before its
// last chunk, or that the server's read timeout cuts, is refused as clearly as one with a
// Content-Length, not with "unexpected EOF" or "read tcp <addresses>: i/o timeout". The body
// is read by net/http's own chunked reader, over a connection with a read deadline.
func TestShortChunkedBodiesSayWhatIsWrong(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  bool // the client ends the connection after its first chunk
		want string
	}{
		{name: "cut short", end: true, want: "the chunked body ended after 6 bytes, before its last (zero-length) chunk"},
		{name: "too slow", want: "6 bytes of the chunked body arrived before the server's time to read a request ran out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				client, server := net.Pipe()
				defer server.Close()
				go func() {
					_, _ = io.WriteString(client, "POST /topics/t/api/events HTTP/1.1\r\nHost: egrid\r\nTransfer-Encoding: chunked\r\n\r\n6\r\n[{}, {\r\n")
					if tc.end {
						_ = client.Close()
						return
					}
					_, _ = io.Copy(io.Discard, client) // until the server closes its end
				}()
				_ = server.SetReadDeadline(time.Now().Add(10 * time.Second))
				req, err := http.ReadRequest(bufio.NewReader(server))
				if err != nil {
					t.Fatal(err)
				}
				if req.ContentLength != -1 {
					t.Fatalf("ContentLength %d; want -1 (chunked)", req.ContentLength)
				}
				if _, _, err := readBody(req, 1<<20); err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("readBody = %v; want %q", err, tc.want)
				}
			})
		})
	}
}

func newRequest(body []byte) *http.Request {
	return httptest.NewRequest(http.MethodPost, "/topics/t/api/events", bytes.NewReader(body))
}
