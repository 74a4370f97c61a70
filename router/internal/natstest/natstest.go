// Package natstest runs the in-process nats-server that the JetStream store's tests and the
// cluster's tests share within their test binary: the version in go.mod, JetStream on files
// in a temporary directory, on a free port of 127.0.0.1. It needs nothing installed and never
// skips; the machine's shared server on 127.0.0.1:4222 is left alone (its version and leftover
// state are not a test's to choose).
package natstest

import (
	"context"
	"fmt"
	"os"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/store/jetstream"
)

// Main starts the server, sets *url to its client URL, runs the tests, stops the server,
// removes its directory (named after pattern, as os.MkdirTemp) and exits with the tests' code.
// It is the whole of a package's TestMain.
func Main(m interface{ Run() int }, pattern string, url *string) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv, err := start(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	*url = srv.ClientURL()
	code := m.Run()
	srv.Shutdown()
	srv.WaitForShutdown()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func start(dir string) (*natsserver.Server, error) {
	srv, err := natsserver.NewServer(&natsserver.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true,
		MaxPayload: jetstream.MinMaxPayload,
	})
	if err != nil {
		return nil, fmt.Errorf("starting an in-process NATS server: %w", err)
	}
	// The server's warnings and errors go to stderr, which go test shows when the package
	// fails: a JetStream API error names no cause ("error creating store for stream"); the
	// server's warning beside it does.
	srv.SetLogger(warnLogger{}, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("the in-process NATS server did not accept connections within 10s")
	}
	// A stream that lives as long as the server: nats-server 2.10 removes an account's
	// storage directory when its last stream is deleted, racing with a stream being created
	// meanwhile ("could not create storage directory ... no such file or directory"). Tests
	// delete all their streams when they end while others create theirs, so without it the
	// account passes through having none.
	if err := pin(srv.ClientURL()); err != nil {
		srv.Shutdown()
		return nil, fmt.Errorf("creating the pinning stream: %w", err)
	}
	return srv, nil
}

func pin(url string) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := njs.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = js.CreateStream(ctx, njs.StreamConfig{Name: "PIN", Subjects: []string{"pin"}})
	return err
}

// warnLogger writes a NATS server's warnings and errors to stderr, and nothing else.
type warnLogger struct{}

func (warnLogger) Noticef(string, ...any)    {}
func (warnLogger) Debugf(string, ...any)     {}
func (warnLogger) Tracef(string, ...any)     {}
func (warnLogger) Warnf(f string, v ...any)  { fmt.Fprintf(os.Stderr, "nats-server WARN "+f+"\n", v...) }
func (warnLogger) Errorf(f string, v ...any) { fmt.Fprintf(os.Stderr, "nats-server ERR "+f+"\n", v...) }
func (warnLogger) Fatalf(f string, v ...any) {
	fmt.Fprintf(os.Stderr, "nats-server FATAL "+f+"\n", v...)
}
