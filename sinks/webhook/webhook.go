package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"golang.org/x/time/rate"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/schemas/clip"
	"github.com/egridio/egrid/sinks"
)

// Config describes one webhook destination. It is data: the HTTP client is a parameter of
// [New].
type Config struct {
	// URL is the endpoint, an absolute http or https URL with a host. Its query string is
	// sent on every delivery (eventgrid-behaviour.md §5.1), so it may carry a secret.
	URL string `json:"url" yaml:"url"`
	// Timeout is the response timeout of one attempt, covering connect, request, response
	// headers and reading the response body. Zero means [sinks.DefaultTimeout] (30 s,
	// SPEC §2.1).
	Timeout time.Duration `json:"timeout,omitempty" yaml:"timeout,omitempty"`
	// Headers are custom delivery headers (Event Grid's delivery attribute mappings, SPEC
	// §2.4), sent with every request; dynamic ones are resolved from the first event of each
	// batch. A batch's own Headers are sent too; these win on a name clash.
	Headers sinks.HeaderMappings `json:"headers,omitempty" yaml:"headers,omitempty"`
	// MaxRequestsPerMinute caps the request rate, as a CloudEvents endpoint asks with
	// WebHook-Allowed-Rate (SPEC §2.5): requests are spaced at least a minute divided by it
	// apart, and Deliver waits for its turn before the attempt timeout starts. Zero means no
	// cap.
	MaxRequestsPerMinute int `json:"maxRequestsPerMinute,omitempty" yaml:"maxRequestsPerMinute,omitempty"`
	// Origin, when set, is sent as the Origin header of every delivery: the
	// WebHook-Request-Origin of the abuse-protection handshake the endpoint consented to, as
	// the CloudEvents webhook specification (section 4.1) and Event Grid's CloudEvents
	// validation page (learn.microsoft.com/azure/event-grid/end-point-validation-cloud-events-schema)
	// say deliveries after the handshake carry. Empty sends none.
	Origin string `json:"origin,omitempty" yaml:"origin,omitempty"`
	// Parsed, when set, is URL as url.Parse returned it: a caller that parsed it already
	// saves New a second parse (each is garbage). New checks it as it checks URL.
	Parsed *url.URL `json:"-" yaml:"-"`
}

// ConfigError is one problem with a [Config]. [Config.Validate] joins one per problem.
type ConfigError struct {
	// Field is the Config field at fault ("url", "timeout").
	Field string
	// Reason says what is wrong and what to do.
	Reason string
}

// Error describes the problem.
func (e *ConfigError) Error() string { return "webhook " + e.Field + ": " + e.Reason }

// Validate reports every problem with c at once (joined *[ConfigError] values), or nil.
func (c Config) Validate() error {
	_, err := c.validate()
	return err
}

// validate is Validate that also returns the parsed URL (nil when it is bad), so New parses
// it once.
func (c Config) validate() (*url.URL, error) {
	var errs []error
	u, err := c.Parsed, error(nil)
	if u == nil {
		u, err = parseURL(c.URL)
	} else {
		err = checkURL(u)
	}
	if err != nil {
		u = nil
		errs = append(errs, err)
	}
	if c.Timeout < 0 {
		errs = append(errs, &ConfigError{Field: "timeout", Reason: fmt.Sprintf("%s is negative; use a positive duration, or 0 for the default %s", c.Timeout, sinks.DefaultTimeout)})
	}
	if err := c.Headers.Validate(); err != nil {
		for _, e := range flatten(err) {
			errs = append(errs, &ConfigError{Field: "headers", Reason: e.Error()})
		}
	}
	if c.MaxRequestsPerMinute < 0 {
		errs = append(errs, &ConfigError{Field: "maxRequestsPerMinute", Reason: fmt.Sprintf("%d is negative; use a positive number, or 0 for no cap", c.MaxRequestsPerMinute)})
	}
	return u, errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = sinks.DefaultTimeout
	}
	return c
}

