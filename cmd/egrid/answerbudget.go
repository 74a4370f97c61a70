package main

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/schemas/clip"
)

// answerBudgetFlags are serve's flags of the bound on pull delivery answers held in memory at
// once (router.Config.MaxReceiveAnswerBytes).
func answerBudgetFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "max-receive-answer-bytes", Usage: "bytes of pull delivery answers (:receive) held in memory at once until their consumers have read them; past it polls get the events that fit or wait; bytes with an optional unit (64MiB, 1GiB) (env EGRID_MAX_RECEIVE_ANSWER_BYTES)", DefaultText: formatBytes(router.DefaultMaxReceiveAnswerBytes)},
	}
}

// resolveAnswerBudget is --max-receive-answer-bytes: flag > env > file
// (server.maxReceiveAnswerBytes) > router.DefaultMaxReceiveAnswerBytes.
func resolveAnswerBudget(c *cli.Context, getenv func(string) string, fs serverConfig) (int64, error) {
	var v, from string
	switch {
	case c.IsSet("max-receive-answer-bytes"):
		v, from = c.String("max-receive-answer-bytes"), "--max-receive-answer-bytes"
	case getenv("EGRID_MAX_RECEIVE_ANSWER_BYTES") != "":
		v, from = getenv("EGRID_MAX_RECEIVE_ANSWER_BYTES"), "EGRID_MAX_RECEIVE_ANSWER_BYTES"
	case fs.MaxReceiveAnswerBytes != "":
		v, from = fs.MaxReceiveAnswerBytes, "server.maxReceiveAnswerBytes"
	default:
		return router.DefaultMaxReceiveAnswerBytes, nil
	}
	n, percent, err := parseDiskSize(v)
	if err == nil && (percent || n == 0 || n > 1<<50) {
		err = errors.New("out of range")
	}
	if err != nil {
		return router.DefaultMaxReceiveAnswerBytes, fmt.Errorf("%s %q: use bytes with an optional unit, from 1 to 1PiB, such as 256MiB (the default) or 1GiB", from, clip.String(v))
	}
	return int64(n), nil
}

// formatBytes writes n with the largest binary unit that divides it: 256MiB.
func formatBytes(n int64) string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.mult && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
