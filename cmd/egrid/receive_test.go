package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egridio/egrid/testkit"
)

func TestReceiverPrintsAndAnswersHandshakes(t *testing.T) {
	var out bytes.Buffer
	h := &receiver{out: &out, failFirst: 1, failStatus: 503}
	srv := httptest.NewServer(h)
	defer srv.Close()

	post := func(eventType, body string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/hook", strings.NewReader(body))
		req.Header.Set("aeg-event-type", eventType)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := post("SubscriptionValidation", `[{"data":{"validationCode":"abc"}}]`)
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(buf.String(), `"validationResponse":"abc"`) {
		t.Errorf("validation: %d %s", resp.StatusCode, buf.String())
	}
	if resp := post("Notification", `[{"id":"1"}]`); resp.StatusCode != 503 {
		t.Errorf("first delivery: %d, want 503 (--fail-first 1)", resp.StatusCode)
	}
	if resp := post("Notification", `[{"id":"2"}]`); resp.StatusCode != 200 {
		t.Errorf("second delivery: %d, want 200", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodOptions, srv.URL+"/hook", nil)
	req.Header.Set("WebHook-Request-Origin", "eventgrid.azure.net")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Header.Get("WebHook-Allowed-Origin"); got != "eventgrid.azure.net" {
		t.Errorf("OPTIONS: WebHook-Allowed-Origin %q", got)
	}
	for _, want := range []string{"aeg-event-type: Notification", `[{"id":"2"}]`, "→ 503"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestReceiverDropsStalledClients: egrid receive's server bounds the time a client has to
// send its body, as egrid's own server does, so a client that stops halfway does not hold a
// connection and a handler for ever.
func TestReceiverDropsStalledClients(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := testkit.NewPipeListener()
		srv := receiverServer(&receiver{out: io.Discard, failStatus: http.StatusServiceUnavailable, start: time.Now()})
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		defer func() {
			_ = srv.Close()
			<-served
		}()
		c, err := ln.DialContext(context.Background(), "", "")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: receiver\r\nContent-Length: 100\r\n\r\n[{\"id\":"); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(time.Hour))
		if _, err := io.ReadAll(c); err != nil {
			t.Fatalf("an hour on, the receiver still holds a client that stopped sending its body: %v", err)
		}
	})
}

// TestReceiverPrintsRequestsEscaped: egrid receive prints what anyone who reaches --listen
// sent; the decoded path is quoted and the headers and body escaped, so none of it drives the
// terminal, while a JSON body stays as it was sent.
func TestReceiverPrintsRequestsEscaped(t *testing.T) {
	var out bytes.Buffer
	srv := httptest.NewServer(&receiver{out: &out, failStatus: 503, start: time.Now()})
	defer srv.Close()
	body := "[{\"id\":\"1\",\n\t\"data\":\"\x1b]0;PWNED\x07\u009b2J\"}]"
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/hook%1b%5d0;PWNED%07", strings.NewReader(body))
	req.Header.Set("aeg-event-type", "Notification\u009b2J")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	requireNoControls(t, "egrid receive", out.String())
	for _, want := range []string{`"/hook\x1b]0;PWNED\a"`, `aeg-event-type: Notification\u009b2J`, "[{\"id\":\"1\",\n\t\"data\":\"\\x1b]0;PWNED\\a\\u009b2J\"}]"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
