package webhook

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// The direct pool writes and reads the common shapes itself (h1_wire.go); these tests hold
// it to net/http's own output on the same input, and to taking the shapes egrid meets.

// wireRequest is a request to write, made afresh for each writer (a write consumes the body).
type wireRequest struct {
	name   string
	method string
	target string // URL
	host   string // Request.Host
	header http.Header
	body   string
	length int64 // ContentLength; -2 for len(body)
	noBody bool  // Body nil whatever the length
	close  bool
	te     []string
	trace  bool
	plain  bool // written by writeRequest itself
}

func (w wireRequest) build(t testing.TB) *http.Request {
	u, err := url.Parse(w.target)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if w.trace {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaders: func() {}})
	}
	req := (&http.Request{Method: w.method, URL: u, Host: w.host, Header: w.header.Clone(), Close: w.close, TransferEncoding: w.te}).WithContext(ctx)
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req.ContentLength = w.length
	if w.length == -2 {
		req.ContentLength = int64(len(w.body))
	}
	switch {
	case w.noBody:
	case w.body == "" && req.ContentLength == 0:
		req.Body = http.NoBody
	default:
		req.Body = io.NopCloser(strings.NewReader(w.body))
	}
	return req
}

// egridHeader is what a delivery of an Event Grid event carries (SPEC §2.4).
func egridHeader() http.Header {
	return http.Header{
		"Content-Type":           {"application/json; charset=utf-8"},
		"Aeg-Subscription-Name":  {"BILLING"},
		"Aeg-Delivery-Count":     {"0"},
		"Aeg-Data-Version":       {"1.0"},
		"Aeg-Metadata-Version":   {"1"},
		"Aeg-Event-Type":         {"Notification"},
		"Webhook-Request-Origin": {"eventgrid.azure.net"},
	}
}

var wireRequests = []wireRequest{
	{name: "delivery", method: "POST", target: "http://127.0.0.1:8080/api/hook?code=abc%20d", header: egridHeader(), body: `[{"id":"1"}]`, length: -2, plain: true},
	{name: "empty method", target: "http://example.com/", plain: true},
	{name: "GET without body", method: "GET", target: "http://example.com/a/b", plain: true},
	{name: "HEAD without body", method: "HEAD", target: "http://example.com/", plain: true},
	{name: "OPTIONS without body", method: "OPTIONS", target: "http://example.com/", header: http.Header{"Webhook-Request-Origin": {"eventgrid.azure.net"}}, plain: true},
	{name: "POST without body", method: "POST", target: "http://example.com/", plain: true},
	{name: "DELETE without body", method: "DELETE", target: "http://example.com/", plain: true},
	{name: "host of the request", method: "POST", target: "http://127.0.0.1:9/x", host: "hooks.example.com", body: "x", length: -2, plain: true},
	{name: "IPv6 host", method: "POST", target: "http://[::1]:8080/x", body: "x", length: -2, plain: true},
	{name: "own User-Agent", method: "POST", target: "http://example.com/", header: http.Header{"User-Agent": {"  egrid/1 "}}, plain: true},
	{name: "no User-Agent", method: "POST", target: "http://example.com/", header: http.Header{"User-Agent": {""}}, plain: true},
	{name: "blank User-Agent", method: "POST", target: "http://example.com/", header: http.Header{"User-Agent": {" "}}, plain: true},
	{name: "User-Agent key without values", method: "POST", target: "http://example.com/", header: http.Header{"User-Agent": nil}, plain: true},
	{name: "excluded headers", method: "POST", target: "http://example.com/", header: http.Header{"Host": {"other"}, "Content-Length": {"99"}, "Trailer": {"X"}, "Transfer-Encoding": {"gzip"}}, body: "abc", length: -2, plain: true},
	{name: "values trimmed, several values, non-canonical names", method: "POST", target: "http://example.com/", header: http.Header{"X-A": {" a ", "\tb\t"}, "x-lower": {"c"}, "X-Empty": {""}, "X-Obs": {"caf\xc3\xa9"}}, plain: true},
	{name: "more headers than the stack holds", method: "POST", target: "http://example.com/", header: func() http.Header {
		h := http.Header{}
		for i := range 40 {
			h.Set(fmt.Sprintf("X-H%02d", 39-i), fmt.Sprint(i))
		}
		return h
	}(), plain: true},
	{name: "opaque URL", method: "POST", target: "http:opaque", plain: true},
	{name: "body shorter than its length", method: "POST", target: "http://example.com/", body: "ab", length: 5, plain: true},
	{name: "body longer than its length", method: "POST", target: "http://example.com/", body: "abcdef", length: 3, plain: true},

	{name: "nil body with a length", method: "POST", target: "http://example.com/", length: 3, noBody: true},
	{name: "body of unknown length", method: "POST", target: "http://example.com/", body: "abc"},
	{name: "Connection: close", method: "POST", target: "http://example.com/", close: true},
	{name: "chunked", method: "POST", target: "http://example.com/", body: "abc", length: -1, te: []string{"chunked"}},
	{name: "client trace", method: "POST", target: "http://example.com/", trace: true},
	{name: "unicode host", method: "POST", target: "http://bücher.example/", plain: false},
	{name: "zone in the host", method: "POST", target: "http://[fe80::1%25eth0]:80/"},
	{name: "header name not a token", method: "POST", target: "http://example.com/", header: http.Header{"Bad Name": {"x"}}},
	{name: "header value with a newline", method: "POST", target: "http://example.com/", header: http.Header{"X-A": {"a\r\nX-Injected: 1"}}},
	{name: "method not a token", method: "PO ST", target: "http://example.com/"},
	{name: "CONNECT", method: "CONNECT", target: "http://example.com:443"},
}

