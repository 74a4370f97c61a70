package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
