package main

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/egridio/egrid/schemas/clip"
	"github.com/egridio/egrid/sinks/egress"
)

// egressFileConfig is `server.egress` in the YAML config: where webhooks may point (SPEC §9).
//
//	server:
//	  allowHttpEndpoints: false     # http:// endpoints need this (or --insecure-dev)
//	  egress:
//	    allow: [10.20.0.0/16, "*.svc.cluster.local"]   # private ranges, loopback, host names
//	    deny: [203.0.113.0/24]                         # beats allow
type egressFileConfig struct {
	Allow []string `yaml:"allow"`
	Deny  []string `yaml:"deny"`
}

func egressFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "egress-allow", Usage: "CIDR, address or host pattern webhooks may reach although a built-in rule denies it (private ranges, loopback); repeat or separate with commas; replaces server.egress.allow (env EGRID_EGRESS_ALLOW)"},
		&cli.StringSliceFlag{Name: "egress-deny", Usage: "CIDR, address or host pattern webhooks must never reach; beats --egress-allow; replaces server.egress.deny (env EGRID_EGRESS_DENY)"},
		&cli.BoolFlag{Name: "allow-http-endpoints", Usage: "accept http:// webhook endpoints (Azure accepts https:// only; --insecure-dev allows them too) (env EGRID_ALLOW_HTTP_ENDPOINTS)"},
	}
}

// egressSettings are the resolved egress settings.
type egressSettings struct {
	Policy             egress.Config
	AllowHTTPEndpoints bool
}

// resolveEgress merges the egress flags, environment and file settings (flag > env > file >
// default). Loopback is denied unless insecureDev (local development against `egrid
// receive`) or an allow entry names it.
func resolveEgress(c *cli.Context, getenv func(string) string, fs serverConfig, insecureDev bool) (egressSettings, []error) {
	var errs []error
	list := func(flag, envName string, fileVal []string) []string {
		switch {
		case c.IsSet(flag):
			return splitList(c.StringSlice(flag))
		case getenv(envName) != "":
			return splitList([]string{getenv(envName)})
		}
		return fileVal
	}
	s := egressSettings{Policy: egress.Config{
		Allow:        list("egress-allow", "EGRID_EGRESS_ALLOW", fs.Egress.Allow),
		Deny:         list("egress-deny", "EGRID_EGRESS_DENY", fs.Egress.Deny),
		DenyLoopback: !insecureDev,
	}}
	if err := s.Policy.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("server.%w", err))
	}
	switch {
	case c.IsSet("allow-http-endpoints"):
		s.AllowHTTPEndpoints = c.Bool("allow-http-endpoints")
	case getenv("EGRID_ALLOW_HTTP_ENDPOINTS") != "":
		v, err := strconv.ParseBool(getenv("EGRID_ALLOW_HTTP_ENDPOINTS"))
		if err != nil {
			errs = append(errs, fmt.Errorf("EGRID_ALLOW_HTTP_ENDPOINTS=%q: use true or false", clip.String(getenv("EGRID_ALLOW_HTTP_ENDPOINTS"))))
		}
		s.AllowHTTPEndpoints = v
	default:
		s.AllowHTTPEndpoints = fs.AllowHTTPEndpoints
	}
	return s, errs
}

// splitList splits comma-separated entries and drops empty ones.
func splitList(in []string) []string {
	var out []string
	for _, s := range in {
		for _, e := range strings.Split(s, ",") {
			if e = strings.TrimSpace(e); e != "" {
				out = append(out, e)
			}
		}
	}
	return out
}

// egressPolicy builds the server's egress policy: egrid's own listen address and public URL
// are denied from the start (the listener's actual address is added once it listens).
func (s serveSettings) egressPolicy() (*egress.Policy, error) {
	p, err := egress.New(s.Egress.Policy, egress.Options{ConfigPath: "server.egress"})
	if err != nil {
		return nil, err
	}
	p.DenySelf(s.Listen)
	if u, err := url.Parse(s.PublicURL); err == nil && u.Hostname() != "" {
		port := u.Port()
		if port == "" {
			port = "443"
			if u.Scheme == "http" {
				port = "80"
			}
		}
		p.DenySelf(net.JoinHostPort(u.Hostname(), port))
	}
	return p, nil
}
