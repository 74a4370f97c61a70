// Command egrid is the egrid event router: `egrid serve` runs it standalone, and the other
// commands drive a running server (see `egrid --help`).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args, osEnv()))
}
