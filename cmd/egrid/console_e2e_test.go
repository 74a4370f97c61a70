package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/egridio/egrid/testkit"
)

// chromiumPath returns Debian's Chromium, installing it with apt-get when it is missing and
// the test runs as root. Without it the test fails under CI=true and is skipped otherwise.
func chromiumPath(t *testing.T) string {
	t.Helper()
	const path = "/usr/bin/chromium"
	if _, err := os.Stat(path); err == nil {
		return path
	}
	var why string
	if os.Geteuid() == 0 {
		install := func() error {
			out, err := exec.Command("apt-get", "install", "-y", "chromium").CombinedOutput()
			if err != nil {
				return fmt.Errorf("apt-get install -y chromium: %v\n%s", err, lastLines(string(out), 20))
			}
			return nil
		}
		err := install()
		if err != nil { // the package lists may be missing or stale
			if out, uerr := exec.Command("apt-get", "update").CombinedOutput(); uerr != nil {
				err = fmt.Errorf("apt-get update: %v\n%s", uerr, lastLines(string(out), 20))
			} else {
				err = install()
			}
		}
		if _, serr := os.Stat(path); err == nil && serr == nil {
			return path
		}
		why = fmt.Sprintf("installing chromium failed: %v", err)
	} else {
		why = "chromium is not installed and the test is not root, so it cannot apt-get install -y chromium"
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("the console browser test needs %s: %s", path, why)
	}
	t.Skipf("skipping the console browser test: %s (install it with apt-get install -y chromium)", why)
	return ""
}

// newBrowser starts headless Chromium with a fresh profile and returns a chromedp context.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 800),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// artifactsDir is where the test keeps its screenshots: $EGRID_ARTIFACTS when set, else a
// temporary directory.
func artifactsDir(t *testing.T) string {
	if d := os.Getenv("EGRID_ARTIFACTS"); d != "" {
		d = filepath.Join(d, t.Name())
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// consoleHook is a webhook that answers the validation handshake and every delivery with the
// status it currently holds, sending the ids it was sent.
type consoleHook struct {
	*httptest.Server
	status atomic.Int32
	ids    chan string
}

func newConsoleHook(t *testing.T) *consoleHook {
	h := &consoleHook{ids: make(chan string, 100)}
	h.status.Store(http.StatusOK)
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if answerHandshake(w, r) {
			return
		}
		body, _ := io.ReadAll(r.Body)
		var evs []struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(body, &evs)
		w.WriteHeader(int(h.status.Load()))
		for _, e := range evs {
			h.ids <- e.ID
		}
	}))
	t.Cleanup(h.Close)
	return h
}

// awaitAny waits for one delivery of any event.
func (h *consoleHook) awaitAny(t *testing.T) {
	t.Helper()
	select {
	case <-h.ids:
	case <-time.After(60 * time.Second):
		t.Fatalf("the endpoint received nothing within 60 s")
	}
}

func (h *consoleHook) await(t *testing.T, id string) {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case got := <-h.ids:
			if got == id {
				return
			}
		case <-timeout:
			t.Fatalf("the endpoint did not receive %s within 60 s", id)
		}
	}
}

