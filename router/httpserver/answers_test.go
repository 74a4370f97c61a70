package httpserver_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egridio/egrid/router/httpserver"
	"github.com/egridio/egrid/testkit"
)

// A client that sends a request and never reads its answer is disconnected once the
// answer has waited AnswerStall, and the handler returns, letting go of what it holds (a
// publish slot, the answer in memory); a slow client that keeps reading gets its whole
// answer however long it takes (it must take in 64 KiB per AnswerStall); time the handler spends before it writes does not count.
// Before, the server had no write deadline at all: such a client held its connection and
// the handler's goroutine for ever. A handler that sets its own write deadline keeps it.
func TestAnswersBoundStalledReaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const size = 1 << 20
		returned := make(chan string, 4)
		ownErr := make(chan error, 1)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() { returned <- r.URL.Path }()
			switch r.URL.Path {
			case "/late":
				<-time.After(3 * httpserver.AnswerStall) // e.g. a long poll
			case "/own":
				// As :receive does: the whole answer within its own deadline.
				_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(httpserver.AnswerStall / 2))
				_, err := w.Write([]byte(strings.Repeat("x", size)))
				ownErr <- err
				return
			}
			_, _ = w.Write([]byte(strings.Repeat("x", size)))
		})
		srv := httpserver.New(httpserver.Config{}, h, httpserver.Requests{}, nil)
		ln := testkit.NewPipeListener()
		go func() { _ = srv.Serve(ln) }()
		defer func() {
			_ = srv.Close()
			synctest.Wait()
		}()

		// A client that never reads.
		stalled := dial(t, ln)
		defer stalled.Close()
		if _, err := io.WriteString(stalled, "GET /stalled HTTP/1.1\r\nHost: egrid\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		testkit.Advance(httpserver.AnswerStall - time.Nanosecond)
		select {
		case p := <-returned:
			t.Fatalf("%s returned before its answer had stalled for AnswerStall", p)
		default:
		}
		testkit.Advance(time.Nanosecond)
		select {
		case <-returned:
		default:
			t.Fatal("the handler of a client that never reads its answer is still writing after AnswerStall")
		}
		_ = stalled.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := io.Copy(io.Discard, stalled); err != nil {
			t.Fatalf("the stalled connection was not closed: %v", err)
		}

		// A client that reads slowly, but steadily, after a handler that waited before it
		// wrote: the whole answer.
		slow := dial(t, ln)
		defer slow.Close()
		if _, err := io.WriteString(slow, "GET /late HTTP/1.1\r\nHost: egrid\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReaderSize(slow, 4<<10)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		// 16 KiB every 10 s: the first 256 KiB take 160 s, well past AnswerStall.
		got := 0
		buf := make([]byte, 16<<10)
		for got < 256<<10 {
			<-time.After(10 * time.Second)
			n, err := io.ReadFull(resp.Body, buf)
			got += n
			if err != nil {
				t.Fatalf("after %d of %d bytes: %v", got, size, err)
			}
		}
		rest, err := io.ReadAll(resp.Body)
		if err != nil || got+len(rest) != size {
			t.Fatalf("read %d+%d of %d bytes: %v", got, len(rest), size, err)
		}
		if p := <-returned; p != "/late" {
			t.Fatalf("returned %s", p)
		}

		// A handler that sets its own deadline keeps it, however steadily its client reads.
		own := dial(t, ln)
		defer own.Close()
		if _, err := io.WriteString(own, "GET /own HTTP/1.1\r\nHost: egrid\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		readerDone := make(chan struct{})
		defer func() { own.Close(); <-readerDone }()
		go func() {
			defer close(readerDone)
			buf := make([]byte, 16<<10)
			for {
				<-time.After(5 * time.Second)
				if _, err := own.Read(buf); err != nil {
					return
				}
			}
		}()
		testkit.Advance(httpserver.AnswerStall / 2)
		select {
		case err := <-ownErr:
			if err == nil {
				t.Fatal("a handler's own deadline was stretched: its answer was written whole")
			}
		default:
			t.Fatal("a handler's own deadline passed, and its write goes on")
		}
		if p := <-returned; p != "/own" {
			t.Fatalf("returned %s", p)
		}
	})
}

// dial returns the client end of a new connection to the server.
func dial(t *testing.T, ln *testkit.PipeListener) net.Conn {
	t.Helper()
	c, err := ln.DialContext(context.Background(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	return c
}
