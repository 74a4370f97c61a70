package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/console"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/httpserver"
	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/logfold"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/secretfile"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/jetstream"
	"github.com/egridio/egrid/schemas/clip"
	"github.com/egridio/egrid/sinks/broker"
)

func serveCommand(e env) *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the event router: the HTTP data plane (publish) and admin plane on one address",
		Description: `Runs egrid standalone. Events are kept in the embedded store under --data-dir, so
acknowledged events survive restarts. Topics and event subscriptions come from --config (YAML)
and from the admin API. Settings are taken from flags, then EGRID_* environment variables, then
the config file, then defaults.

Example (local development, no keys or admin token needed):
   egrid serve --insecure-dev --data-dir ./data`,
		Flags: slices.Concat([]cli.Flag{
			&cli.StringFlag{Name: "listen", Usage: "address to listen on (env EGRID_LISTEN)", Value: defaultListen},
			&cli.StringFlag{Name: "data-dir", Usage: "directory of the embedded store (env EGRID_DATA_DIR)", Value: defaultDataDir},
			&cli.StringFlag{Name: "config", Usage: "YAML file with server settings, topics and event subscriptions"},
			&cli.StringFlag{Name: "admin-token", Usage: "bearer token the admin API requires (env EGRID_ADMIN_TOKEN)"},
			&cli.BoolFlag{Name: "insecure-dev", Usage: "accept publishes without credentials, and admin calls without a token when none is configured, and http:// and loopback webhook endpoints; only on a loopback --listen address (development only; env EGRID_INSECURE_DEV)"},
			&cli.Float64Flag{Name: "time-scale", Usage: "run every policy delay N times faster (retry schedule, probation, time to live); HTTP timeouts are not scaled (env EGRID_TIME_SCALE)", Value: 1},
			&cli.StringFlag{Name: "tls-cert", Usage: "TLS certificate file (PEM); serve HTTPS (env EGRID_TLS_CERT)"},
			&cli.StringFlag{Name: "tls-key", Usage: "TLS private key file (PEM) (env EGRID_TLS_KEY)"},
			&cli.StringFlag{Name: "public-url", Usage: "base URL webhook endpoints reach this server at, for the validationUrl of the validation handshake; default: the --listen address when it names a host and port, else the Host of each admin request (env EGRID_PUBLIC_URL)"},
		}, deadLetterFlags(), serverLimitFlags(), insecureDevFlags(), secretFileFlags(), storeFlags(), clusterFlags(), egressFlags(), apiVersionFlags(), answerBudgetFlags(), observeFlags()),
		Action: func(c *cli.Context) error { return serve(c, e) },
	}
}

