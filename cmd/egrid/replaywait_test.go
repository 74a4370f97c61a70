package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router/httpapi"
)

const replaySummaryLine = `{"summary":{"objects":1,"found":1,"replayed":1,"delivered":1,"completed":true}}` + "\n"

// replayAgainst runs `egrid deadletter replay` against a server answering with handler, and
// returns its exit code and output, failing the test if it has not ended within a minute.
func replayAgainst(t *testing.T, handler func(w http.ResponseWriter, r *http.Request, stop <-chan struct{}), args ...string) (int, string) {
	t.Helper()
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler(w, r, stop) }))
	defer srv.Close()
	defer close(stop) // before Close, which waits for the handlers
	type result struct {
		code int
		out  string
	}
	done := make(chan result, 1)
	go func() {
		code, out := cliRun(t, append([]string{"deadletter", "replay", "--server", srv.URL, "--topic", "orders", "--subscription", "billing"}, args...)...)
		done <- result{code, out}
	}()
	select {
	case res := <-done:
		return res.code, res.out
	case <-time.After(time.Minute):
		t.Fatalf("deadletter replay %v did not end within a minute", args)
		return 0, ""
	}
}

// A replay whose server goes quiet — a stalled server, a half-open connection, a proxy
// holding the answer back — ends after --idle-timeout with an error saying so, that the
// replay may still run and where to look; it waited for ever. Heartbeats keep a replay
// longer than the idle timeout waiting, and an older server's answer, which has none, is
// waited for as before.
func TestReplayGivesUpOnAQuietServer(t *testing.T) {
	const idle = 300 * time.Millisecond
	quietErr := func(t *testing.T, code int, out, what string) {
		t.Helper()
		for _, want := range []string{what, "for 300ms (--idle-timeout", "may still be running", "egrid deadletter status"} {
			if !strings.Contains(out, want) {
				t.Errorf("exit %d, output:\n%s\nwant it to say %q", code, out, want)
			}
		}
		if code != 1 {
			t.Errorf("exit %d, want 1", code)
		}
	}

	t.Run("silent after a progress report", func(t *testing.T) {
		code, out := replayAgainst(t, func(w http.ResponseWriter, r *http.Request, stop <-chan struct{}) {
			w.Header().Set(httpapi.ReplayHeartbeatHeader, "15s")
			_, _ = w.Write([]byte(`{"progress":{"stage":"delivering","done":1,"total":5}}` + "\n"))
			w.(http.Flusher).Flush()
			<-stop
		}, "--idle-timeout", idle.String())
		quietErr(t, code, out, "stopped waiting: nothing came from http://127.0.0.1:")
		if !strings.Contains(out, "though it sends a heartbeat every 15s") {
			t.Errorf("output:\n%s\nwant the server's heartbeat interval", out)
		}
	})

	t.Run("no answer", func(t *testing.T) {
		code, out := replayAgainst(t, func(w http.ResponseWriter, r *http.Request, stop <-chan struct{}) {
			<-stop
		}, "--idle-timeout", idle.String())
		quietErr(t, code, out, "no answer from http://127.0.0.1:")
	})

	t.Run("heartbeats for longer than the idle timeout", func(t *testing.T) {
		const beat = 20 * time.Millisecond
		code, out := replayAgainst(t, func(w http.ResponseWriter, r *http.Request, stop <-chan struct{}) {
			w.Header().Set(httpapi.ReplayHeartbeatHeader, beat.String())
			tick := time.NewTicker(beat)
			defer tick.Stop()
			for range 3 * int(idle/beat) {
				<-tick.C
				_, _ = w.Write([]byte(`{"heartbeat":true}` + "\n"))
				w.(http.Flusher).Flush()
			}
			_, _ = w.Write([]byte(replaySummaryLine))
		}, "--idle-timeout", idle.String())
		if code != 0 || !strings.Contains(out, "replayed 1 events") || !strings.Contains(out, "delivered 1") {
			t.Errorf("a replay with heartbeats, 3 idle timeouts long: exit %d\n%s\nwant its summary", code, out)
		}
	})

	t.Run("older server without heartbeats", func(t *testing.T) {
		code, out := replayAgainst(t, func(w http.ResponseWriter, r *http.Request, stop <-chan struct{}) {
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-time.After(3 * idle)
			_, _ = w.Write([]byte(replaySummaryLine))
		}, "--idle-timeout", idle.String())
		if code != 0 || !strings.Contains(out, "replayed 1 events") || !strings.Contains(out, "sends no heartbeats") {
			t.Errorf("a replay from a server without heartbeats: exit %d\n%s\nwant its summary and a note that nothing bounds the wait", code, out)
		}
	})

	for _, bad := range []string{"0s", "-1m"} {
		code, out := replayAgainst(t, func(w http.ResponseWriter, r *http.Request, _ <-chan struct{}) {
			t.Errorf("--idle-timeout %s: the CLI called the server", bad)
		}, "--idle-timeout", bad)
		if code != 2 || !strings.Contains(out, "use a positive duration such as 1m0s") {
			t.Errorf("--idle-timeout %s: exit %d %s; want 2 saying what to use", bad, code, out)
		}
	}
}
