package main

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/egridio/egrid/schemas/clip"
)

// --insecure-dev is for a developer's machine: it accepts publishes without credentials and,
// when no admin token is configured, admin calls without one. So that it is not left on by
// mistake where others can reach the server, serve refuses it with a listen address that is
// not loopback unless --insecure-dev-any-address says so too (a container whose port is
// published to the host, say), warns at every start while it is on, and never lets it
// override a configured admin token (router.Config.InsecureDev).

// insecureDevFlags are serve's flags that go with --insecure-dev.
func insecureDevFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "insecure-dev-any-address", Usage: "allow --insecure-dev with a --listen address that is not loopback (env EGRID_INSECURE_DEV_ANY_ADDRESS)"},
	}
}

// resolveInsecureDevAnyAddress is --insecure-dev-any-address: flag > env > file.
func resolveInsecureDevAnyAddress(c *cli.Context, getenv func(string) string, fs serverConfig) (bool, error) {
	switch {
	case c.IsSet("insecure-dev-any-address"):
		return c.Bool("insecure-dev-any-address"), nil
	case getenv("EGRID_INSECURE_DEV_ANY_ADDRESS") != "":
		v, err := strconv.ParseBool(getenv("EGRID_INSECURE_DEV_ANY_ADDRESS"))
		if err != nil {
			return false, fmt.Errorf("EGRID_INSECURE_DEV_ANY_ADDRESS=%q: use true or false", clip.String(getenv("EGRID_INSECURE_DEV_ANY_ADDRESS")))
		}
		return v, nil
	}
	return fs.InsecureDevAnyAddress, nil
}

// checkInsecureDev refuses --insecure-dev with a listen address that is not loopback, unless
// anyAddress allows it.
func checkInsecureDev(s serveSettings) error {
	if !s.InsecureDev || s.InsecureDevAnyAddress || isLoopback(s.Listen) {
		return nil
	}
	return fmt.Errorf("--insecure-dev accepts publishes without credentials, so it listens only on a loopback address (127.0.0.1, [::1], localhost), and --listen %q is not one: "+
		"listen on 127.0.0.1, or configure topic keys and an admin token instead, or add --insecure-dev-any-address if the server really must be reachable from elsewhere", clip.String(s.Listen))
}

// isLoopback reports whether the listen address host:port names only loopback interfaces:
// "localhost" or a loopback IP. An empty or unspecified host (":8080", "0.0.0.0:8080") listens
// on every interface, and another name is not trusted to resolve to loopback.
func isLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// warnInsecureDev logs, at every start with --insecure-dev, what it opens.
func warnInsecureDev(log *slog.Logger, s serveSettings) {
	if !s.InsecureDev {
		return
	}
	admin := "admin calls need no token (none is configured)"
	if s.AdminToken != "" {
		admin = "the admin API still requires the configured admin token"
	}
	log.Warn("--insecure-dev is on: publishes without credentials are accepted; "+admin+"; do not use it in production",
		"listen", s.Listen, "anyAddress", s.InsecureDevAnyAddress)
}
