package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
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
// env > file > default), reporting every problem at once, each named as where the value came
// from: --publish-wait, EGRID_PUBLISH_WAIT, or server.publishWait as the config file's own
// checks (fileConfig.validate) name it, so that egrid validate, which runs both, lists a bad
// value of the file once. Zero fields of the result take httpserver's defaults.
func resolveServerLimits(c *cli.Context, getenv func(string) string, fs serverConfig) (httpserver.Config, time.Duration, []error) {
	var errs []error
	from := map[string]string{} // YAML key -> where its value came from
	dur := func(key, flag, envName string, fileVal time.Duration) time.Duration {
		switch {
		case c.IsSet(flag):
			from[key] = "--" + flag
			return c.Duration(flag)
		case getenv(envName) != "":
			from[key] = envName
			v, err := time.ParseDuration(getenv(envName))
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: use a duration such as 30s", envName, clip.String(getenv(envName))))
			}
			return v
		}
		from[key] = "server." + key
		return fileVal
	}
	num := func(key, flag, envName string, fileVal int) int {
		switch {
		case c.IsSet(flag):
			from[key] = "--" + flag
			return c.Int(flag)
		case getenv(envName) != "":
			from[key] = envName
			v, err := strconv.Atoi(getenv(envName))
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: use a whole number", envName, clip.String(getenv(envName))))
			}
			return v
		}
		from[key] = "server." + key
		return fileVal
	}
	h := fs.HTTP
	cfg := httpserver.Config{
		ReadHeaderTimeout: dur("readHeaderTimeout", "read-header-timeout", "EGRID_READ_HEADER_TIMEOUT", h.ReadHeaderTimeout),
		BodyTimeout:       dur("bodyTimeout", "body-timeout", "EGRID_BODY_TIMEOUT", h.BodyTimeout),
		IdleTimeout:       dur("idleTimeout", "idle-timeout", "EGRID_IDLE_TIMEOUT", h.IdleTimeout),
		MaxHeaderBytes:    num("maxHeaderBytes", "max-header-bytes", "EGRID_MAX_HEADER_BYTES", h.MaxHeaderBytes),
		MaxConnections:    num("maxConnections", "max-connections", "EGRID_MAX_CONNECTIONS", h.MaxConnections),
		MaxPublishBodies:  num("maxPublishBodies", "max-publish-bodies", "EGRID_MAX_PUBLISH_BODIES", h.MaxPublishBodies),
		PublishWait:       dur("publishWait", "publish-wait", "EGRID_PUBLISH_WAIT", h.PublishWait),
		MaxReceivePolls:   num("maxReceivePolls", "max-receive-polls", "EGRID_MAX_RECEIVE_POLLS", h.MaxReceivePolls),
	}
	fold := defaultLogFoldWindow
	if fs.LogFoldWindow != nil {
		fold = *fs.LogFoldWindow
	}
	fold = dur("logFoldWindow", "log-fold-window", "EGRID_LOG_FOLD_WINDOW", fold)
	// Validate names each problem by its YAML key, first: name it as it was given.
	for _, err := range joined(cfg.Validate()) {
		key, rest, _ := strings.Cut(err.Error(), " ")
		if src, ok := from[key]; ok {
			err = errors.New(src + " " + rest)
		}
		errs = append(errs, err)
	}
	if fold < 0 {
		errs = append(errs, fmt.Errorf("%s %v: use a positive duration such as 1s, or 0 to turn folding off", from["logFoldWindow"], fold))
	}
	return cfg, fold, errs
}

// joined returns the errors err joins (errors.Join, and the joins it joins), or err alone;
// none for nil.
func joined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			// A Validate method joins its parts' Validate: their problems, a line each.
			if n, ok := e.(interface{ Unwrap() []error }); ok && isJoin(e, n.Unwrap()) {
				out = append(out, joined(e)...)
			} else if e != nil {
				out = append(out, e)
			}
		}
		return out
	}
	if err == nil {
		return nil
	}
	return []error{err}
}