// The web console in a real browser against the real binary: sign in with the admin token,
// see a delivery among a subscription's recent attempts, see the probation a failing endpoint
// causes and end it with the button, look up an event's explanation, and replay a dead letter
// with its progress; no page ever shows a secret.
func TestConsoleInBrowser(t *testing.T) {
	ctx := newBrowser(t)
	m := testkit.StartMinIO(t)
	const token = "console-admin-t0ken"
	srv := startServer(t, "--admin-token", token, "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--allow-http-endpoints", "--egress-allow", "127.0.0.1", // the test's webhooks are plain http on loopback
		"--minio-endpoint", m.Endpoint, "--minio-access-key", m.AccessKey, "--minio-secret-key", m.SecretKey,
		"--dead-letter-delay", "1s")
	artifacts := artifactsDir(t)

	admin := func(method, path, body string) []byte {
		t.Helper()
		req, err := http.NewRequest(method, srv.url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 2 {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, out)
		}
		return out
	}
	hook := newConsoleHook(t)
	admin(http.MethodPut, "/admin/topics/orders", `{"properties":{}}`)
	var keys struct{ Key1, Key2 string }
	if err := json.Unmarshal(admin(http.MethodPost, "/admin/topics/orders/listKeys", ""), &keys); err != nil || keys.Key1 == "" {
		t.Fatalf("listKeys: %v %+v", err, keys)
	}
	// The secrets the console must never show: the endpoint's query string, a secret header,
	// the topic's keys and the admin token.
	secrets := []string{"s3cret-query", "s3cret-header", keys.Key1, keys.Key2, token}
	sub, _ := json.Marshal(map[string]any{"properties": map[string]any{
		"destination": map[string]any{"endpointType": "WebHook", "properties": map[string]any{
			"endpointUrl": hook.URL + "/hook?code=s3cret-query",
			"deliveryAttributeMappings": []map[string]any{{"name": "X-Api-Key", "type": "Static",
				"properties": map[string]any{"value": "s3cret-header", "isSecret": true}}},
		}},
		"retryPolicy":           map[string]any{"maxDeliveryAttempts": 1, "eventTimeToLiveInMinutes": 1440},
		"deadLetterDestination": map[string]any{"endpointType": "StorageBlob", "properties": map[string]any{"blobContainerName": "dl-console"}},
	}})
	admin(http.MethodPut, "/admin/topics/orders/eventSubscriptions/billing", string(sub))
	// Dead-letter writes are announced on the system topic egrid-deadletters.
	notified := newConsoleHook(t)
	admin(http.MethodPut, "/admin/topics/egrid-deadletters/eventSubscriptions/on-dead-letters",
		`{"properties":{"destination":{"endpointType":"WebHook","properties":{"endpointUrl":"`+notified.URL+`"}}}}`)
	publish := func(id string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.url+"/topics/orders/api/events", strings.NewReader(string(eventsBody([]string{id}))))
		req.Header.Set("aeg-sas-key", keys.Key1)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("publish %s: %d", id, resp.StatusCode)
		}
	}
	publish("e1")
	hook.await(t, "e1")

	// run runs browser actions with a bound, saving a screenshot of the page when they fail.
	shot := 0
	screenshot := func(name string) string {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		png, err := chromedp.Run(sctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Logf("screenshot %s: %v", name, err)
			return ""
		}
		shot++
		path := filepath.Join(artifacts, fmt.Sprintf("%02d-%s.png", shot, name))
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	var pages []string // the HTML of every page the test saw, checked for secrets at the end
	failed := func(step string, err error) {
		t.Helper()
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		body, _ := chromedp.Run(tctx, chromedp.Text(chromedp.CSS("body")))
		t.Fatalf("%s: %v\nscreenshot: %s\npage text:\n%s", step, err, screenshot("failed-"+strings.ReplaceAll(step, " ", "-")), body)
	}
	run := func(step string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		if err := chromedp.Do(rctx, steps...); err != nil {
			failed(step, err)
		}
		html, err := chromedp.Run(rctx, chromedp.OuterHTML(chromedp.CSS("html")))
		if err != nil {
			failed(step, err)
		}
		pages = append(pages, html)
	}
	text := func(sel string) string {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		s, err := chromedp.Run(rctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			failed("read "+sel, err)
		}
		return s
	}

	// Signing in with a wrong token shows the API's answer as it is, and the form again.
	run("wrong token",
		chromedp.Navigate(srv.url+"/console/"),
		chromedp.WaitVisible(chromedp.CSS("#login")),
		chromedp.SendKeys(chromedp.CSS("#token"), "not-the-token"),
		chromedp.Click(chromedp.CSS(`#login button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#error")))
	if got := text("#error"); !strings.Contains(got, "401") || !strings.Contains(got, "Unauthorized") {
		t.Errorf("a wrong token shows %q, want the admin API's 401 Unauthorized answer", got)
	}

	// Signed in: the topics, then the subscription with the delivery among its attempts.
	run("sign in",
		chromedp.WaitVisible(chromedp.CSS("#login")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS(`#login button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#topics a[href="#/topics/orders"]`)))
	if got := text("#health"); !strings.Contains(got, "Store: healthy") {
		t.Errorf("the topics page shows %q, want the store healthy (GET /admin/health)", got)
	}
	run("open the subscription",
		chromedp.Click(chromedp.CSS(`#topics a[href="#/topics/orders"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#subscriptions tr[data-subscription="billing"] [data-probation="no"]`)),
		chromedp.Click(chromedp.CSS(`#subscriptions a[href="#/topics/orders/subscriptions/billing"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#attempts tr.attempt`)))
	if got := text("#attempts"); !strings.Contains(got, "e1") || !strings.Contains(got, "Delivered") {
		t.Errorf("attempts show %q, want e1 Delivered", got)
	}
	if got := text("#state"); !strings.Contains(got, "WebHook") || !strings.Contains(got, hook.URL+"/hook") {
		t.Errorf("the subscription's state shows %q, want the WebHook and its endpoint's base URL", got)
	}

	// The endpoint fails: e2 is dead-lettered (one attempt) and NotFound puts the endpoint on
	// probation, which the page shows on its next poll.
	hook.status.Store(http.StatusNotFound)
	publish("e2")
	hook.await(t, "e2")
	run("see probation", chromedp.WaitVisible(chromedp.CSS(`#probation button.end-probation`)))
	if got := text("#probation"); !strings.Contains(got, "NotFound") {
		t.Errorf("probation shows %q, want its cause NotFound", got)
	}
	if got := text("#attempts"); !strings.Contains(got, "e2") || !strings.Contains(got, "404") {
		t.Errorf("attempts show %q, want e2's failed attempt with 404", got)
	}
	screenshot("probation")
	hook.status.Store(http.StatusOK)
	run("end probation",
		chromedp.Click(chromedp.CSS(`#probation button.end-probation`)),
		chromedp.WaitVisible(chromedp.CSS(`#probation [data-probation="no"]`)))
	var state struct {
		Properties struct {
			DeliveryState struct{ Probation bool } `json:"deliveryState"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(admin(http.MethodGet, "/admin/topics/orders/eventSubscriptions/billing", ""), &state); err != nil || state.Properties.DeliveryState.Probation {
		t.Errorf("after the button the admin API says probation=%v (%v), want it ended", state.Properties.DeliveryState.Probation, err)
	}

	// The explanation of e2, rendered: its state, and its one attempt with the outcome, the
	// status and the rule that ended the delivery; the API's answer stays below as raw JSON.
	run("explain",
		chromedp.SendKeys(chromedp.CSS(`#explain-form input[name="id"]`), "e2"),
		chromedp.Click(chromedp.CSS(`#explain-form button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#explain #explain-attempts tr.explained-attempt, #explain-error`)))
	if got := text(`#view`); !strings.Contains(got, "Explain e2") || strings.Contains(got, "GET /admin/") { // an API error shows its request
		t.Fatalf("the explain view shows %q, want e2's explanation", got)
	}
	if got := text(`#explain-state`); !strings.Contains(got, "DeadLettered") {
		t.Errorf("the explain view's state shows %q, want DeadLettered", got)
	}
	attempt := text(`#explain-attempts tr.explained-attempt`)
	if rule := text(`#explain-attempts tr.explained-attempt td.explanation`); !strings.Contains(rule, "404") {
		t.Errorf("e2's attempt's decision shows %q, want the rule text of its 404", rule)
	}
	if !strings.Contains(attempt, "NotFound") || !strings.Contains(attempt, "404") {
		t.Errorf("e2's attempt shows %q, want its outcome NotFound and status 404", attempt)
	}
	if got := text(`#explain-raw summary`); got != "raw JSON" {
		t.Errorf("the explain view's raw JSON toggle shows %q", got)
	}
	screenshot("explain")

	// The dead letter, once written and announced, is listed; Replay delivers it again and shows its summary.
	notified.awaitAny(t)
	run("dead letters",
		chromedp.Navigate(srv.url+"/console/#/topics/orders/subscriptions/billing/deadLetters"),
		chromedp.WaitVisible(chromedp.CSS(`#dead-letters tr.dead-letter`)))
	if got := text("#dead-letters"); !strings.Contains(got, "e2") || !strings.Contains(got, "404") {
		t.Errorf("dead letters show %q, want e2 with its last status 404", got)
	}
	run("replay",
		chromedp.Click(chromedp.CSS(`#replay`)),
		chromedp.WaitVisible(chromedp.CSS(`#replay-summary`)))
	if got := text("#replay-summary"); !strings.Contains(got, "replayed 1") || !strings.Contains(got, "delivered 1") {
		t.Errorf("the replay shows %q, want 1 replayed and delivered", got)
	}
	hook.await(t, "e2")
	screenshot("replay")

	// Topics with their publish rate, for the README.
	run("topics",
		chromedp.Navigate(srv.url+"/console/#/topics/orders/subscriptions/billing"),
		chromedp.WaitVisible(chromedp.CSS(`#attempts tr.attempt`)))
	screenshot("subscription")

	for _, html := range pages {
		for _, s := range secrets {
			if strings.Contains(html, s) {
				t.Errorf("a console page shows the secret %q:\n%s", s, html)
			}
		}
	}
	t.Logf("screenshots in %s", artifacts)
}
