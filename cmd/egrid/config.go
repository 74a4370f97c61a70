package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpserver"
	"github.com/egridio/egrid/schemas/clip"
	"github.com/egridio/egrid/sinks/broker"
	"github.com/egridio/egrid/sinks/egress"
)

// fileConfig is the YAML config of `egrid serve --config` (and `egrid validate`):
//
//	server:
//	  listen: 127.0.0.1:8080
//	  dataDir: ./data
//	  adminToken: change-me      # or adminTokenFile: /run/secrets/egrid-admin, or ${EGRID_ADMIN_TOKEN}
//	  timeScale: 1
//	  tlsCert: cert.pem
//	  tlsKey: key.pem
//	  publicUrl: https://egrid.example.com   # where endpoints GET their validationUrl
//	  minio: {endpoint: 127.0.0.1:9000, accessKey: ..., secretKey: ..., secure: false, readTimeout: 1m}
//	  deadLetterDelay: 5m
//	  minFreeDisk: 256MiB     # below it publishes get 507 (default 256MiB or 1% of the volume, at least 16MiB)
//	  secretKeyFile: /etc/egrid/secret.key   # encrypts topic/subscription definitions at rest
//	  logSync: io_uring       # or fdatasync: how the store syncs its write-ahead log
//	  allowHttpEndpoints: false  # http:// webhooks need it, or --insecure-dev (Azure: https only)
//	  anyApiVersion: false       # any data-plane api-version (--any-api-version; Azure: refused)
//	  maxReceiveAnswerBytes: 256MiB  # :receive answers held in memory at once (--max-receive-answer-bytes)
//	  egress: {allow: [10.20.0.0/16], deny: []}  # where webhooks may point (egress.go)
//	  brokers:                 # for broker destinations (endpointType NatsJetStream, ...) and sources
//	    nats: {url: nats://127.0.0.1:4222}
//	    rabbitmq: {url: amqp://guest:guest@127.0.0.1:5672/}
//	    redis: {addr: 127.0.0.1:6379}
//	    postgres: {dsn: "postgres://postgres@127.0.0.1:5432/egrid?sslmode=disable"}
//	topics:
//	  - name: orders
//	    properties: {inputSchema: EventGridSchema, key1: ..., key2: ...}
//	    eventSubscriptions:
//	      - name: billing
//	        properties:            # Event Grid's ARM properties, copied as they are
//	          destination: {endpointType: WebHook, properties: {endpointUrl: https://...}}
//	          retryPolicy: {maxDeliveryAttempts: 10, eventTimeToLiveInMinutes: 60}
//	          # deliveryAttributeMappings (under destination.properties), labels,
//	          # expirationTimeUtc: the same ARM names. `egrid validate` builds everything without
//	          # calling endpoints (no validation handshake).
//	      - name: audit
//	        properties:
//	          destination: {endpointType: NatsJetStream, properties: {subject: audit.orders}}
//	sources:                       # topics fed from brokers
//	  - {name: orders-in, broker: NatsJetStream, from: orders.in, topic: orders, poisonQueue: orders.poison}
type fileConfig struct {
	Server serverConfig `yaml:"server"`
	Topics []topicDecl  `yaml:"topics"`
	// Sources feed topics from brokers (router.SourceSpec); they start after the topics.
	Sources []router.SourceSpec `yaml:"sources"`
	// secretFiles are the files its ${file:PATH} references were read from (decodeConfig).
	secretFiles []secretFile
	// zeros are the event subscription settings the file writes as 0 (explicitZeros), which
	// validate reports.
	zeros []error
}

