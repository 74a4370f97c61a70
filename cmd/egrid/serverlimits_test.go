package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// dialServer opens a raw TCP connection to the server at base (http://host:port).
func dialServer(t *testing.T, base string) net.Conn {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// awaitClosedByServer reads c until the server closes it and fails the test when that does
// not happen within a minute (the server's timeouts in these tests are far shorter).
func awaitClosedByServer(t *testing.T, c net.Conn, what string) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the server still holds the connection after a minute", what)
	}
}

// call sends a request with client and returns the status, the Retry-After header and the body.
func call(t *testing.T, client *http.Client, method, url, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(msg)
}

// oneShot is a client that opens a new connection per request and closes it after, so the
// test's own requests hold none of the server's connections.
var oneShot = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}

// TestSlowAndIdleClientsAreCut: a client that sends nothing, one that stops in the middle of
// its headers, one that stops in the middle of its body and a kept-alive connection left idle
// are all closed by the server after the configured timeouts (SPEC §8), and the server goes
// on serving.
func TestSlowAndIdleClientsAreCut(t *testing.T) {
	srv := startServer(t, "--insecure-dev", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--read-header-timeout", "200ms", "--body-timeout", "200ms", "--idle-timeout", "200ms")
	if code, _, msg := call(t, oneShot, http.MethodPut, srv.url+"/admin/topics/orders", `{"properties":{}}`); code != http.StatusOK && code != http.StatusCreated {
		t.Fatalf("creating the topic: %d %s", code, msg)
	}
	publish := "POST /topics/orders/api/events?api-version=2018-01-01 HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"

	silent := dialServer(t, srv.url)
	slowHeaders := dialServer(t, srv.url)
	fmt.Fprint(slowHeaders, publish) // the blank line that ends the headers never comes
	slowBody := dialServer(t, srv.url)
	fmt.Fprint(slowBody, publish+"Content-Length: 100000\r\n\r\n[{\"id\":")
	idle := dialServer(t, srv.url)
	fmt.Fprint(idle, "GET /admin/topics HTTP/1.1\r\nHost: localhost\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	if err != nil {
		t.Fatalf("reading the answer on the kept-alive connection: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("GET /admin/topics: %d (close %v), want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
	}

	awaitClosedByServer(t, silent, "a connection that never sends a byte")
	awaitClosedByServer(t, slowHeaders, "a client that stops in the middle of its headers")
	awaitClosedByServer(t, slowBody, "a client that stops in the middle of its body")
	awaitClosedByServer(t, idle, "an idle kept-alive connection")

	code, _, msg := call(t, oneShot, http.MethodPost, srv.url+"/topics/orders/api/events?api-version=2018-01-01", string(eventsBody([]string{"e1"})))
	if code != http.StatusOK {
		t.Fatalf("a publish after the slow clients were cut: %d %s", code, msg)
	}
}

// TestPublishBeyondTheBodyLimitIsAnswered429: with --max-publish-bodies 1, a publish that
// comes while another one's body is being read waits --publish-wait and is answered 429 with
// Retry-After and Event Grid's error body (SPEC §1.1); the admin plane is not limited; once the
// first publish is done the next one is accepted.
func TestPublishBeyondTheBodyLimitIsAnswered429(t *testing.T) {
	srv := startServer(t, "--insecure-dev", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--max-publish-bodies", "1", "--publish-wait", "20ms", "--body-timeout", "5m")
	publishURL := srv.url + "/topics/orders/api/events?api-version=2018-01-01"
	if code, _, msg := call(t, oneShot, http.MethodPut, srv.url+"/admin/topics/orders", `{"properties":{}}`); code/100 != 2 {
		t.Fatalf("creating the topic: %d %s", code, msg)
	}

	// The first publish asks for 100-continue: net/http answers it when the handler starts
	// reading the body, so once it arrives, the publish holds the one slot.
	body := eventsBody([]string{"slow"})
	first := dialServer(t, srv.url)
	if err := first.SetDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(first, "POST /topics/orders/api/events?api-version=2018-01-01 HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", len(body))
	br := bufio.NewReader(first)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("the first publish got %q (%v), want 100 Continue", line, err)
	}
	if _, err := br.ReadString('\n'); err != nil { // the blank line after 100 Continue
		t.Fatal(err)
	}

	code, retryAfter, msg := call(t, oneShot, http.MethodPost, publishURL, string(eventsBody([]string{"e2"})))
	if code != http.StatusTooManyRequests || retryAfter == "" {
		t.Fatalf("a publish beyond the limit: %d Retry-After %q %s, want 429 with Retry-After", code, retryAfter, msg)
	}
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(msg), &e); err != nil || e.Error.Code != "TooManyRequests" || e.Error.Message == "" {
		t.Fatalf("the 429 body is %s, want Event Grid's error body with code TooManyRequests", msg)
	}
	if code, _, msg := call(t, oneShot, http.MethodGet, srv.url+"/admin/topics", ""); code != http.StatusOK {
		t.Fatalf("the admin plane while publishes are limited: %d %s", code, msg)
	}

	if _, err := first.Write(body); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the first publish's answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the first publish: %d, want 200", resp.StatusCode)
	}
	if code, _, msg := call(t, oneShot, http.MethodPost, publishURL, string(eventsBody([]string{"e3"}))); code != http.StatusOK {
		t.Fatalf("a publish after the slot was freed: %d %s", code, msg)
	}
}