func serve(c *cli.Context, e env) error {
	var file *fileConfig
	if path := c.String("config"); path != "" {
		var err error
		if file, err = loadConfigEnv(path, e.Getenv); err != nil {
			return cli.Exit(err.Error(), 2)
		}
		if err := file.validate(); err != nil {
			return cli.Exit(fmt.Sprintf("config %s:\n%v", path, err), 2)
		}
	}
	s, err := resolveSettings(c, e.Getenv, file)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	handler := s.Log.handler(e.Stderr)
	if s.LogFoldWindow > 0 {
		fold := logfold.New(handler, logfold.Options{Window: s.LogFoldWindow, Unfolded: logattr.IsUnfolded})
		defer fold.Flush()
		handler = fold
	}
	log := slog.New(handler)
	warnInsecureDev(log, s)
	tlsConfig, tlsKeyFile, err := loadTLS(s)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	var referenced []secretFile // by the config's ${file:PATH}
	if file != nil {
		referenced = file.secretFiles
	}
	warnReadableSecrets(log, slices.Concat(s.secretFiles, referenced, []secretFile{tlsKeyFile})...)

	counters := new(metrics.Set)
	var (
		st store.Store
		nc *nats.Conn
	)
	if s.Cluster.enabled() {
		var js *jetstream.Store
		if nc, js, err = openCluster(c.Context, s.Cluster, log, counters); err != nil {
			return cli.Exit(err.Error(), 1)
		}
		defer nc.Close() // after the store
		st = js
		log.Info("cluster mode", "node", s.Cluster.Options.NodeName, "nats", jetstream.RedactURLs(strings.Join(s.Cluster.URLs, ",")), "prefix", s.Cluster.Options.Prefix, "replicas", s.Cluster.Replicas)
	} else {
		ds, err := openStore(s, log, counters)
		if err != nil {
			return cli.Exit(storeOpenError("opening", s.DataDir, err, false).Error(), 1)
		}
		st = ds
	}
	if e.wrapStore != nil {
		st = e.wrapStore(st)
	}
	// abandoned: the router's shutdown did not finish within the grace (a store that stopped
	// answering holds it) and goes on in the background, still using the store; serve exits
	// without closing it, as after a crash: the store recovers at its next open (every
	// acknowledged append is in its synced log).
	abandoned := false
	defer func() {
		if !abandoned {
			_ = st.Close()
		}
	}()
	dls, err := deadLetterStore(c.Context, s.DeadLetters, log)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	var declared fileConfig
	if file != nil {
		declared = *file
	}
	brokers, err := broker.Open(declared.Server.Brokers, log)
	if err != nil {
		return cli.Exit(fmt.Sprintf("server.brokers: %v", err), 2)
	}
	defer brokers.Close() // after the router: its sources and subscriptions use them
	if s.egress, err = s.egressPolicy(); err != nil {
		return cli.Exit(err.Error(), 2)
	}
	// The web console shows recent attempts, which the router reports as they end.
	attempts := console.NewAttempts(0)
	r, err := router.New(s.routerConfig(), router.Deps{
		Store: st, Logger: log, DeadLetterStore: dls, Metrics: counters, Egress: s.egress,
		Publishers: brokers.Publishers(), Subscribers: brokers.Subscribers(),
		OnAttempt: attempts.Record, OnSubscriptionDeleted: attempts.Forget, NATS: nc,
	})
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	defer func() {
		if abandoned {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		if r.Close(ctx) != nil {
			abandoned = true
		}
	}()
	if file != nil {
		if err := applyDeclared(c.Context, r, file, log); err != nil {
			return cli.Exit(err.Error(), 2)
		}
		for i, src := range file.Sources {
			if err := r.AddSource(src); err != nil {
				return cli.Exit(fmt.Sprintf("sources[%d]: %v", i, err), 2)
			}
		}
	}
	err = listenAndServe(c.Context, s, tlsConfig, r, st, log, attempts)
	abandoned = errors.Is(err, errAbandoned)
	return err
}

// mainHandler is what --listen serves: the probes and /metrics (when metrics is not nil), the
// web console behind the admin API's guard (a panic answers 500, an over-long path 414:
// httpapi.Guard), and the API.
func mainHandler(r *router.Router, reg *prometheus.Registry, metrics http.Handler, api *httpapi.API, attempts *console.Attempts, log *slog.Logger) http.Handler {
	return opsMux(r, reg, metrics, withConsole(api, httpapi.Guard(console.New(r, attempts), log)))
}

// withConsole serves the web console under console.Prefix (and at /console) and the HTTP
// planes everywhere else.
func withConsole(api, con http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/console" || strings.HasPrefix(req.URL.Path, console.Prefix) {
			con.ServeHTTP(w, req)
			return
		}
		api.ServeHTTP(w, req)
	})
}

// mainServer is the server of --listen: h (which serves api) within limits; api's publishes
// and settle operations, the data plane's requests with bodies, admitted to
// limits.MaxPublishBodies once they are authenticated and about to read their bodies
// (httpapi.API.AdmitBodies), so requests without the topic key never hold a slot, even while
// their topic is looked up in the cluster's store; and api's :receive long polls admitted to
// limits.MaxReceivePolls once they are authenticated and about to wait
// (httpapi.API.AdmitPolls), together with the polls other cluster nodes route to r
// (router.Router.AdmitRoutedPolls). A :receive takes no publish slot: it has no body, and
// counting its wait of up to 120 s would let waiting consumers take every slot from
// publishers. The admin plane is not limited: it is authenticated, and an operator must reach
// it when publishers flood the server. Its Shutdown answers the polls in progress at once
// (with no events), so a consumer waiting up to 120 s does not hold a shutdown.
func mainServer(limits httpserver.Config, h http.Handler, api *httpapi.API, r *router.Router, log *slog.Logger) *http.Server {
	limits = limits.WithDefaults()
	api.AdmitBodies(httpserver.NewBodyLimit(limits.MaxPublishBodies, limits.PublishWait).Admit)
	polls := httpserver.NewPollLimit(limits.MaxReceivePolls)
	api.AdmitPolls(polls.Admit)
	r.AdmitRoutedPolls(polls.Take)
	srv := httpserver.New(limits, h, httpserver.Requests{}, log)
	srv.RegisterOnShutdown(api.EndPolls)
	return srv
}

