package main

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/egridio/egrid/router/httpserver"
	"github.com/egridio/egrid/schemas/clip"
)

// serverLimitFlags are serve's flags for the HTTP server's bounds (package httpserver) and
// the log's folding of repeated lines (package logfold). Their defaults are applied after
// resolution (flag > env > file > default): a flag's Value stays zero, so that unset it leaves
// the choice to the environment and the file, and its DefaultText is what help shows.
func serverLimitFlags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "read-header-timeout", Usage: "time a client has to send a request's headers (env EGRID_READ_HEADER_TIMEOUT)", DefaultText: httpserver.DefaultReadHeaderTimeout.String()},
		&cli.DurationFlag{Name: "body-timeout", Usage: "time a client has to send a request's body after its headers (env EGRID_BODY_TIMEOUT)", DefaultText: httpserver.DefaultBodyTimeout.String()},
		&cli.DurationFlag{Name: "idle-timeout", Usage: "time a kept-alive connection may wait for its next request (env EGRID_IDLE_TIMEOUT)", DefaultText: httpserver.DefaultIdleTimeout.String()},
		&cli.IntFlag{Name: "max-header-bytes", Usage: "largest request headers accepted, in bytes (env EGRID_MAX_HEADER_BYTES)", DefaultText: strconv.Itoa(httpserver.DefaultMaxHeaderBytes)},
		&cli.IntFlag{Name: "max-connections", Usage: "connections open at once; at the limit new ones wait (env EGRID_MAX_CONNECTIONS)", DefaultText: fmt.Sprintf("%d, or half the open-file limit when lower", httpserver.DefaultMaxConnections)},
		&cli.IntFlag{Name: "max-publish-bodies", Usage: "publish requests served at once, each body up to 1 MB in memory (env EGRID_MAX_PUBLISH_BODIES)", DefaultText: strconv.Itoa(httpserver.DefaultMaxPublishBodies)},
		&cli.DurationFlag{Name: "publish-wait", Usage: "how long a publish waits for a free slot before it is answered 429 with Retry-After (env EGRID_PUBLISH_WAIT)", DefaultText: httpserver.DefaultPublishWait.String()},
		&cli.IntFlag{Name: "max-receive-polls", Usage: "pull delivery long polls (:receive) waiting at once, at most half of them on one event subscription; more are answered 429 at once (env EGRID_MAX_RECEIVE_POLLS)", DefaultText: fmt.Sprintf("%d, or a quarter of --max-connections when lower", httpserver.DefaultMaxReceivePolls)},
		&cli.DurationFlag{Name: "log-fold-window", Usage: "a warning or error message repeated within this window is written once, then as one line \"moreLikeThis=N\"; 0 turns folding off (env EGRID_LOG_FOLD_WINDOW)", DefaultText: defaultLogFoldWindow.String()},
	}
}

// defaultLogFoldWindow is the default of --log-fold-window.
const defaultLogFoldWindow = time.Second

// resolveServerLimits merges the server-limit flags, environment and file settings (flag >
// env > file > default), reporting every problem at once. Zero fields of the result take
// httpserver's defaults.
func resolveServerLimits(c *cli.Context, getenv func(string) string, fs serverConfig) (httpserver.Config, time.Duration, []error) {
	var errs []error
	dur := func(flag, envName string, fileVal time.Duration) time.Duration {
		switch {
		case c.IsSet(flag):
			return c.Duration(flag)
		case getenv(envName) != "":
			v, err := time.ParseDuration(getenv(envName))
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: use a duration such as 30s", envName, clip.String(getenv(envName))))
			}
			return v
		}
		return fileVal
	}
	num := func(flag, envName string, fileVal int) int {
		switch {
		case c.IsSet(flag):
			return c.Int(flag)
		case getenv(envName) != "":
			v, err := strconv.Atoi(getenv(envName))
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: use a whole number", envName, clip.String(getenv(envName))))
			}
			return v
		}
		return fileVal
	}
	h := fs.HTTP
	cfg := httpserver.Config{
		ReadHeaderTimeout: dur("read-header-timeout", "EGRID_READ_HEADER_TIMEOUT", h.ReadHeaderTimeout),
		BodyTimeout:       dur("body-timeout", "EGRID_BODY_TIMEOUT", h.BodyTimeout),
		IdleTimeout:       dur("idle-timeout", "EGRID_IDLE_TIMEOUT", h.IdleTimeout),
		MaxHeaderBytes:    num("max-header-bytes", "EGRID_MAX_HEADER_BYTES", h.MaxHeaderBytes),
		MaxConnections:    num("max-connections", "EGRID_MAX_CONNECTIONS", h.MaxConnections),
		MaxPublishBodies:  num("max-publish-bodies", "EGRID_MAX_PUBLISH_BODIES", h.MaxPublishBodies),
		PublishWait:       dur("publish-wait", "EGRID_PUBLISH_WAIT", h.PublishWait),
		MaxReceivePolls:   num("max-receive-polls", "EGRID_MAX_RECEIVE_POLLS", h.MaxReceivePolls),
	}
	fold := defaultLogFoldWindow
	if fs.LogFoldWindow != nil {
		fold = *fs.LogFoldWindow
	}
	fold = dur("log-fold-window", "EGRID_LOG_FOLD_WINDOW", fold)
	if err := cfg.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("server limits: %w", err))
	}
	if fold < 0 {
		errs = append(errs, errors.New("log fold window: use a positive duration such as 1s, or 0 to turn folding off"))
	}
	return cfg, fold, errs
}
