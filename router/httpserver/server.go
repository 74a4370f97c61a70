package httpserver

import (
	"log/slog"
	"net"
	"net/http"
)

// New returns an http.Server serving h with cfg's timeouts and header limit, and the requests
// isPublish selects limited to cfg.MaxPublishBodies at once ([LimitBodies]). A request must
// be read whole within ReadHeaderTimeout + BodyTimeout of its first byte
// (http.Server.ReadTimeout); net/http clears that deadline once the body has been read, so a
// handler that then waits (a publish waiting for its fsync) keeps its context. There is no
// WriteTimeout, on purpose: a pull delivery :receive reads its (empty) body at once and then
// long-polls for up to 120 s (maxWaitTime) before it answers. net/http's own
// errors (failed accepts, TLS handshakes) are logged on log as structured records whose
// message is constant, so a flood of them folds. Serve it on a listener from
// [Listen] (or wrap one with [LimitListener]) to bound its connections too.
func New(cfg Config, h http.Handler, isPublish func(*http.Request) bool, log *slog.Logger) *http.Server {
	cfg = cfg.WithDefaults()
	h = LimitBodies(h, cfg.MaxPublishBodies, cfg.PublishWait, isPublish)
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadHeaderTimeout + cfg.BodyTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
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
