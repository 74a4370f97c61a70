package httpserver

import (
	"errors"
	"fmt"
	"time"
)

// Config bounds what a client can hold. Zero values take the defaults below
// ([Config.WithDefaults]); the YAML names are the `server.*` keys of `egrid serve --config`.
type Config struct {
	// ReadHeaderTimeout bounds the time to read a request's headers, counted from the first
	// byte of a request (from the accept for the first request and the TLS handshake).
	// Default [DefaultReadHeaderTimeout].
	ReadHeaderTimeout time.Duration `yaml:"readHeaderTimeout" json:"readHeaderTimeout,omitempty"`
	// BodyTimeout bounds the time to read a request's body, on top of ReadHeaderTimeout: the
	// whole request must be in within their sum of its first byte. With the defaults a publish
	// of 1 MB must come at 35 KB/s or faster. Default [DefaultBodyTimeout].
	BodyTimeout time.Duration `yaml:"bodyTimeout" json:"bodyTimeout,omitempty"`
	// IdleTimeout is how long a kept-alive connection may wait for its next request.
	// Default [DefaultIdleTimeout].
	IdleTimeout time.Duration `yaml:"idleTimeout" json:"idleTimeout,omitempty"`
	// MaxHeaderBytes bounds the size of a request's headers (a larger request is answered
	// 431). Default [DefaultMaxHeaderBytes].
	MaxHeaderBytes int `yaml:"maxHeaderBytes" json:"maxHeaderBytes,omitempty"`
	// MaxConnections bounds the connections open at once; at the limit new connections wait
	// to be accepted. Default [DefaultMaxConnections], or half the process's open-file limit
	// when that is lower (see [DefaultConnections]).
	MaxConnections int `yaml:"maxConnections" json:"maxConnections,omitempty"`
	// MaxPublishBodies bounds the publish requests served at once, and so the publish bodies
	// in memory (up to 1 MB each). Default [DefaultMaxPublishBodies].
	MaxPublishBodies int `yaml:"maxPublishBodies" json:"maxPublishBodies,omitempty"`
	// PublishWait is how long a publish waits for one of the MaxPublishBodies slots before it
	// is answered 429 with Retry-After. Default [DefaultPublishWait].
	PublishWait time.Duration `yaml:"publishWait" json:"publishWait,omitempty"`
	// MaxReceivePolls bounds the pull delivery long polls (:receive, up to 120 s each) waiting
	// at once in the server, and so the connections (HTTP/1) or streams (HTTP/2), goroutines
	// and waiters they hold; one event subscription's polls may hold at most half of them
	// ([PollLimit]). A poll over the bound is answered 429 at once. Default
	// [DefaultMaxReceivePolls], or a quarter of MaxConnections when that is lower, so that
	// polls never hold the connections publishers need.
	MaxReceivePolls int `yaml:"maxReceivePolls" json:"maxReceivePolls,omitempty"`
}

// The defaults of [Config].
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultBodyTimeout       = 30 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultMaxConnections    = 4096
	DefaultMaxPublishBodies  = 128
	DefaultPublishWait       = time.Second
	DefaultMaxReceivePolls   = 1024
)

// WithDefaults returns c with every zero field set to its default. MaxConnections defaults to
// [DefaultConnections](), and MaxReceivePolls to [DefaultMaxReceivePolls] or a quarter of
// MaxConnections, whichever is lower (at least 1).
func (c Config) WithDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&c.BodyTimeout, DefaultBodyTimeout)
	def(&c.IdleTimeout, DefaultIdleTimeout)
	def(&c.PublishWait, DefaultPublishWait)
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = DefaultConnections()
	}
	if c.MaxPublishBodies == 0 {
		c.MaxPublishBodies = DefaultMaxPublishBodies
	}
	if c.MaxReceivePolls == 0 {
		c.MaxReceivePolls = max(1, min(DefaultMaxReceivePolls, c.MaxConnections/4))
	}
	return c
}

// Validate reports every problem of c at once, naming the YAML keys.
func (c Config) Validate() error {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"readHeaderTimeout", c.ReadHeaderTimeout}, {"bodyTimeout", c.BodyTimeout},
		{"idleTimeout", c.IdleTimeout}, {"publishWait", c.PublishWait},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s %v: use a positive duration such as 30s", d.name, d.v))
		}
	}
	for _, n := range []struct {
		name string
		v    int
	}{
		{"maxHeaderBytes", c.MaxHeaderBytes}, {"maxConnections", c.MaxConnections},
		{"maxPublishBodies", c.MaxPublishBodies}, {"maxReceivePolls", c.MaxReceivePolls},
	} {
		if n.v < 0 {
			errs = append(errs, fmt.Errorf("%s %d: use a positive number", n.name, n.v))
		}
	}
	if c.MaxHeaderBytes > 0 && c.MaxHeaderBytes < 4<<10 {
		errs = append(errs, fmt.Errorf("maxHeaderBytes %d: use at least 4096 (SAS tokens and ce-* headers need room)", c.MaxHeaderBytes))
	}
	return errors.Join(errs...)
}
