package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/urfave/cli/v2"

	"github.com/egridio/egrid/router/store"
)

// env is what the CLI takes from its surroundings, injected so tests run it in-process.
type env struct {
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	// wrapStore, when set, wraps the store serve opens, for tests of its faults.
	wrapStore func(store.Store) store.Store
}

func osEnv() env { return env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv} }

// run runs the CLI and returns the process exit code.
func run(ctx context.Context, args []string, e env) int {
	app := newApp(e)
	if err := app.RunContext(ctx, joinFlagWords(args)); err != nil {
		fmt.Fprintln(e.Stderr, "egrid:", termSafeText(err.Error()))
		var exit cli.ExitCoder
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		return 1
	}
	return 0
}

// newApp builds the CLI. Command names follow `az eventgrid` where it has them.
func newApp(e env) *cli.App {
	app := &cli.App{
		Name:      "egrid",
		Usage:     "a self-hosted event router with Azure Event Grid's push-delivery semantics",
		Version:   version(),
		Writer:    e.Stdout,
		ErrWriter: e.Stderr,
		Commands: []*cli.Command{
			serveCommand(e),
			storeCommand(e),
			validateCommand(e),
			publishCommand(e),
			topicCommand(e),
			subscriptionCommand(e),
			deadletterCommand(e),
			explainCommand(e),
			receiveCommand(e),
			benchCommand(e),
			versionCommand(e),
		},
		HideHelpCommand: true,
		// run reports errors and picks the exit code; cli must not call os.Exit itself.
		ExitErrHandler: func(*cli.Context, error) {},
	}
	checkUsage(app)
	return app
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func versionCommand(e env) *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the egrid version",
		Action: func(c *cli.Context) error {
			fmt.Fprintln(e.Stdout, "egrid", version())
			return nil
		},
	}
}
