package httpserver

import (
	"log/slog"
	"net"
	"net/http"
)

// Requests says which requests the per-request limits of [New] apply to. A nil field selects
// none. The long polls are not among them: their handler takes their slots ([PollLimit]) once
// they are authenticated and about to wait; nor are the publishes of a handler that takes
// their slots itself ([BodyLimit]) once they are authenticated and about to read their
// bodies, as egrid's does.
type Requests struct {
	// Publish selects the requests with bodies that [Config.MaxPublishBodies] bounds, each
	// taking its slot as it arrives ([LimitBodies]).
	Publish func(*http.Request) bool
}

// MaxConcurrentStreams bounds the requests a client may have in progress at once on one
// HTTP/2 connection (TLS serves HTTP/2 by default). net/http's default is 250, so 4 096
// connections could carry a million requests in progress. 100 is the smallest value RFC 9113 §6.5.2
// recommends; a client that needs more opens another connection, which
// [Config.MaxConnections] counts. The long polls among those requests are bounded across all
// connections by [Config.MaxReceivePolls] ([PollLimit]).
const MaxConcurrentStreams = 100

// MaxReceiveBuffer bounds the request body bytes an HTTP/2 connection may have sent that no
// handler has read yet (the connection's flow-control window), in place of net/http's 1 MiB.
// A publish waiting for one of [Config.MaxPublishBodies] slots has not read its body:
// net/http's window let each connection park 1 MiB in the server's memory meanwhile, 4 GiB at
// 4 096 connections; 256 KiB parks 1 GiB at most. (An HTTP/1 body waiting so stays in the
// kernel's socket buffer.) Each stream keeps net/http's 1 MiB window, which the connection's
// bounds. The cost is throughput per connection when the round trip is long, one window per
// round trip: 12.8 MB/s at 20 ms, above Event Grid's 5 MB/s per topic; on loopback a 1 MB
// upload is within the noise alone and up to a quarter slower with eight on one connection
// (BenchmarkHTTP2Upload; see the README).
const MaxReceiveBuffer = 256 << 10

// New returns an http.Server serving h with cfg's timeouts and header limit, and the requests
// req.Publish selects limited to cfg.MaxPublishBodies at once ([LimitBodies]; a handler that
// bounds its publishes itself does so with a [BodyLimit] of cfg.MaxPublishBodies and
// cfg.PublishWait instead). The long polls are h's to bound, with a [PollLimit] of
// cfg.MaxReceivePolls. A request must be read whole
// within ReadHeaderTimeout + BodyTimeout of its first byte (http.Server.ReadTimeout); net/http
// clears that deadline once the body has been read, so a handler that then waits (a publish
// waiting for its fsync) keeps its context. There is no
// WriteTimeout, on purpose: a pull delivery :receive reads its (empty) body at once and then
// long-polls for up to 120 s (maxWaitTime) before it answers; instead each write of an answer
// has [AnswerStall] to be taken in ([BoundAnswers]), so a client that never reads its answer
// does not hold its connection for ever. A path with an empty, "." or ".." segment is answered 404 naming
// its plain form ([PlainPaths]), never redirected. Over HTTP/2 a connection has at
// most [MaxConcurrentStreams] requests in progress and [MaxReceiveBuffer] of unread body.
// net/http's own errors (failed accepts, TLS handshakes) are logged on log as structured
// records whose message is constant, so a flood of them folds. Serve it on a listener from [Listen] (or wrap one with
// [LimitListener]) to bound its connections too.
func New(cfg Config, h http.Handler, req Requests, log *slog.Logger) *http.Server {
	cfg = cfg.WithDefaults()
	if req.Publish != nil {
		h = LimitBodies(h, cfg.MaxPublishBodies, cfg.PublishWait, req.Publish)
	}
	srv := &http.Server{
		Handler:           BoundAnswers(PlainPaths(h)),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadHeaderTimeout + cfg.BodyTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams:          MaxConcurrentStreams,
			MaxReceiveBufferPerConnection: MaxReceiveBuffer,
		},
	}
	if log != nil {
		srv.ErrorLog = errorLog(log)
	}
	return srv
}

// Listen listens on the TCP address addr and keeps at most cfg.MaxConnections connections
// open ([LimitListener]), warning on log when the limit is reached.
func Listen(cfg Config, addr string, log *slog.Logger) (net.Listener, error) {
	cfg = cfg.WithDefaults()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return LimitListener(ln, cfg.MaxConnections, log), nil
}