// TestConnectionLimit: with --max-connections 2 and both connections held, a third client's
// request waits (and the server says why in its log) while the held connections are served and
// deliveries go on; it is answered once a held connection closes.
func TestConnectionLimit(t *testing.T) {
	limitLines := make(chan string, 10)
	srv := startLogged(t, limitLines, "connection limit reached", "--insecure-dev", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--max-connections", "2", "--idle-timeout", "5m", "--read-header-timeout", "5m")
	hook, got := newHook(t, 10, func(int) bool { return false })

	// keep holds one connection, reused for every request of the test's own.
	keep := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}, Timeout: time.Minute}
	t.Cleanup(keep.CloseIdleConnections)
	sub, _ := json.Marshal(map[string]any{"properties": map[string]any{
		"destination": map[string]any{"endpointType": "WebHook", "properties": map[string]any{"endpointUrl": hook.URL + "/hook"}},
	}})
	for _, c := range []struct{ path, body string }{
		{"/admin/topics/orders", `{"properties":{}}`},
		{"/admin/topics/orders/eventSubscriptions/billing", string(sub)},
	} {
		if code, _, msg := call(t, keep, http.MethodPut, srv.url+c.path, c.body); code/100 != 2 {
			t.Fatalf("PUT %s: %d %s", c.path, code, msg)
		}
	}
	// The second connection: one request answered, then kept open.
	held := dialServer(t, srv.url)
	fmt.Fprint(held, "GET /admin/topics HTTP/1.1\r\nHost: localhost\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(held), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the held connection's request: %v %v", resp, err)
	}
	resp.Body.Close()

	waiting := dialServer(t, srv.url) // the kernel completes the handshake; egrid does not accept it
	fmt.Fprint(waiting, "GET /admin/topics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
	answered := make(chan *http.Response, 1)
	go func() {
		_ = waiting.SetReadDeadline(time.Now().Add(2 * time.Minute))
		resp, err := http.ReadResponse(bufio.NewReader(waiting), nil)
		if err != nil {
			close(answered)
			return
		}
		resp.Body.Close()
		answered <- resp
	}()
	select {
	case <-limitLines:
	case <-time.After(time.Minute):
		t.Fatal("the server did not log that its connection limit was reached")
	}

	// The held connections are served, and deliveries go on.
	if code, _, msg := call(t, keep, http.MethodPost, srv.url+"/topics/orders/api/events?api-version=2018-01-01", string(eventsBody([]string{"e1"}))); code != http.StatusOK {
		t.Fatalf("a publish on a held connection at the limit: %d %s", code, msg)
	}
	select {
	case r := <-got:
		if len(r.ids) != 1 || r.ids[0] != "e1" {
			t.Fatalf("the endpoint got %v, want e1", r.ids)
		}
	case <-time.After(time.Minute):
		t.Fatal("no delivery within a minute while the connection limit was reached")
	}
	// The waiting request was sent before the publish and its delivery; a server without the
	// limit would have answered it long before.
	select {
	case resp := <-answered:
		t.Fatalf("a connection beyond the limit was served: %v", resp)
	default:
	}

	held.Close()
	select {
	case resp, ok := <-answered:
		if !ok || resp.StatusCode != http.StatusOK {
			t.Fatalf("the waiting connection, once a slot was free: %v", resp)
		}
	case <-time.After(time.Minute):
		t.Fatal("the waiting connection was not served within a minute of a slot being freed")
	}
}