// applyDeclared creates (or updates) the topics and subscriptions the config declares. A
// subscription stored with the same definition and validated is left as it is
// ([router.Router.EnsureSubscription]). One that exists but whose changed definition its
// endpoint did not validate (down, or refusing) keeps its previous definition, which keeps
// delivering: that is logged as an ERROR (log nil: reported as an error), and the start goes
// on, rather than stopping every topic for one endpoint. Any other problem is returned.
func applyDeclared(ctx context.Context, r *router.Router, file *fileConfig, log *slog.Logger) error {
	var errs []error
	for _, t := range file.Topics {
		if _, err := r.CreateTopic(ctx, t.Name, t.Properties); err != nil {
			errs = append(errs, fmt.Errorf("topic %q: %w", clip.String(t.Name), err))
			continue
		}
		for _, sd := range t.EventSubscriptions {
			_, existed := r.Subscription(t.Name, sd.Name)
			err := r.EnsureSubscription(ctx, t.Name, sd.Name, sd.Properties)
			if err != nil && existed == nil && log != nil && errors.Is(err, router.ErrValidationFailed) {
				log.Error("the declared event subscription's endpoint did not validate its changed definition: the stored definition stays and keeps delivering; make the endpoint answer the validation, then restart (or PUT the definition)",
					"topic", t.Name, "subscription", sd.Name, "err", err)
				continue
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("topic %q: %w", clip.String(t.Name), err))
			}
		}
	}
	return errors.Join(errs...)
}