type serverConfig struct {
	Listen      string  `yaml:"listen"`
	DataDir     string  `yaml:"dataDir"`
	AdminToken  string  `yaml:"adminToken"`
	InsecureDev bool    `yaml:"insecureDev"`
	TimeScale   float64 `yaml:"timeScale"`
	TLSCert     string  `yaml:"tlsCert"`
	TLSKey      string  `yaml:"tlsKey"`
	MaxInFlight int     `yaml:"maxInFlight"`
	// MaxSubscriptionsPerTopic bounds a topic's subscriptions (default 500).
	MaxSubscriptionsPerTopic int `yaml:"maxSubscriptionsPerTopic"`
	// PublicURL is the base URL webhook endpoints reach this server at (router.Config.PublicURL).
	PublicURL string `yaml:"publicUrl"`
	// MinIO is where dead letters are written; DeadLetterDelay how long they wait first.
	MinIO           minioFileConfig `yaml:"minio"`
	DeadLetterDelay time.Duration   `yaml:"deadLetterDelay"`
	// Brokers are the connection settings of broker destinations and sources.
	Brokers broker.Servers `yaml:"brokers"`
	// AdminTokenFile is a file holding the admin token, instead of AdminToken.
	AdminTokenFile string `yaml:"adminTokenFile"`
	// HTTP bounds what HTTP clients can hold: server.readHeaderTimeout, bodyTimeout,
	// idleTimeout, maxHeaderBytes, maxConnections, maxPublishBodies, publishWait,
	// maxReceivePolls.
	HTTP httpserver.Config `yaml:",inline"`
	// InsecureDevAnyAddress allows insecureDev with a listen address that is not loopback.
	InsecureDevAnyAddress bool `yaml:"insecureDevAnyAddress"`
	// LogFoldWindow folds a repeated log message within the window into one line (default
	// 1s; 0 turns folding off).
	LogFoldWindow *time.Duration `yaml:"logFoldWindow"`
	// HonorRetryAfter turns on the Retry-After extension for every subscription
	// (router.Config.HonorRetryAfter).
	HonorRetryAfter bool `yaml:"honorRetryAfter"`
	// AzureSubscriptionID and ResourceGroup shape topic IDs like the user's Azure ones
	// (router.Config.AzureSubscriptionID, router.Config.ResourceGroup).
	AzureSubscriptionID string `yaml:"azureSubscriptionId"`
	ResourceGroup       string `yaml:"resourceGroup"`
	// OmitConvertedDataSchema is router.Config.OmitConvertedDataSchema (an extension).
	OmitConvertedDataSchema bool `yaml:"omitConvertedDataSchema"`
	// AnyAPIVersion is --any-api-version: router.Config.AnyAPIVersion (an extension).
	AnyAPIVersion bool `yaml:"anyApiVersion"`
	// MaxReceiveAnswerBytes bounds the pull delivery answers held at once
	// (--max-receive-answer-bytes; answerbudget.go): bytes with an optional unit.
	MaxReceiveAnswerBytes string `yaml:"maxReceiveAnswerBytes"`
	// MinFreeDisk is the store's free-space floor (--min-free-disk; storeflags.go).
	MinFreeDisk string `yaml:"minFreeDisk"`
	// SecretKeyFile encrypts definitions at rest (--secret-key-file; storeflags.go).
	SecretKeyFile string `yaml:"secretKeyFile"`
	// LogSync is how the store syncs its write-ahead log (--log-sync; storeflags.go).
	LogSync string `yaml:"logSync"`
	// Egress is where webhooks may point, AllowHTTPEndpoints whether http:// is accepted
	// (egress.go).
	Egress             egressFileConfig `yaml:"egress"`
	AllowHTTPEndpoints bool             `yaml:"allowHttpEndpoints"`
	// History is router.Config.History: how many attempts an event's delivery history keeps
	// (attempts, default 10) and for how long after its latest step (retention, default 24h).
	History router.HistoryConfig `yaml:"history"`
	// LogLevel and LogFormat are --log-level (debug, info, warn, error) and --log-format
	// (text, json).
	LogLevel  string `yaml:"logLevel"`
	LogFormat string `yaml:"logFormat"`
	// MetricsListen is --metrics-listen: a separate address serving /metrics without
	// credentials.
	MetricsListen string `yaml:"metricsListen"`
	// Cluster runs the server as one node of a cluster on NATS JetStream (clusterflags.go).
	Cluster clusterFileConfig `yaml:"cluster"`
}

type topicDecl struct {
	Name               string             `yaml:"name"`
	Properties         router.TopicSpec   `yaml:"properties"`
	EventSubscriptions []subscriptionDecl `yaml:"eventSubscriptions"`
}

type subscriptionDecl struct {
	Name       string                  `yaml:"name"`
	Properties router.SubscriptionSpec `yaml:"properties"`
}

// Defaults of the server settings.
const (
	defaultListen  = "127.0.0.1:8080"
	defaultDataDir = "./data"
)

// loadConfig reads and strictly decodes a YAML config file (unknown keys are errors),
// expanding its ${NAME} references from the process environment (see decodeConfig).
func loadConfig(path string) (*fileConfig, error) { return loadConfigEnv(path, os.Getenv) }

// maxConfigFile bounds a config file: 64 MiB declares some 200 000 event subscriptions, and
// a path that names something else (/dev/zero, a data file) is an error rather than read into
// memory whole.
const maxConfigFile = 64 << 20

// loadConfigEnv is loadConfig with the environment as getenv.
func loadConfigEnv(path string, getenv func(string) string) (*fileConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxConfigFile+1))
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	if len(raw) > maxConfigFile {
		return nil, fmt.Errorf("config %s is over 64 MiB: check that --config names the YAML config file", path)
	}
	cfg, err := decodeConfig(raw, getenv)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	cfg.zeros = explicitZeros(raw, cfg)
	return cfg, nil
}

