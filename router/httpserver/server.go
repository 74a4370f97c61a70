package httpserver

import (
	"log/slog"
	"net"
	"net/http"
)

// Requests says which requests the per-request limits of [New] apply to. A nil field selects
// none. The long polls are not among them: their handler takes their slots ([PollLimit]) once
// they are authenticated and about to wait.
type Requests struct {
	// Publish selects the requests with bodies that [Config.MaxPublishBodies] bounds.
	Publish func(*http.Request) bool
}

// MaxConcurrentStreams bounds the requests a client may have in progress at once on one
// HTTP/2 connection (TLS serves HTTP/2 by default). net/http's default is 250, so 4 096
// connections could carry a million requests in progress. 100 is the smallest value RFC 9113 §6.5.2
// recommends; a client that needs more opens another connection, which
// [Config.MaxConnections] counts. The long polls among those requests are bounded across all
// connections by [Config.MaxReceivePolls] ([PollLimit]).
const MaxConcurrentStreams = 100

// New returns an http.Server serving h with cfg's timeouts and header limit, and the requests
// req.Publish selects limited to cfg.MaxPublishBodies at once ([LimitBodies]). The long polls
// are h's to bound, with a [PollLimit] of cfg.MaxReceivePolls. A request must be read whole
// within ReadHeaderTimeout + BodyTimeout of its first byte (http.Server.ReadTimeout); net/http
// clears that deadline once the body has been read, so a handler that then waits (a publish
// waiting for its fsync) keeps its context. There is no
// WriteTimeout, on purpose: a pull delivery :receive reads its (empty) body at once and then
// long-polls for up to 120 s (maxWaitTime) before it answers; instead each write of an answer
// has [AnswerStall] to be taken in ([BoundAnswers]), so a client that never reads its answer
// does not hold its connection for ever. Over HTTP/2 a connection has at
// most [MaxConcurrentStreams] requests in progress. net/http's own errors (failed accepts,
// TLS handshakes) are logged on log as structured records whose message is constant, so a
// flood of them folds. Serve it on a listener from [Listen] (or wrap one with
// [LimitListener]) to bound its connections too.
func New(cfg Config, h http.Handler, req Requests, log *slog.Logger) *http.Server {
	cfg = cfg.WithDefaults()
	if req.Publish != nil {
		h = LimitBodies(h, cfg.MaxPublishBodies, cfg.PublishWait, req.Publish)
	}
	srv := &http.Server{
		Handler:           BoundAnswers(h),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadHeaderTimeout + cfg.BodyTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: MaxConcurrentStreams},
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