// parseURL checks an endpoint URL. It does not print the URL back: it may hold a secret.
func parseURL(raw string) (*url.URL, error) {
	bad := func(reason string) (*url.URL, error) {
		return nil, &ConfigError{Field: "url", Reason: reason}
	}
	if raw == "" {
		return bad("is empty; set the endpoint, e.g. https://example.com/events")
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the whole URL
		}
		return bad(fmt.Sprintf("cannot be parsed (%v); use an absolute http or https URL", err))
	}
	if err := checkURL(u); err != nil {
		return nil, err
	}
	return u, nil
}

// checkURL checks a parsed endpoint URL; see parseURL.
func checkURL(u *url.URL) error {
	bad := func(reason string) error { return &ConfigError{Field: "url", Reason: reason} }
	if !u.IsAbs() {
		return bad("is not absolute; use an http:// or https:// URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return bad(fmt.Sprintf("scheme %q is not supported; use http or https", clip.String(u.Scheme)))
	}
	if u.Opaque != "" || u.Hostname() == "" {
		return bad("has no host; use scheme://host[:port]/path")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return bad(fmt.Sprintf("port %q is out of range; use 1-65535", clip.String(p)))
		}
	}
	return nil
}

// Sink delivers batches to one webhook endpoint. It implements [sinks.Sink]; it is immutable
// after [New] and safe for concurrent use.
type Sink struct {
	url     string
	display string // url without query string and user info, for error messages
	timeout time.Duration
	client  *http.Client
	headers sinks.HeaderMappings
	pace    *rate.Limiter // nil without a rate cap
	origin  string        // the Origin header, or ""
	// wire is what every request needs, made at the first Deliver: a subscription that never
	// delivers keeps only this pointer (see [wire]).
	wire atomic.Pointer[wire]
}

// wire is what a [Sink] reuses on every request instead of making it anew.
type wire struct {
	u    url.URL // the parsed URL: each request takes a copy instead of parsing it
	host string  // the request's Host: u.Host without an empty port, as net/http sends it
	// timeoutCause ends an attempt's context when the attempt timeout passes, so a timeout
	// reads as such in the error chain. It wraps context.DeadlineExceeded.
	timeoutCause error
	// direct, when not nil, is the client's transport, which Deliver sends through without
	// Client.Do: see [sendsDirectly].
	direct http.RoundTripper
	// own is direct when it is one [NewClient] made, whose direct pool sends a small request
	// whole before RoundTrip returns.
	own *transport
}

// wireOf returns s's wire, making it at the first call.
func (s *Sink) wireOf() *wire {
	if w := s.wire.Load(); w != nil {
		return w
	}
	u, err := url.Parse(s.url)
	if err != nil { // cannot happen for a URL New accepted
		u = &url.URL{}
	}
	w := &wire{u: *u, host: u.Host, timeoutCause: timeoutCause(s.timeout)}
	if strings.LastIndex(w.host, ":") > strings.LastIndex(w.host, "]") {
		w.host = strings.TrimSuffix(w.host, ":")
	}
	if sendsDirectly(s.client, u) {
		w.direct = s.client.Transport
		w.own, _ = w.direct.(*transport)
	}
	s.wire.Store(w) // a concurrent first Deliver may store its own, equal one
	return w
}

// sendsDirectly reports whether a request to u through c may go to c's transport without
// Client.Do, which then adds nothing and costs a copy of the request's headers (kept for
// redirects it would not follow): c is one [NewClient] made (it refuses redirects), has no
// cookie jar or overall timeout at the sink's first delivery, and u carries no user info
// (Client.Do would turn it into Basic authentication).
func sendsDirectly(c *http.Client, u *url.URL) bool {
	return c.Transport != nil && c.Jar == nil && c.Timeout == 0 && u.User == nil &&
		c.CheckRedirect != nil && reflect.ValueOf(c.CheckRedirect).Pointer() == reflect.ValueOf(refuseRedirects).Pointer()
}