// checkTimeScale checks the time scale given as setting (a flag, a variable or a config key):
// a finite number >= 1. NaN and ±Inf parse as numbers, but the retry policy refuses them, so a
// server started with one would mark every stored subscription Failed while publishes still
// answered 200.
func checkTimeScale(setting string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 1 {
		return fmt.Errorf("%s %v: use a finite number >= 1, such as 600 (1 is real time)", setting, v)
	}
	return nil
}

// validate reports every problem of the declared resources at once, by building them on a
// throwaway in-memory router exactly as serve would.
func (c *fileConfig) validate() error {
	errs := slices.Clone(c.zeros)
	if ts := c.Server.TimeScale; ts != 0 { // 0: not set
		errs = append(errs, checkTimeScale("server.timeScale", ts))
	}
	if (c.Server.TLSCert == "") != (c.Server.TLSKey == "") {
		errs = append(errs, errors.New("server.tlsCert and server.tlsKey: set both or neither"))
	}
	for _, err := range joined(c.Server.routerConfig().Validate()) { // one line, one problem each
		errs = append(errs, fmt.Errorf("server.%w", err))
	}
	if err := (egress.Config{Allow: c.Server.Egress.Allow, Deny: c.Server.Egress.Deny}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("server.%w", err))
	}
	errs = append(errs, c.validateBrokers())
	for _, err := range joined(c.Server.HTTP.Validate()) { // one line, one problem each
		errs = append(errs, fmt.Errorf("server.%w", err))
	}
	// Names ignore case, as in Event Grid: "orders" and "Orders" are one topic, and applying
	// both would let the second replace the first's keys and definitions.
	seen := map[string]bool{}
	for i, t := range c.Topics {
		if seen[strings.ToLower(t.Name)] {
			errs = append(errs, fmt.Errorf("topics[%d]: topic %q is declared twice (names ignore case)", i, clip.String(t.Name)))
		}
		seen[strings.ToLower(t.Name)] = true
		subs := map[string]bool{}
		for j, s := range t.EventSubscriptions {
			if subs[strings.ToLower(s.Name)] {
				errs = append(errs, fmt.Errorf("topics[%d].eventSubscriptions[%d]: %q is declared twice (names ignore case)", i, j, clip.String(s.Name)))
			}
			subs[strings.ToLower(s.Name)] = true
		}
	}
	return errors.Join(errs...)
}

// routerConfig is the part of router.Config that only the config file sets, which validate
// checks with router.Config.Validate: the checks router.New makes when serve starts, made
// before it starts (and by `egrid validate`), naming each value by its config key. The file's
// settings that a flag or variable can also give (timeScale, deadLetterDelay, publicUrl's
// fallback, cluster) are checked where they are resolved.
func (c serverConfig) routerConfig() router.Config {
	return router.Config{
		PublicURL:           c.PublicURL,
		AzureSubscriptionID: c.AzureSubscriptionID, ResourceGroup: c.ResourceGroup,
		MaxInFlight: c.MaxInFlight, MaxSubscriptionsPerTopic: c.MaxSubscriptionsPerTopic,
		History: c.History,
	}
}

// serveSettings are the resolved server settings: flag > environment > file > default, decided
// in one place (resolveSettings).
type serveSettings struct {
	Listen, DataDir, AdminToken, TLSCert, TLSKey string
	PublicURL                                    string
	InsecureDev                                  bool
	TimeScale                                    float64
	MaxInFlight, MaxSubscriptionsPerTopic        int
	DeadLetters                                  deadLetterSettings
	// HTTP bounds what HTTP clients can hold (zero fields: httpserver's defaults).
	HTTP httpserver.Config
	// LogFoldWindow is the window of logfold (0: no folding).
	LogFoldWindow time.Duration
	// InsecureDevAnyAddress allows InsecureDev with a listen address that is not loopback.
	InsecureDevAnyAddress bool
	// HonorRetryAfter, OmitConvertedDataSchema, AzureSubscriptionID and ResourceGroup are the
	// router.Config fields of the same names.
	HonorRetryAfter, OmitConvertedDataSchema bool
	AzureSubscriptionID, ResourceGroup       string
	Store                                    storeSettings
	// AnyAPIVersion is router.Config.AnyAPIVersion (--any-api-version).
	AnyAPIVersion bool
	// MaxReceiveAnswerBytes is router.Config.MaxReceiveAnswerBytes (--max-receive-answer-bytes).
	MaxReceiveAnswerBytes int64
	// Egress is where webhooks may point; egress is the policy serve builds from it, to which
	// the listener adds its address (egress.go).
	Egress egressSettings
	egress *egress.Policy
	// History is router.Config.History.
	History router.HistoryConfig
	// Log is the log level and format.
	Log logSettings
	// MetricsListen is the separate address of /metrics ("": /metrics on Listen, guarded).
	MetricsListen string
	// Cluster is cluster mode's settings (off unless its URLs are set).
	Cluster clusterSettings
	// secretFiles are the files the admin token and the MinIO secret key were read from.
	secretFiles []secretFile
}

