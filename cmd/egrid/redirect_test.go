package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestCLIFollowsNoRedirect: a server that redirects the CLI elsewhere gets a clear error back,
// and the redirect's target gets no request: net/http would send it every custom header of the
// request, the topic key (aeg-sas-key) included, to another host too.
func TestCLIFollowsNoRedirect(t *testing.T) {
	var mu sync.Mutex
	var reached []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reached = append(reached, r.Method+" "+r.URL.Path+" aeg-sas-key="+r.Header.Get("aeg-sas-key"))
		mu.Unlock()
	}))
	defer other.Close()
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path+"?code=query-secret", http.StatusTemporaryRedirect)
	}))
	defer front.Close()

	server := "--server=" + front.URL
	for _, args := range [][]string{
		{"publish", server, "--topic", "orders", "--key", "topic-key", "--data", `{"id":"1"}`},
		{"receive", "--pull", server, "--topic", "orders", "--subscription", "s1", "--key", "topic-key", "--count", "1"},
		{"topic", "list", server, "--admin-token", "admin-token"},
		{"deadletter", "replay", server, "--admin-token", "admin-token", "--topic", "orders", "--subscription", "s1"},
	} {
		code, out := cliRun(t, args...)
		if code == 0 || !strings.Contains(out, "the server answered 307, redirecting to "+other.URL) || !strings.Contains(out, "egrid's API does not redirect") {
			t.Errorf("egrid %s: exit %d, %q; want the redirect refused, saying so", strings.Join(args[:2], " "), code, out)
		}
		if strings.Contains(out, "query-secret") {
			t.Errorf("egrid %s repeats the redirect's query string: %q", strings.Join(args[:2], " "), out)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, r := range reached {
		t.Errorf("the redirect's target got %s", r)
	}
}
