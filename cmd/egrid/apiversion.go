package main

import (
	"fmt"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/egridio/egrid/schemas/clip"
)

// apiVersionFlags are serve's flags of the data plane's api-version check
// (router.Config.AnyAPIVersion).
func apiVersionFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "any-api-version", Usage: "take any api-version on the data plane, and a namespace topic's events on the classic route /api/events; Azure, and egrid by default, refuse both with 400 \"Unknown api version\" (env EGRID_ANY_API_VERSION)"},
	}
}

// resolveAnyAPIVersion is --any-api-version: flag > env > file (server.anyApiVersion).
func resolveAnyAPIVersion(c *cli.Context, getenv func(string) string, fs serverConfig) (bool, error) {
	switch {
	case c.IsSet("any-api-version"):
		return c.Bool("any-api-version"), nil
	case getenv("EGRID_ANY_API_VERSION") != "":
		v, err := strconv.ParseBool(getenv("EGRID_ANY_API_VERSION"))
		if err != nil {
			return false, fmt.Errorf("EGRID_ANY_API_VERSION=%q: use true or false", clip.String(getenv("EGRID_ANY_API_VERSION")))
		}
		return v, nil
	}
	return fs.AnyAPIVersion, nil
}