// resolveSettings merges flags, EGRID_* environment variables, the config file and defaults.
func resolveSettings(c *cli.Context, getenv func(string) string, file *fileConfig) (serveSettings, error) {
	var fs serverConfig
	if file != nil {
		fs = file.Server
	}
	var errs []error
	// setting names the one of flag, envName and fileKey a value str took was given by.
	setting := func(flag, envName, fileKey string) string {
		switch {
		case c.IsSet(flag):
			return "--" + flag
		case getenv(envName) != "":
			return envName
		}
		return fileKey
	}
	str := func(flag, envName, fileVal, def string) string {
		switch {
		case c.IsSet(flag):
			return c.String(flag)
		case getenv(envName) != "":
			return getenv(envName)
		case fileVal != "":
			return fileVal
		}
		return def
	}
	s := serveSettings{
		Listen:    str("listen", "EGRID_LISTEN", fs.Listen, defaultListen),
		DataDir:   str("data-dir", "EGRID_DATA_DIR", fs.DataDir, defaultDataDir),
		TLSCert:   str("tls-cert", "EGRID_TLS_CERT", fs.TLSCert, ""),
		TLSKey:    str("tls-key", "EGRID_TLS_KEY", fs.TLSKey, ""),
		PublicURL: str("public-url", "EGRID_PUBLIC_URL", fs.PublicURL, ""),

		MetricsListen: str("metrics-listen", "EGRID_METRICS_LISTEN", fs.MetricsListen, ""),
	}
	logs, logErrs := resolveLogging(c, getenv, fs)
	s.Log, errs = logs, append(errs, logErrs...)
	if s.PublicURL == "" {
		s.PublicURL = listenURL(s.Listen, s.TLSCert != "")
	} else {
		errs = append(errs, router.CheckPublicURL(setting("public-url", "EGRID_PUBLIC_URL", "server.publicUrl"), s.PublicURL))
	}
	token, tokenFile, err := resolveSecret(c, getenv, secretSource{
		flag: "admin-token", fileFlag: "admin-token-file", env: "EGRID_ADMIN_TOKEN", fileEnv: "EGRID_ADMIN_TOKEN_FILE",
		key: "server.adminToken", fileKey: "server.adminTokenFile", fileVal: fs.AdminToken, filePath: fs.AdminTokenFile,
	})
	s.AdminToken, errs = token, append(errs, err)
	s.secretFiles = append(s.secretFiles, tokenFile)
	switch {
	case c.IsSet("insecure-dev"):
		s.InsecureDev = c.Bool("insecure-dev")
	case getenv("EGRID_INSECURE_DEV") != "":
		v, err := strconv.ParseBool(getenv("EGRID_INSECURE_DEV"))
		if err != nil {
			errs = append(errs, fmt.Errorf("EGRID_INSECURE_DEV=%q: use true or false", clip.String(getenv("EGRID_INSECURE_DEV"))))
		}
		s.InsecureDev = v
	default:
		s.InsecureDev = fs.InsecureDev
	}
	switch {
	case c.IsSet("time-scale"):
		s.TimeScale = c.Float64("time-scale")
		errs = append(errs, checkTimeScale("--time-scale", s.TimeScale))
	case getenv("EGRID_TIME_SCALE") != "":
		v, err := strconv.ParseFloat(getenv("EGRID_TIME_SCALE"), 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("EGRID_TIME_SCALE=%q: use a number such as 600", clip.String(getenv("EGRID_TIME_SCALE"))))
		} else {
			errs = append(errs, checkTimeScale("EGRID_TIME_SCALE", v))
		}
		s.TimeScale = v
	case fs.TimeScale != 0:
		s.TimeScale = fs.TimeScale
		errs = append(errs, checkTimeScale("server.timeScale", s.TimeScale))
	default:
		s.TimeScale = 1
	}
	if (s.TLSCert == "") != (s.TLSKey == "") {
		errs = append(errs, errors.New("--tls-cert and --tls-key: set both or neither"))
	}
	s.MaxInFlight, s.MaxSubscriptionsPerTopic = fs.MaxInFlight, fs.MaxSubscriptionsPerTopic
	s.HonorRetryAfter, s.OmitConvertedDataSchema = fs.HonorRetryAfter, fs.OmitConvertedDataSchema
	s.AzureSubscriptionID, s.ResourceGroup = fs.AzureSubscriptionID, fs.ResourceGroup
	s.History = fs.History
	dl, dlErrs := resolveDeadLetters(c, getenv, fs)
	s.DeadLetters, errs = dl, append(errs, dlErrs...)
	s.secretFiles = append(s.secretFiles, dl.secretKeyFile)
	httpCfg, fold, limitErrs := resolveServerLimits(c, getenv, fs)
	s.HTTP, s.LogFoldWindow, errs = httpCfg, fold, append(errs, limitErrs...)
	anyVersion, err := resolveAnyAPIVersion(c, getenv, fs)
	s.AnyAPIVersion, errs = anyVersion, append(errs, err)
	answers, err := resolveAnswerBudget(c, getenv, fs)
	s.MaxReceiveAnswerBytes, errs = answers, append(errs, err)
	anyAddr, err := resolveInsecureDevAnyAddress(c, getenv, fs)
	s.InsecureDevAnyAddress = anyAddr
	errs = append(errs, err, checkInsecureDev(s))
	st, stErr := resolveStore(c, getenv, fs)
	s.Store, errs = st, append(errs, stErr)
	cl, clErrs := resolveCluster(c, getenv, fs)
	s.Cluster, errs = cl, append(errs, clErrs...)
	if stErr == nil && !s.Cluster.enabled() {
		// The floor against the data directory's volume (its nearest existing parent before
		// the first start), so a floor no volume can hold is refused with the other settings.
		_, err := s.Store.minFreeBytes(s.DataDir)
		errs = append(errs, err)
	}
	eg, egErrs := resolveEgress(c, getenv, fs, s.InsecureDev)
	s.Egress, errs = eg, append(errs, egErrs...)
	return s, errors.Join(errs...)
}

