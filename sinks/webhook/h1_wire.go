package webhook

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
)

// The direct pool's HTTP/1.1 wire code. The requests egrid sends and the answers endpoints
// give are almost always the same few shapes: a POST with a handful of headers and a body of
// known length, and a status line with a few headers and a Content-Length. For those shapes,
// writeRequest and readResponse write and read the same bytes as [http.Request.Write] and
// [http.ReadResponse] and build the same results, in a fraction of their CPU (they format
// with fmt, sort the headers through a pooled sorter, and read line by line through
// net/textproto). Anything else — a client trace, a trailer, a transfer encoding, a header
// that must be cleaned, an answer that is chunked, close-delimited, informational, to a HEAD,
// asks to close the connection or does not fit the read buffer — goes to net/http's own
// functions. The tests hold both to net/http's output (h1_wire_test.go, including fuzz
// targets that compare the two on arbitrary input).

// writeRequest writes req to bw as [http.Request.Write] would.
func writeRequest(bw *bufio.Writer, req *http.Request) error {
	var stack [sortedHeaders]string
	host, uri, names, ok := plainRequest(req, stack[:0])
	if !ok {
		return req.Write(bw)
	}
	err := writeHead(bw, req, host, uri, names)
	if err == nil && req.ContentLength > 0 {
		err = writeBody(bw, req)
	}
	if req.Body != nil {
		if cerr := req.Body.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// plainRequest reports whether writeRequest writes req itself, with the Host header, the
// request target and the names of the headers after Content-Length it writes (appended to
// names, in no order): a host of letters, digits and the punctuation of names and
// addresses (net/http would write it unchanged), a request target without control bytes, no
// client trace, trailer, transfer encoding or Connection: close to add, a body of stated
// length, and headers whose names are tokens and whose values have no control bytes (net/http
// would drop or clean those).
func plainRequest(req *http.Request, names []string) (host, uri string, _ []string, ok bool) {
	hasBody := req.Body != nil && req.Body != http.NoBody
	switch {
	case req.URL == nil, req.Method == http.MethodConnect, req.Method != "" && !validHeaderName(req.Method):
		return "", "", nil, false
	case req.Close, req.Trailer != nil, len(req.TransferEncoding) > 0:
		return "", "", nil, false
	case req.ContentLength < 0, (req.ContentLength > 0) != hasBody:
		return "", "", nil, false
	}
	if httptrace.ContextClientTrace(req.Context()) != nil {
		return "", "", nil, false
	}
	host = req.Host
	if host == "" {
		host = req.URL.Host
	}
	for i := 0; i < len(host); i++ {
		switch c := host[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.', c == '-', c == '_', c == ':', c == '[', c == ']':
		default:
			return "", "", nil, false
		}
	}
	uri = req.URL.RequestURI()
	for i := 0; i < len(uri); i++ {
		if c := uri[i]; c < ' ' || c == 0x7f {
			return "", "", nil, false
		}
	}
	for name, values := range req.Header {
		if !validHeaderName(name) {
			return "", "", nil, false
		}
		for _, v := range values {
			if !validHeaderValue(v) {
				return "", "", nil, false
			}
		}
		switch name {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
			// Written by net/http from the request's fields, or not at all.
		default:
			names = append(names, name)
		}
	}
	return host, uri, names, true
}

// defaultUserAgent is the User-Agent net/http sends when the request sets none.
const defaultUserAgent = "Go-http-client/1.1"

// sortedHeaders is how many header names writeRequest collects and sorts without allocating.
const sortedHeaders = 16

// writeHead writes the request line and the headers in net/http's order: Host, User-Agent,
// Content-Length, then the headers names lists, sorted by name.
func writeHead(bw *bufio.Writer, req *http.Request, host, uri string, names []string) error {
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	bw.WriteString(method)
	bw.WriteByte(' ')
	bw.WriteString(uri)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(host)
	bw.WriteString("\r\n")
	ua := defaultUserAgent
	if v, ok := req.Header["User-Agent"]; ok {
		ua = ""
		if len(v) > 0 {
			ua = v[0]
		}
	}
	if ua != "" { // trimmed after the test, as net/http does: "User-Agent: " for a blank one
		bw.WriteString("User-Agent: ")
		bw.WriteString(textproto.TrimString(ua))
		bw.WriteString("\r\n")
	}
	if sendsContentLength(method, req.ContentLength) {
		bw.WriteString("Content-Length: ")
		bw.Write(strconv.AppendInt(bw.AvailableBuffer(), req.ContentLength, 10))
		bw.WriteString("\r\n")
	}
	// Insertion sort: a request has a handful of headers, and it allocates nothing.
	for i := 1; i < len(names); i++ {
		for j := i; j > 0 && names[j] < names[j-1]; j-- {
			names[j], names[j-1] = names[j-1], names[j]
		}
	}
	for _, name := range names {
		for _, v := range req.Header[name] {
			bw.WriteString(name)
			bw.WriteString(": ")
			bw.WriteString(textproto.TrimString(v))
			bw.WriteString("\r\n")
		}
	}
	_, err := bw.WriteString("\r\n")
	return err
}

// sendsContentLength reports whether net/http writes a Content-Length header for a request
// with no transfer encoding: for a body, and for an empty one on the methods that usually
// carry one (many servers expect it there).
func sendsContentLength(method string, n int64) bool {
	return n > 0 || method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch
}

// writeBody writes the request's body of req.ContentLength bytes; a body of another length
// is the error net/http gives.
func writeBody(bw *bufio.Writer, req *http.Request) error {
	n, err := io.CopyN(bw, req.Body, req.ContentLength)
	if err != nil && err != io.EOF {
		return err
	}
	if n == req.ContentLength { // net/http reads on to the end and counts what is over
		var extra int64
		extra, err = io.Copy(io.Discard, req.Body)
		if err != nil {
			return err
		}
		n += extra
	}
	if n != req.ContentLength {
		return fmt.Errorf("http: ContentLength=%d with Body length %d", req.ContentLength, n)
	}
	return nil
}

// readResponse reads the head of an answer to req from br as [http.ReadResponse] does; the
// body is read through the answer's Body.
func readResponse(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	// The first read is the one that waits for the answer; its error is ReadResponse's.
	if _, err := br.Peek(1); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if resp := readPlainResponse(br, req); resp != nil {
		return resp, nil
	}
	return http.ReadResponse(br, req)
}

// readPlainResponse returns the answer whose head br holds whole, or nil, having read
// nothing, when its shape is one it leaves to http.ReadResponse: not HTTP/1.1, a status that
// is informational, malformed or outside 200–599, to a HEAD request, a line that does not
// end in CRLF, a header line that is not a token, a colon and a value without control bytes
// (or is folded), or a header that changes the framing or the header set (Transfer-Encoding,
// Trailer, Pragma, Connection: close, several Content-Lengths or one that is not digits), or
// no Content-Length outside 204 and 304 (a body that ends with the connection).
func readPlainResponse(br *bufio.Reader, req *http.Request) *http.Response {
	if req == nil || req.Method == http.MethodHead {
		return nil
	}
	buf, _ := br.Peek(br.Buffered())
	end := bytes.Index(buf, []byte("\r\n\r\n"))
	if end < 0 {
		return nil
	}
	head := buf[:end+2] // each line with its CRLF
	const proto = "HTTP/1.1 "
	line, rest, _ := bytes.Cut(head, []byte("\r\n"))
	if len(line) < len(proto)+3 || string(line[:len(proto)]) != proto || bytes.IndexByte(line, '\n') >= 0 {
		return nil
	}
	status := line[len(proto):]
	code := 0
	for _, c := range status[:3] {
		if c < '0' || c > '9' {
			return nil
		}
		code = code*10 + int(c-'0')
	}
	if code < 200 || code > 599 || (len(status) > 3 && status[3] != ' ') {
		return nil
	}
	noBody := code == http.StatusNoContent || code == http.StatusNotModified

	// The values share one array, as net/textproto's do.
	lines := bytes.Count(rest, []byte("\r\n"))
	values := make([]string, 0, lines)
	h := make(http.Header, lines)
	length := int64(-1)
	for len(rest) > 0 {
		line, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return nil
		}
		name, ok := canonicalName(line[:colon])
		if !ok {
			return nil
		}
		v := line[colon+1:]
		if !validHeaderValue(v) {
			return nil
		}
		v = bytes.Trim(v, " \t")
		switch name {
		case "Transfer-Encoding", "Trailer", "Pragma":
			return nil
		case "Connection":
			if hasCloseToken(v) {
				return nil
			}
		case "Content-Length":
			if length >= 0 {
				return nil
			}
			if length = digits(v); length < 0 {
				return nil
			}
		}
		values = append(values, string(v))
		if vv := h[name]; vv == nil { // a one-element window of the shared array
			h[name] = values[len(values)-1 : len(values) : len(values)]
		} else {
			h[name] = append(vv, values[len(values)-1])
		}
	}
	if length < 0 && !noBody {
		return nil
	}
	resp := &http.Response{
		Status: string(status), StatusCode: code,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Request: req, ContentLength: length,
	}
	_, _ = br.Discard(end + 4)
	if noBody || length == 0 {
		resp.ContentLength = 0
		resp.Body = http.NoBody
	} else {
		resp.Body = &fixedBody{br: br, n: length}
	}
	return resp
}

// canonicalName returns the canonical form of the header name b, as net/textproto gives it,
// or false when b is not a token. The names answers carry most are returned without
// allocating.
func canonicalName(b []byte) (string, bool) {
	var stack [64]byte
	if len(b) > len(stack) {
		if !validHeaderName(b) {
			return "", false
		}
		return http.CanonicalHeaderKey(string(b)), true
	}
	name := stack[:len(b)]
	upper := true
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			if upper {
				c -= 'a' - 'A'
			}
		case c >= 'A' && c <= 'Z':
			if !upper {
				c += 'a' - 'A'
			}
		case c < 0x80 && tokenByte[c]:
		default:
			return "", false
		}
		name[i] = c
		upper = c == '-'
	}
	switch string(name) {
	case "Content-Length":
		return "Content-Length", true
	case "Content-Type":
		return "Content-Type", true
	case "Date":
		return "Date", true
	case "Connection":
		return "Connection", true
	case "Keep-Alive":
		return "Keep-Alive", true
	case "Server":
		return "Server", true
	case "Retry-After":
		return "Retry-After", true
	}
	return string(name), true
}

// hasCloseToken reports whether the Connection header value v lists "close".
func hasCloseToken(v []byte) bool {
	for len(v) > 0 {
		var tok []byte
		tok, v, _ = bytes.Cut(v, []byte(","))
		if bytes.EqualFold(bytes.Trim(tok, " \t"), []byte("close")) {
			return true
		}
	}
	return false
}

// digits returns the value of the decimal number v, or -1 when v is empty, not all digits
// or over 18 digits long.
func digits(v []byte) int64 {
	if len(v) == 0 || len(v) > 18 {
		return -1
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int64(c-'0')
	}
	return n
}

// fixedBody is the body of an answer with a Content-Length, read from the connection's
// reader: io.EOF with its last byte, io.ErrUnexpectedEOF when the connection ends before it,
// as net/http's own body.
type fixedBody struct {
	br *bufio.Reader
	n  int64
}

func (b *fixedBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.br.Read(p)
	b.n -= int64(n)
	if b.n == 0 {
		return n, io.EOF
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *fixedBody) Close() error { return nil }