// refuseRedirects is the CheckRedirect of [NewClient]'s clients: a 3xx answer is the
// attempt's outcome.
func refuseRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// New validates cfg and returns a sink for its URL. client is the HTTP client to use; nil
// means [SharedClient]. A client's own Timeout, if set, applies in addition to cfg.Timeout.
func New(cfg Config, client *http.Client) (*Sink, error) {
	u, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if client == nil {
		client = SharedClient()
	}
	display := displayURL(u)
	if display == cfg.URL {
		display = cfg.URL // most endpoints: one string kept, not two
	}
	return &Sink{
		url:     cfg.URL,
		display: display,
		timeout: cfg.Timeout,
		client:  client,
		headers: cfg.Headers,
		pace:    newPacer(cfg.MaxRequestsPerMinute),
		origin:  cfg.Origin,
	}, nil
}

// timeoutCauses shares one cause error per timeout value among sinks (most share the default).
var timeoutCauses sync.Map // time.Duration -> error

func timeoutCause(d time.Duration) error {
	if err, ok := timeoutCauses.Load(d); ok {
		return err.(error)
	}
	err, _ := timeoutCauses.LoadOrStore(d, fmt.Errorf("no response within the %s attempt timeout: %w", d, context.DeadlineExceeded))
	return err.(error)
}

// URL returns the endpoint URL, query string included.
func (s *Sink) URL() string { return s.url }

// maxCopiedBody is the largest request body Deliver copies rather than guards (see
// [newGuardedBody]). Copying a body this size costs less than the extra write net/http makes
// for a body it does not know to be in memory; larger bodies take several writes anyway.
const maxCopiedBody = 64 << 10

// maxDrain is how much of a response body Deliver reads so the connection can be reused.
const maxDrain = 64 << 10

// canonical maps the lower-case names of [schemas.DeliveryHeaders] to their canonical HTTP
// forms, computed once so Deliver does not canonicalise per request.
var canonical = func() map[string]string {
	m := make(map[string]string)
	for _, name := range []string{
		schemas.HeaderEventType, schemas.HeaderSubscriptionName, schemas.HeaderDeliveryCount,
		schemas.HeaderMetadataVersion, schemas.HeaderContentType, schemas.HeaderOutputEventID,
		schemas.HeaderDataVersion, schemas.HeaderTraceparent, schemas.HeaderTracestate,
	} {
		m[name] = http.CanonicalHeaderKey(name)
	}
	return m
}()

const (
	hdrRetryAfter = "Retry-After"
	hdrOrigin     = "Origin"
)