func (s serveSettings) routerConfig() router.Config {
	return router.Config{
		InsecureDev: s.InsecureDev, AdminToken: s.AdminToken, TimeScale: s.TimeScale, PublicURL: s.PublicURL,
		MaxInFlight: s.MaxInFlight, MaxSubscriptionsPerTopic: s.MaxSubscriptionsPerTopic,
		DeadLetters:         router.DeadLetterConfig{Delay: s.DeadLetters.Delay},
		HonorRetryAfter:     s.HonorRetryAfter,
		AzureSubscriptionID: s.AzureSubscriptionID, ResourceGroup: s.ResourceGroup,
		OmitConvertedDataSchema: s.OmitConvertedDataSchema,
		AnyAPIVersion:           s.AnyAPIVersion,
		MaxReceiveAnswerBytes:   s.MaxReceiveAnswerBytes,
		RequireHTTPS:            !s.InsecureDev && !s.Egress.AllowHTTPEndpoints,
		History:                 s.History,
		Cluster:                 s.Cluster.Options,
	}
}

// listenURL is the URL of a listen address when it names a host and a port ("" for
// ":8080", "0.0.0.0:8080" or port 0): the default public URL, which validationUrls point at.
func listenURL(listen string, tls bool) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil || host == "" || port == "" || port == "0" {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return ""
	}
	scheme := "http"
	if tls {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// validateBrokers checks the broker settings and the sources, every problem at once: a source
// must name a broker with settings (GoChannel needs none) and a unique name.
func (c *fileConfig) validateBrokers() error {
	var errs []error
	if err := c.Server.Brokers.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("server.brokers: %w", err))
	}
	b := c.Server.Brokers
	configured := map[broker.Kind]bool{
		broker.NATSJetStream: b.NATS != nil, broker.RabbitMQ: b.RabbitMQ != nil,
		broker.RedisStream: b.Redis != nil, broker.PostgreSQL: b.Postgres != nil, broker.GoChannel: true,
	}
	names := map[string]bool{}
	for i, src := range c.Sources {
		if err := src.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("sources[%d]: %w", i, err))
		}
		if names[src.Name] {
			errs = append(errs, fmt.Errorf("sources[%d]: source %q is declared twice", i, clip.String(src.Name)))
		}
		names[src.Name] = true
		if k, ok := broker.ParseKind(src.Broker); ok && !configured[k] {
			errs = append(errs, fmt.Errorf("sources[%d]: broker %s has no settings: add server.brokers.%s", i, k, k.Setting()))
		}
	}
	return errors.Join(errs...)
}