func TestWriteRequestMatchesNetHTTP(t *testing.T) {
	for _, w := range wireRequests {
		t.Run(w.name, func(t *testing.T) {
			if _, _, _, plain := plainRequest(w.build(t), nil); plain != w.plain {
				t.Errorf("written by writeRequest itself: %v, want %v", plain, w.plain)
			}
			compareWrites(t, w.build(t), w.build(t))
		})
	}
}

// compareWrites writes mine with writeRequest and theirs with http.Request.Write and
// compares the bytes and the errors.
func compareWrites(t *testing.T, mine, theirs *http.Request) {
	t.Helper()
	var a, b bytes.Buffer
	bwa, bwb := bufio.NewWriter(&a), bufio.NewWriter(&b)
	errA := writeRequest(bwa, mine)
	errB := theirs.Write(bwb)
	_ = bwa.Flush()
	_ = bwb.Flush()
	if fmt.Sprint(errA) != fmt.Sprint(errB) {
		t.Fatalf("error %v, net/http's %v", errA, errB)
	}
	if errA == nil && a.String() != b.String() {
		t.Fatalf("wrote\n%q\nnet/http wrote\n%q", a.String(), b.String())
	}
}

// closeCounter records whether a body was closed.
type closeCounter struct {
	io.Reader
	closed int
}

func (c *closeCounter) Close() error { c.closed++; return nil }

func TestWriteRequestClosesTheBody(t *testing.T) {
	for _, body := range []string{"abc", "ab"} { // the second is shorter than its length
		c := &closeCounter{Reader: strings.NewReader(body)}
		req := wireRequests[0].build(t)
		req.Body, req.ContentLength = c, 3
		_ = writeRequest(bufio.NewWriter(io.Discard), req)
		if c.closed != 1 {
			t.Errorf("body %q closed %d times, want once", body, c.closed)
		}
	}
}

// wireResponse is an answer to read, with whether readPlainResponse reads it itself.
type wireResponse struct {
	name   string
	raw    string
	method string
	plain  bool
}