// Deliver POSTs b to the endpoint: one attempt (see the package documentation for the
// headers and the outcome classification). It returns nil when the endpoint answered
// 200-204, with that status in b.StatusCode, and a *[sinks.DeliveryError] otherwise. It does
// not read b after it returns.
func (s *Sink) Deliver(ctx context.Context, b *sinks.Batch) error {
	if err := unsendable(b); err != nil {
		return err
	}
	h, err := header(b, s.custom(b))
	if err != nil { // checked above
		return &sinks.UnsendableError{Faults: []sinks.EventFault{{Index: 0, Err: err}}}
	}
	if err := waitTurn(ctx, s.pace); err != nil {
		return &sinks.DeliveryError{Outcome: classify(err, ctx.Err()), Err: fmt.Errorf("waiting for the request rate %s allows: %w", s.display, err)}
	}
	w := s.wireOf()
	actx := ctx
	if dl, ok := ctx.Deadline(); !ok || dl.After(time.Now().Add(s.timeout)) {
		// Otherwise the caller's deadline comes first (a subscription bounds each attempt
		// itself): a context of our own would only add a timer, or a cancel context that
		// ends with the caller's, to every request.
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeoutCause(ctx, s.timeout, w.timeoutCause)
		defer cancel()
	}

	// The request as http.NewRequestWithContext makes it, from a copy of the parsed URL.
	u := new(url.URL)
	*u = w.u
	req := (&http.Request{
		Method: http.MethodPost, URL: u, Host: w.host, Header: h,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
	}).WithContext(actx)
	if s.origin != "" {
		req.Header.Set(hdrOrigin, s.origin)
	}
	req.ContentLength = int64(len(b.Body))
	switch n := len(b.Body); {
	case n == 0:
		req.Body = http.NoBody
	case n <= maxDirectBody && w.own != nil && w.own.sendsDirectly(req):
		// The direct pool writes the whole request, and any resend of it, before RoundTrip
		// returns: nothing reads the body once Deliver has returned, so it needs no copy.
		body := b.Body
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	case n <= maxCopiedBody:
		// A copy the request owns, behind a *bytes.Reader: net/http then writes the headers
		// and the body in one write (it flushes the headers first for any other reader, one
		// more syscall and packet per request), and a late read sees the copy, never the
		// caller's buffer.
		own := bytes.Clone(b.Body)
		req.Body = io.NopCloser(bytes.NewReader(own))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(own)), nil }
	default:
		body := newGuardedBody(b.Body)
		defer body.release()
		req.Body = body.reader()
		req.GetBody = func() (io.ReadCloser, error) { return body.reader(), nil }
	}

	var resp *http.Response
	if w.direct != nil {
		resp, err = w.direct.RoundTrip(req)
	} else {
		resp, err = s.client.Do(req)
	}
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error prints the whole URL, query string and all
		}
		return &sinks.DeliveryError{
			Outcome: classify(err, ctx.Err()),
			Err:     fmt.Errorf("delivering to %s: %w", s.display, err),
		}
	}
	// Read what is left of the body so the connection goes back to the pool. Errors here do
	// not change the outcome: the status has already been received.
	_, _ = io.CopyN(io.Discard, resp.Body, maxDrain)
	_ = resp.Body.Close()

	code := resp.StatusCode
	outcome := schemas.OutcomeForStatus(code)
	if outcome == schemas.Delivered {
		b.StatusCode = code
		return nil
	}
	de := &sinks.DeliveryError{
		Outcome:    outcome,
		StatusCode: code,
		Err:        fmt.Errorf("%s answered %s", s.display, statusOf(resp)),
	}
	if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
		de.RetryAfter = resp.Header.Get(hdrRetryAfter)
	}
	return de
}

// statusOf is resp's status line as a message repeats it. The reason phrase is the endpoint's
// own text, and the message reaches logs, the admin API, `egrid explain` and terminals: a
// phrase that is not short printable UTF-8 (one holding escape sequences that would retitle a
// terminal, clear it or set its clipboard) is shortened and quoted with [clip.Quote] after the
// code. A plain status ("503 Service Unavailable") is returned as it is, without allocating.
func statusOf(resp *http.Response) string {
	if len(resp.Status) <= len("000 ")+clip.Default && utf8.ValidString(resp.Status) && !strings.ContainsFunc(resp.Status, func(r rune) bool { return !strconv.IsPrint(r) }) {
		return resp.Status
	}
	code := strconv.Itoa(resp.StatusCode)
	return code + " " + clip.Quote(strings.TrimSpace(strings.TrimPrefix(resp.Status, code)))
}

// custom returns the configured custom headers resolved for b: dynamic values come from the
// batch's first event (see [sinks.HeaderMappings.Resolve]).
func (s *Sink) custom(b *sinks.Batch) map[string]string {
	if len(s.headers) == 0 {
		return nil
	}
	var first *schemas.Event
	if len(b.Events) > 0 {
		first = b.Events[0]
	}
	return s.headers.Resolve(first, b.Encoding().In)
}

// unsendable returns an *[sinks.UnsendableError] listing the events of b whose header-bound
// values cannot be sent ([schemas.CheckHeaderBound]), or nil. Only the first event's values
// go into this request's headers, but any event may be first in a retry, so none of them can
// ever be delivered (SPEC §8).
func unsendable(b *sinks.Batch) error {
	out := b.Encoding().Out
	var faults []sinks.EventFault
	for i, ev := range b.Events {
		if ev == nil {
			continue
		}
		if err := schemas.CheckHeaderBound(out, ev); err != nil {
			faults = append(faults, sinks.EventFault{Index: i, Err: err})
		}
	}
	if faults == nil {
		return nil
	}
	return &sinks.UnsendableError{Faults: faults}
}