// TestLogFoldsAFlood: a flood of one failure — here clients that are not TLS talking to the
// HTTPS server, each logging a failed handshake — is written once, then counted in one line
// (written at the latest when the server stops).
func TestLogFoldsAFlood(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, _ := selfSigned(t, dir)
	srv := startServer(t, "--insecure-dev", "--data-dir", filepath.Join(dir, "data"), "--tls-cert", certFile, "--tls-key", keyFile,
		"--log-fold-window", "10m")
	const clients = 20
	for range clients {
		c := dialServer(t, strings.Replace(srv.url, "https://", "http://", 1))
		fmt.Fprint(c, "this is not a TLS handshake\r\n\r\n")
		awaitClosedByServer(t, c, "a client that is not TLS")
		c.Close()
	}
	srv.stop(t)
	var plain, folded []string
	for _, line := range strings.Split(srv.log(), "\n") {
		if !strings.Contains(line, "TLS handshake error") {
			continue
		}
		if strings.Contains(line, "moreLikeThis=") {
			folded = append(folded, line)
		} else {
			plain = append(plain, line)
		}
	}
	if len(plain) != 1 || len(folded) != 1 || !strings.Contains(folded[0], fmt.Sprintf("moreLikeThis=%d ", clients-1)) {
		t.Fatalf("the log has %d handshake-error lines and %d folded ones, want 1 and 1 with moreLikeThis=%d:\n%s\n%s",
			len(plain), len(folded), clients-1, strings.Join(plain, "\n"), strings.Join(folded, "\n"))
	}
}

// TestServerLimitProblemsOnce: egrid validate lists each bad server limit once, named as the
// file names it (server.publishWait), though both the file's checks and the settings' merge
// judge it; a bad limit given as a flag or in the environment is named as given. validate
// listed publishWait and maxConnections twice each, once without the "server." of its key.
func TestServerLimitProblemsOnce(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "egrid.yaml")
	if err := os.WriteFile(cfg, []byte("server:\n  publishWait: -1s\n  maxConnections: -5\n  readHeaderTimeout: -2s\n  maxHeaderBytes: 100\n  logFoldWindow: -1s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := cliRun(t, "validate", "--config", cfg)
	if code != 2 {
		t.Fatalf("validate: exit %d, %q; want 2", code, out)
	}
	for _, key := range []string{"publishWait -1s", "maxConnections -5", "readHeaderTimeout -2s", "maxHeaderBytes 100", "logFoldWindow -1s"} {
		if n := strings.Count(out, key); n != 1 {
			t.Errorf("validate names %q %d times, want once:\n%s", key, n, out)
		}
		if !strings.Contains(out, "\nserver."+key+": ") {
			t.Errorf("validate does not name %q as server.%s on a line of its own:\n%s", key, key, out)
		}
	}

	var stderr bytes.Buffer
	code = run(context.Background(), []string{"egrid", "serve", "--insecure-dev", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--publish-wait", "-1s", "--log-fold-window", "-1s"},
		env{Stdout: io.Discard, Stderr: &stderr, Getenv: func(k string) string {
			return map[string]string{"EGRID_MAX_CONNECTIONS": "-5"}[k]
		}})
	for _, want := range []string{"--publish-wait -1s: use a positive duration", "EGRID_MAX_CONNECTIONS -5: use a positive number", "--log-fold-window -1s: use a positive duration"} {
		if code != 2 || strings.Count(stderr.String(), want) != 1 {
			t.Errorf("serve with bad limits: exit %d, %q; want exit 2 saying %q once", code, stderr.String(), want)
		}
	}
}