// loadTLS reads the TLS certificate and private key of s (nil when serve speaks plain HTTP),
// and returns the file the key was read from. The key is a secret file, read as every secret
// is (secretfile.Read): its mode is judged on the file read, and a path naming a pipe, a
// directory or a large file is refused.
func loadTLS(s serveSettings) (*tls.Config, secretFile, error) {
	if s.TLSCert == "" {
		return nil, secretFile{}, nil
	}
	keyPEM, mode, err := secretfile.Read(s.TLSKey)
	if err != nil {
		return nil, secretFile{}, fmt.Errorf("--tls-key: %w", err)
	}
	certPEM, err := os.ReadFile(s.TLSCert)
	if err != nil {
		return nil, secretFile{}, fmt.Errorf("--tls-cert: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, secretFile{}, fmt.Errorf("--tls-cert %s and --tls-key %s: %w", s.TLSCert, s.TLSKey, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}}, secretFile{path: s.TLSKey, mode: mode}, nil
}

// listenAndServe serves the router's HTTP API on s.Listen, with TLS when tlsConfig is not nil,
// until ctx ends, and then shuts down in order.
func listenAndServe(ctx context.Context, s serveSettings, tlsConfig *tls.Config, r *router.Router, st store.Store, log *slog.Logger, attempts *console.Attempts) error {
	limits := s.HTTP.WithDefaults()
	ln, err := httpserver.Listen(limits, s.Listen, log)
	if err != nil {
		return cli.Exit(fmt.Sprintf("listening on %s: %v (use --listen to pick another address)", s.Listen, err), 1)
	}
	s.egress.DenySelf(ln.Addr().String()) // webhooks must not reach egrid's own API (egress.go)
	reg := metricsRegistry(r, st)
	var onMain http.Handler // /metrics on --listen: behind the admin token, unless --metrics-listen
	if s.MetricsListen == "" {
		onMain = guardMetrics(s, metricsHandler(reg, log))
	}
	api := httpapi.New(r)
	srv := mainServer(limits, mainHandler(r, reg, onMain, api, attempts, log), api, r, log)
	scheme := "http"
	srv.TLSConfig = tlsConfig
	errc := make(chan error, 2) // the main server and the metrics server
	go func() {
		if tlsConfig != nil {
			errc <- srv.ServeTLS(ln, "", "") // the certificate is tlsConfig's
			return
		}
		errc <- srv.Serve(ln)
	}()
	if tlsConfig != nil {
		scheme = "https"
	}
	var metricsSrv *http.Server
	if s.MetricsListen != "" {
		mln, err := httpserver.Listen(limits, s.MetricsListen, log)
		if err != nil {
			_ = srv.Close()
			return cli.Exit(fmt.Sprintf("listening on %s: %v (use --metrics-listen to pick another address)", s.MetricsListen, err), 1)
		}
		s.egress.DenySelf(mln.Addr().String()) // nor its metrics address
		metricsSrv = httpserver.New(limits, opsMux(r, reg, metricsHandler(reg, log), nil), httpserver.Requests{}, log)
		go func() { errc <- metricsSrv.Serve(mln) }()
		log.Info("serving metrics", "url", "http://"+mln.Addr().String()+MetricsPath)
	}
	where := slog.String("dataDir", s.DataDir)
	if s.Cluster.enabled() {
		where = slog.String("node", s.Cluster.Options.NodeName)
	}
	log.Info("egrid serving", "url", scheme+"://"+ln.Addr().String(), where, "insecureDev", s.InsecureDev, "timeScale", s.TimeScale)
	log.Info("http limits", "readHeaderTimeout", limits.ReadHeaderTimeout, "bodyTimeout", limits.BodyTimeout,
		"idleTimeout", limits.IdleTimeout, "maxHeaderBytes", limits.MaxHeaderBytes, "maxConnections", limits.MaxConnections,
		"maxPublishBodies", limits.MaxPublishBodies, "publishWait", limits.PublishWait, "maxReceivePolls", limits.MaxReceivePolls)
	select {
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: refusing new requests, finishing deliveries in progress")
	httpCtx, cancelHTTP := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancelHTTP()
	shutdownHTTP(httpCtx, srv, "", log)
	if metricsSrv != nil {
		shutdownHTTP(httpCtx, metricsSrv, "metrics ", log)
	}
	// The router gets a grace of its own: one that the HTTP shutdown used up waiting for a
	// slow client would leave the store unclosed, the actors' last state writes and the
	// dead-letter outbox unwritten, and blame the disk.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := r.Close(shutdownCtx); err != nil {
		log.Error("stopping without closing the store: the router's shutdown did not finish within the grace, held by a store write that does not return (a disk or NATS server that stopped answering?); "+
			"every acknowledged event is in the store's synced log and the next start goes on from it, as after a crash: check the disk (or NATS) before starting again",
			"grace", shutdownGrace, "err", err)
		return fmt.Errorf("%w: %w", errAbandoned, err)
	}
	if err := st.Close(); err != nil {
		return fmt.Errorf("closing the store: %w", err)
	}
	log.Info("stopped")
	return nil
}

// shutdownGrace bounds each of serve's two shutdown steps: the HTTP servers' (finishing the
// requests in progress), and then the router's (the actors' last state writes, the dead-letter
// outbox, the store), so a stop takes at most twice the grace.
var shutdownGrace = 30 * time.Second

// shutdownHTTP stops srv: it refuses new requests and waits, within ctx, for the ones in
// progress, then cuts the connections of those still running (a client sending its body
// slowly, a subscription create waiting for its endpoint's handshake), whose handlers see
// their requests' contexts end. A publish cut before its answer was not acknowledged to its
// publisher, which sends it again (it may have been stored: Event Grid's delivery is
// at-least-once). what names the server in the log ("" or "metrics ").
func shutdownHTTP(ctx context.Context, srv *http.Server, what string, log *slog.Logger) {
	err := srv.Shutdown(ctx)
	if err == nil {
		return
	}
	log.Warn("the "+what+"HTTP server's requests still in progress at the end of the shutdown grace were cut: their clients got no answer, and a publisher among them sends its events again",
		"grace", shutdownGrace, "err", err)
	if err := srv.Close(); err != nil {
		log.Warn("closing the "+what+"HTTP server's connections", "err", err)
	}
}

// errAbandoned: serve stopped without closing the store, whose shutdown did not finish within
// shutdownGrace.
var errAbandoned = errors.New("the shutdown did not finish: stopped without closing the store")

func validateCommand(e env) *cli.Command {
	return &cli.Command{
		Name:      "validate",
		Usage:     "check a config file and report every problem at once",
		ArgsUsage: " ",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "YAML config file", Required: true},
		},
		Action: func(c *cli.Context) error {
			path := c.String("config")
			file, err := loadConfigEnv(path, e.Getenv)
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			errs := []error{file.validate()}
			s, err := resolveSettings(c, func(string) string { return "" }, file)
			if err != nil {
				errs = append(errs, err)
			}
			// Build every declared resource on a throwaway in-memory router, exactly as serve does.
			// The egress policy is serve's, so host names are resolved and judged as serve would.
			pol, _ := s.egressPolicy() // invalid settings are reported above
			scale := file.Server.TimeScale
			if math.IsNaN(scale) || math.IsInf(scale, 0) || scale < 0 {
				scale = 0 // reported above; the declared resources are checked at real time
			}
			// The file's router settings are serve's, so a topic declaring more subscriptions
			// than server.maxSubscriptionsPerTopic fails here as it would at start.
			rc := file.Server.routerConfig()
			if rc.Validate() != nil {
				rc = router.Config{} // reported above
			}
			rc.TimeScale, rc.RequireHTTPS = scale, s.routerConfig().RequireHTTPS
			rc.SkipEndpointValidation = true // validate never calls endpoints
			r, err := router.New(rc,
				router.Deps{DeadLetterStore: acceptingStore{}, Publishers: offlineBrokers(file.Server.Brokers), Egress: pol})
			if err != nil {
				errs = append(errs, err)
			} else {
				errs = append(errs, applyDeclared(c.Context, r, file, nil))
				_ = r.Close(context.Background())
			}
			// The secret files serve would warn of, on stderr: a validate in CI is where a mode
			// is cheapest to fix.
			warnReadableSecrets(slog.New(slog.NewTextHandler(e.Stderr, &slog.HandlerOptions{ReplaceAttr: dropTime})),
				slices.Concat(file.secretFiles, s.secretFiles)...)
			if err := distinctErrors(errs...); err != nil {
				return cli.Exit(fmt.Sprintf("config %s is invalid:\n%v", path, err), 2)
			}
			fmt.Fprintf(e.Stdout, "config %s is valid: %d topics\n", path, len(file.Topics))
			return nil
		},
	}
}