// header builds the delivery headers of b (SPEC §2.4): the batch's custom headers, then the
// sink's (custom), then the protocol headers of [schemas.DeliveryHeaders], each later set
// winning. A custom value that cannot be sent is left out; a protocol value taken from the
// batch's first event that cannot be sent is the error (a *[schemas.HeaderError]).
func header(b *sinks.Batch, custom map[string]string) (http.Header, error) {
	enc := b.Encoding()
	contentType := b.ContentType
	if contentType == "" {
		contentType = enc.ContentType(len(b.Events))
	}
	var first *schemas.Event
	if len(b.Events) > 0 {
		first = b.Events[0]
	}
	var buf [8]schemas.Header
	protocol, err := schemas.DeliveryHeaders{
		Schema: enc.Out, Subscription: b.Subscription, DeliveryCount: b.DeliveryCount,
		ContentType: contentType, Event: first,
	}.Append(buf[:0])
	if err != nil {
		return nil, err
	}
	h := make(http.Header, len(protocol)+len(b.Headers)+len(custom))
	for _, m := range []map[string]string{b.Headers, custom} {
		for name, value := range m {
			if validHeaderName(name) && validHeaderValue(value) {
				h.Set(name, value)
			}
		}
	}
	// One backing array for the protocol header values; each gets a one-element slice of it.
	vals := make([]string, len(protocol))
	for i, p := range protocol {
		vals[i] = p.Value
		h[canonical[p.Name]] = vals[i : i+1 : i+1]
	}
	return h, nil
}

// validHeaderName reports whether name is an HTTP token (RFC 9110 §5.1).
func validHeaderName[T string | []byte](name T) bool {
	if len(name) == 0 {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c >= 0x80 || !tokenByte[c] {
			return false
		}
	}
	return true
}

// tokenByte marks the bytes of a token: letters, digits and !#$%&'*+-.^_`|~.
var tokenByte = func() (t [0x80]bool) {
	for c := range t {
		t[c] = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// validHeaderValue reports whether v can be sent as a header value: no control characters
// other than horizontal tab (RFC 9110 §5.5).
func validHeaderValue[T string | []byte](v T) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// SharedClient returns the HTTP client [New] uses when given nil, so a router can share it
// (for the validation handshake, say). It is tuned for connection reuse: keep-alive, up to
// 256 idle connections per host, answer heads of at most 64 KiB, no compression (response
// bodies are discarded), no overall Timeout (each attempt is bounded by its context) and no
// redirects (a 3xx is a failed attempt). It honours the HTTP_PROXY, HTTPS_PROXY and NO_PROXY environment variables. Its
// transport sends small plain-http requests on the caller's goroutine (see the package
// documentation) and the rest through net/http's Transport.
func SharedClient() *http.Client { return sharedClient() }

var sharedClient = sync.OnceValue(func() *http.Client {
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	return NewClient(dialer.DialContext)
})

// NewClient returns a client tuned like [SharedClient] whose connections are made by dial:
// typically an egress policy's DialContext (sinks/egress), which refuses denied addresses
// after DNS resolution. A dial error that wraps [sinks.ErrDestinationDenied] makes the attempt
// InvalidDestination. Call CloseIdleConnections when done with it.
func NewClient(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Client {
	const maxIdle, maxIdlePerHost, idleTimeout = 1024, 256, 90 * time.Second
	return &http.Client{
		Transport: &transport{
			Transport: &http.Transport{
				Proxy:                  http.ProxyFromEnvironment,
				DialContext:            dial,
				ForceAttemptHTTP2:      true,
				MaxIdleConns:           maxIdle,
				MaxIdleConnsPerHost:    maxIdlePerHost,
				IdleConnTimeout:        idleTimeout,
				TLSHandshakeTimeout:    10 * time.Second,
				MaxResponseHeaderBytes: maxResponseHeaderBytes,
				ExpectContinueTimeout:  time.Second,
				DisableCompression:     true,
			},
			direct: newDirectPool(dial, maxIdlePerHost, maxIdle, idleTimeout),
		},
		CheckRedirect: refuseRedirects,
	}
}
