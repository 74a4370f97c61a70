package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The console's explain form in a real browser: what the operator types stays, focused, while
// the subscription page polls under it, and the event ids "." and "..", which a browser would
// drop from a URL's path, are explained.
func TestConsoleExplainFormInBrowser(t *testing.T) {
	ctx := newBrowser(t)
	srv := startServer(t, "--insecure-dev", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--allow-http-endpoints", "--egress-allow", "127.0.0.1")
	hook := newConsoleHook(t)
	createWebhookSubscription(t, srv.url, hook.URL+"/hook", 3)
	req, err := http.NewRequest(http.MethodPost, srv.url+"/topics/orders/api/events", strings.NewReader(string(eventsBody([]string{".", ".."}))))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("publish: %d", resp.StatusCode)
	}
	hook.await(t, "..")

	do := func(step string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		if err := chromedp.Do(rctx, steps...); err != nil {
			body, _ := chromedp.Run(rctx, chromedp.Text(chromedp.CSS("body")))
			t.Fatalf("%s: %v\npage text:\n%s", step, err, body)
		}
	}
	eval := func(js string) string {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		v, err := chromedp.Run(rctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("evaluating %s: %v", js, err)
		}
		return v
	}
	const input = `#explain-form input[name="id"]`
	// --insecure-dev without a token: the sign-in takes an empty one.
	do("sign in",
		chromedp.Navigate(srv.url+"/console/"),
		chromedp.WaitVisible(chromedp.CSS("#login")),
		chromedp.Click(chromedp.CSS(`#login button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#topics`)))
	do("open the subscription",
		chromedp.Navigate(srv.url+"/console/#/topics/orders/subscriptions/billing"),
		chromedp.WaitVisible(chromedp.CSS(`#attempts tr.attempt`)),
		chromedp.Click(chromedp.CSS(input)),
		chromedp.SendKeys(chromedp.CSS(input), "half-typ"))
	// Wait for the next poll to be done (the page counts them), whenever it comes.
	polls := eval(`document.getElementById("view").dataset.polls || "0"`)
	var n int
	if _, err := fmt.Sscan(polls, &n); err != nil {
		t.Fatalf("data-polls %q: %v", polls, err)
	}
	do("wait for a poll", chromedp.Poll[chromedp.Void](fmt.Sprintf(`Number(document.getElementById("view").dataset.polls || 0) >= %d`, n+2)))
	if got := eval(`document.querySelector('` + input + `').value`); got != "half-typ" {
		t.Errorf("after the page polled the explain input holds %q, want what was typed, half-typ", got)
	}
	if got := eval(`document.activeElement === document.querySelector('` + input + `') ? "focused" : "focus on " + (document.activeElement && document.activeElement.tagName)`); got != "focused" {
		t.Errorf("after the page polled the explain input is not focused: %s", got)
	}
	if got := eval(`document.querySelectorAll("#attempts tr.attempt").length > 0 ? "yes" : "no"`); got != "yes" {
		t.Errorf("after the poll the page shows no attempts")
	}

	for _, id := range []string{".", ".."} {
		do("explain "+id,
			chromedp.Navigate(srv.url+"/console/#/topics/orders/subscriptions/billing"),
			chromedp.WaitVisible(chromedp.CSS(input)),
			chromedp.SetValue(chromedp.CSS(input), id),
			chromedp.Click(chromedp.CSS(`#explain-form button[type="submit"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#explain-state, #explain-error`)))
		if got := eval(`document.getElementById("view").textContent`); !strings.Contains(got, "Explain "+id) || !strings.Contains(got, "Delivered") || strings.Contains(got, "answered 4") {
			t.Errorf("the explanation of %q shows %q, want it Delivered", id, got)
		}
	}
}