var wireResponses = []wireResponse{
	{"net/http server", "HTTP/1.1 200 OK\r\nDate: Fri, 27 Nov 2026 02:00:00 GMT\r\nContent-Length: 0\r\n\r\n", "", true},
	{"Node.js", "HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: 2\r\nDate: Fri, 27 Nov 2026 02:00:00 GMT\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\r\n{}", "", true},
	{"busy", "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 30\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nbusy\n", "", true},
	{"no reason phrase", "HTTP/1.1 404\r\nContent-Length: 0\r\n\r\n", "", true},
	{"reason with odd bytes", "HTTP/1.1 500 Broken \x01 \xff\r\nContent-Length: 0\r\n\r\n", "", true},
	{"next answer already waiting", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "", true},
	{"no content", "HTTP/1.1 204 No Content\r\nDate: x\r\n\r\n", "", true},
	{"no content with a length", "HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n", "", true},
	{"not modified", "HTTP/1.1 304 Not Modified\r\nEtag: \"x\"\r\n\r\n", "", true},
	{"lower-case and odd names", "HTTP/1.1 200 OK\r\ncontent-length: 1\r\nx-REQUEST-id: 7\r\nx_under~score: y\r\n\r\nz", "", true},
	{"values with spaces, tabs and obs-text", "HTTP/1.1 200 OK\r\nX-A:   a b\t \r\nX-B:\r\nX-C: caf\xc3\xa9\r\nContent-Length: 0\r\n\r\n", "", true},
	{"a header twice", "HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Length: 0\r\n\r\n", "", true},
	{"long name", "HTTP/1.1 200 OK\r\nX-" + strings.Repeat("long-", 20) + "name: v\r\nContent-Length: 0\r\n\r\n", "", true},
	{"Connection: keep-alive, upgrade", "HTTP/1.1 200 OK\r\nConnection: keep-alive, Upgrade\r\nContent-Length: 0\r\n\r\n", "", true},
	{"leading zeros in the length", "HTTP/1.1 200 OK\r\nContent-Length: 003\r\n\r\nabc", "", true},
	{"body cut short", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", "", true},

	{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "", false},
	{"ends with the connection", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nabc", "", false},
	{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", "", false},
	{"Connection: close", "HTTP/1.1 200 OK\r\nConnection: Close\r\nContent-Length: 0\r\n\r\n", "", false},
	{"continue", "HTTP/1.1 100 Continue\r\n\r\n", "", false},
	{"switching protocols", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n", "", false},
	{"Pragma", "HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 0\r\n\r\n", "", false},
	{"Trailer", "HTTP/1.1 200 OK\r\nTrailer: X\r\nContent-Length: 0\r\n\r\n", "", false},
	{"two lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", "", false},
	{"two different lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy", "", false},
	{"length not a number", "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\nx", "", false},
	{"empty length", "HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n", "", false},
	{"negative length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "", false},
	{"folded header", "HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 0\r\n\r\n", "", false},
	{"first header line folded", "HTTP/1.1 200 OK\r\n X-A: a\r\nContent-Length: 0\r\n\r\n", "", false},
	{"bare line feeds", "HTTP/1.1 200 OK\nContent-Length: 0\n\n", "", false},
	{"a bare line feed inside", "HTTP/1.1 200 OK\r\nX-A: a\nContent-Length: 0\r\n\r\n", "", false},
	{"control byte in a value", "HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 0\r\n\r\n", "", false},
	{"space before the colon", "HTTP/1.1 200 OK\r\nX-A : a\r\nContent-Length: 0\r\n\r\n", "", false},
	{"no colon", "HTTP/1.1 200 OK\r\nX-A\r\nContent-Length: 0\r\n\r\n", "", false},
	{"empty name", "HTTP/1.1 200 OK\r\n: a\r\nContent-Length: 0\r\n\r\n", "", false},
	{"status not three digits", "HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n", "", false},
	{"two spaces before the status", "HTTP/1.1  200 OK\r\nContent-Length: 0\r\n\r\n", "", false},
	{"status over 599", "HTTP/1.1 600 Odd\r\nContent-Length: 0\r\n\r\n", "", false},
	{"not HTTP", "SSH-2.0-OpenSSH_9.2\r\n\r\n", "", false},
	{"HTTP/2 preface", "HTTP/2 200\r\nContent-Length: 0\r\n\r\n", "", false},
	{"answer to HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", "HEAD", false},
	{"head not ended", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n", "", false},
	{"nothing", "", "", false},
}

func TestReadResponseMatchesNetHTTP(t *testing.T) {
	for _, w := range wireResponses {
		t.Run(w.name, func(t *testing.T) {
			req := &http.Request{Method: cmp(w.method, "POST")}
			br := bufio.NewReader(strings.NewReader(w.raw))
			if _, err := br.Peek(1); err == nil {
				if plain := readPlainResponse(br, req) != nil; plain != w.plain {
					t.Errorf("read by readPlainResponse itself: %v, want %v", plain, w.plain)
				}
			} else if w.plain {
				t.Errorf("nothing to read")
			}
			compareReads(t, func() io.Reader { return strings.NewReader(w.raw) }, req)
			// A head that arrives a byte at a time is left to net/http, with the same result.
			compareReads(t, func() io.Reader { return iotest.OneByteReader(strings.NewReader(w.raw)) }, req)
		})
	}
}

func cmp(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// compareReads reads an answer from src with readResponse and with http.ReadResponse and
// compares the answers, their bodies and what is left to read after them.
func compareReads(t *testing.T, src func() io.Reader, req *http.Request) {
	t.Helper()
	bra, brb := bufio.NewReader(src()), bufio.NewReader(src())
	a, errA := readResponse(bra, req)
	b, errB := http.ReadResponse(brb, req)
	if fmt.Sprint(errA) != fmt.Sprint(errB) {
		t.Fatalf("error %v, net/http's %v", errA, errB)
	}
	if errA != nil {
		return
	}
	type head struct {
		Status                    string
		StatusCode                int
		Proto                     string
		ProtoMajor, ProtoMinor    int
		Header, Trailer           http.Header
		ContentLength             int64
		TransferEncoding          []string
		Close, Uncompressed, None bool
		Request                   *http.Request
	}
	headOf := func(r *http.Response) head {
		return head{r.Status, r.StatusCode, r.Proto, r.ProtoMajor, r.ProtoMinor, r.Header, r.Trailer,
			r.ContentLength, r.TransferEncoding, r.Close, r.Uncompressed, r.Body == http.NoBody, r.Request}
	}
	if ha, hb := headOf(a), headOf(b); !reflect.DeepEqual(ha, hb) {
		t.Fatalf("answer\n%+v\nnet/http's\n%+v", ha, hb)
	}
	bodyA, errA := io.ReadAll(a.Body)
	bodyB, errB := io.ReadAll(b.Body)
	if string(bodyA) != string(bodyB) || fmt.Sprint(errA) != fmt.Sprint(errB) {
		t.Fatalf("body %q (%v), net/http's %q (%v)", bodyA, errA, bodyB, errB)
	}
	if n, err := a.Body.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) && errA == nil {
		t.Fatalf("read after the end: %d, %v", n, err)
	}
	restA, _ := io.ReadAll(bra)
	restB, _ := io.ReadAll(brb)
	if string(restA) != string(restB) {
		t.Fatalf("left %q, net/http left %q", restA, restB)
	}
}

func FuzzReadResponse(f *testing.F) {
	for _, w := range wireResponses {
		f.Add(w.raw, w.method == "HEAD")
	}
	f.Fuzz(func(t *testing.T, raw string, head bool) {
		req := &http.Request{Method: "POST"}
		if head {
			req.Method = "HEAD"
		}
		compareReads(t, func() io.Reader { return strings.NewReader(raw) }, req)
	})
}

func FuzzWriteRequest(f *testing.F) {
	f.Add("POST", "http://127.0.0.1:8080/hook?x=1", "", "Aeg-Event-Type", "Notification", "X-B", " b ", "body", int64(4))
	f.Add("", "http://example.com", "h", "User-Agent", "", "x-lower", "v", "", int64(0))
	f.Add("GET", "http://[::1]/", "", "Content-Length", "3", "Host", "x", "abc", int64(2))
	f.Fuzz(func(t *testing.T, method, target, host, k1, v1, k2, v2, body string, length int64) {
		u, err := url.Parse(target)
		if err != nil {
			return
		}
		build := func() *http.Request {
			req := &http.Request{Method: method, URL: u, Host: host, Header: http.Header{k1: {v1}, k2: {v2}}, ContentLength: length}
			if body != "" || length != 0 {
				req.Body = io.NopCloser(strings.NewReader(body))
			}
			return req
		}
		compareWrites(t, build(), build())
	})
}

func TestHostPort(t *testing.T) {
	for _, target := range []string{
		"http://127.0.0.1:8080/x", "http://example.com/x", "http://Example.COM:81/", "http://[::1]:8080/",
		"http://[::1]/", "http://host:/", "http://[fe80::1%25eth0]:80/", "http://user:pw@example.com:99/",
	} {
		u, err := url.Parse(target)
		if err != nil {
			t.Fatal(err)
		}
		port := u.Port()
		if port == "" {
			port = "80"
		}
		want := net.JoinHostPort(u.Hostname(), port)
		if got := hostPort(&http.Request{URL: u}); got != want {
			t.Errorf("%s: %q, want %q", target, got, want)
		}
	}
}
