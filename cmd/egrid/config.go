package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"

	"github.com/egridio/egrid/router"
)

// fileConfig is the YAML config of `egrid serve --config` (and `egrid validate`):
//
//	server:
//	  listen: 127.0.0.1:8080
//	  dataDir: ./data
//	  adminToken: change-me
//	  timeScale: 1
//	  tlsCert: cert.pem
//	  tlsKey: key.pem
//	topics:
//	  - name: orders
//	    properties: {inputSchema: EventGridSchema, key1: ..., key2: ...}
//	    eventSubscriptions:
//	      - name: billing
//	        properties:            # Event Grid's ARM properties, copied as they are
//	          destination: {endpointType: WebHook, properties: {endpointUrl: https://...}}
//	          retryPolicy: {maxDeliveryAttempts: 10, eventTimeToLiveInMinutes: 60}
type fileConfig struct {
	Server serverConfig `yaml:"server"`
	Topics []topicDecl  `yaml:"topics"`
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

// loadConfig reads and strictly decodes a YAML config file (unknown keys are errors).
func loadConfig(path string) (*fileConfig, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	var cfg fileConfig
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return &cfg, nil
}

// validate reports every problem of the declared resources at once, by building them on a
// throwaway in-memory router exactly as serve would.
func (c *fileConfig) validate() error {
	var errs []error
	if c.Server.TimeScale < 0 {
		errs = append(errs, fmt.Errorf("server.timeScale %v: use a number >= 1", c.Server.TimeScale))
	}
	if (c.Server.TLSCert == "") != (c.Server.TLSKey == "") {
		errs = append(errs, errors.New("server.tlsCert and server.tlsKey: set both or neither"))
	}
	seen := map[string]bool{}
	for i, t := range c.Topics {
		if seen[t.Name] {
			errs = append(errs, fmt.Errorf("topics[%d]: topic %q is declared twice", i, t.Name))
		}
		seen[t.Name] = true
		subs := map[string]bool{}
		for j, s := range t.EventSubscriptions {
			if subs[s.Name] {
				errs = append(errs, fmt.Errorf("topics[%d].eventSubscriptions[%d]: %q is declared twice", i, j, s.Name))
			}
			subs[s.Name] = true
		}
	}
	return errors.Join(errs...)
}

// serveSettings are the resolved server settings: flag > environment > file > default, decided
// in one place (resolveSettings).
type serveSettings struct {
	Listen, DataDir, AdminToken, TLSCert, TLSKey string
	InsecureDev                                  bool
	TimeScale                                    float64
	MaxInFlight, MaxSubscriptionsPerTopic        int
}

// resolveSettings merges flags, EGRID_* environment variables, the config file and defaults.
func resolveSettings(c *cli.Context, getenv func(string) string, file *fileConfig) (serveSettings, error) {
	var fs serverConfig
	if file != nil {
		fs = file.Server
	}
	var errs []error
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
		Listen:     str("listen", "EGRID_LISTEN", fs.Listen, defaultListen),
		DataDir:    str("data-dir", "EGRID_DATA_DIR", fs.DataDir, defaultDataDir),
		AdminToken: str("admin-token", "EGRID_ADMIN_TOKEN", fs.AdminToken, ""),
		TLSCert:    str("tls-cert", "EGRID_TLS_CERT", fs.TLSCert, ""),
		TLSKey:     str("tls-key", "EGRID_TLS_KEY", fs.TLSKey, ""),
	}
	switch {
	case c.IsSet("insecure-dev"):
		s.InsecureDev = c.Bool("insecure-dev")
	case getenv("EGRID_INSECURE_DEV") != "":
		v, err := strconv.ParseBool(getenv("EGRID_INSECURE_DEV"))
		if err != nil {
			errs = append(errs, fmt.Errorf("EGRID_INSECURE_DEV=%q: use true or false", getenv("EGRID_INSECURE_DEV")))
		}
		s.InsecureDev = v
	default:
		s.InsecureDev = fs.InsecureDev
	}
	switch {
	case c.IsSet("time-scale"):
		s.TimeScale = c.Float64("time-scale")
	case getenv("EGRID_TIME_SCALE") != "":
		v, err := strconv.ParseFloat(getenv("EGRID_TIME_SCALE"), 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("EGRID_TIME_SCALE=%q: use a number such as 600", getenv("EGRID_TIME_SCALE")))
		}
		s.TimeScale = v
	case fs.TimeScale != 0:
		s.TimeScale = fs.TimeScale
	default:
		s.TimeScale = 1
	}
	if s.TimeScale < 1 {
		errs = append(errs, fmt.Errorf("time scale %v: use a number >= 1 (1 is real time)", s.TimeScale))
	}
	if (s.TLSCert == "") != (s.TLSKey == "") {
		errs = append(errs, errors.New("--tls-cert and --tls-key: set both or neither"))
	}
	s.MaxInFlight, s.MaxSubscriptionsPerTopic = fs.MaxInFlight, fs.MaxSubscriptionsPerTopic
	return s, errors.Join(errs...)
}

func (s serveSettings) routerConfig() router.Config {
	return router.Config{
		InsecureDev: s.InsecureDev, AdminToken: s.AdminToken, TimeScale: s.TimeScale,
		MaxInFlight: s.MaxInFlight, MaxSubscriptionsPerTopic: s.MaxSubscriptionsPerTopic,
	}
}