// distinctErrors joins errs (errors.Join), each problem once: the config file's checks and
// the settings' resolution both judge the settings a file sets.
func distinctErrors(errs ...error) error {
	var out []error
	seen := map[string]bool{}
	var add func(err error)
	add = func(err error) {
		if err == nil {
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok && isJoin(err, j.Unwrap()) {
			for _, e := range j.Unwrap() {
				add(e)
			}
			return
		}
		if msg := err.Error(); !seen[msg] {
			seen[msg] = true
			out = append(out, err)
		}
	}
	for _, err := range errs {
		add(err)
	}
	return errors.Join(out...)
}

// isJoin reports whether err, wrapping errs, says only what they say, a line each: an
// errors.Join, not an error that adds words around several wrapped ones.
func isJoin(err error, errs []error) bool {
	var lines []string
	for _, e := range errs {
		if e != nil {
			lines = append(lines, e.Error())
		}
	}
	return err.Error() == strings.Join(lines, "\n")
}

// dropTime leaves the time out of a log line: validate's warnings are read at once.
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// offlineBrokers returns publishers for the configured brokers that never connect, so
// `egrid validate` builds broker subscriptions exactly as serve would without touching a
// broker. Invalid settings give none (validate reports them already).
func offlineBrokers(s broker.Servers) map[broker.Kind]message.Publisher {
	b, err := broker.Open(s, nil)
	if err != nil {
		return nil
	}
	_ = b.Close() // nothing was dialled; the closed publishers refuse to
	return b.Publishers()
}
