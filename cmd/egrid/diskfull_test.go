package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/testkit"
)

// gatedHook is a webhook endpoint that holds every notification until open is closed, then
// answers 200 and sends the event ids it got to ids.
func gatedHook(t *testing.T) (url string, open chan struct{}, ids <-chan string) {
	open = make(chan struct{})
	got := make(chan string, 1000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if answerHandshake(w, r) {
			return
		}
		var events []struct {
			ID string `json:"id"`
		}
		if err := json.NewDecoder(r.Body).Decode(&events); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		select {
		case <-open:
		case <-r.Context().Done():
			return
		}
		for _, e := range events {
			got <- e.ID
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		select {
		case <-open:
		default:
			close(open)
		}
	})
	return srv.URL + "/hook", open, got
}

// publishRefusal publishes events with the given ids to topic orders and returns the status
// and the Retry-After header.
func publishRefusal(t *testing.T, server string, ids []string) (int, string, string) {
	t.Helper()
	resp, err := http.Post(server+"/topics/orders/api/events?api-version=2018-01-01", "application/json", bytes.NewReader(eventsBody(ids)))
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(msg)
}

// TestDiskFullThroughTheBinary fills the disk under a running egrid (a 160 MiB tmpfs) with 99
// acknowledged events waiting for their endpoint: publishes are refused (507 with
// Retry-After, below the free-space floor and once pebble itself failed a write on the full
// disk alike), the stored events are all delivered anyway, GET /admin/health says what is
// wrong, and once the filler is removed publishes are accepted again without a restart. It
// logs how long that took (README, reliability).
func TestDiskFullThroughTheBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a tmpfs under the real binary; skipped with -short")
	}
	tests := []struct {
		name        string
		minFreeDisk string
		refused     int // the status publishes get on the full disk
	}{
		{name: "below the floor", minFreeDisk: "8MiB", refused: http.StatusInsufficientStorage},
		{name: "pebble fails a write", minFreeDisk: "0", refused: http.StatusInsufficientStorage}, // ENOSPC
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := testkit.Tmpfs(t, 160<<20)
			hook, open, delivered := gatedHook(t)
			srv := startServer(t, "--insecure-dev", "--data-dir", filepath.Join(dir, "data"), "--time-scale", "100", "--min-free-disk", tc.minFreeDisk)
			createWebhookSubscription(t, srv.url, hook, 30)

			want := map[string]bool{}
			for r := range 3 {
				ids := make([]string, 33)
				for i := range ids {
					ids[i] = fmt.Sprintf("stored-%d-%02d", r, i)
					want[ids[i]] = true
				}
				if status, _, msg := publishRefusal(t, srv.url, ids); status != http.StatusOK {
					t.Fatalf("publish before the disk is full: %d %s", status, msg)
				}
			}

			filler := testkit.FillDisk(t, dir)
			var status int
			var retryAfter, msg string
			for i := range 10_000 { // bounded; pebble may have room left in its preallocated log
				status, retryAfter, msg = publishRefusal(t, srv.url, []string{fmt.Sprintf("full-%d", i)})
				if status != http.StatusOK {
					break
				}
			}
			if status != tc.refused || retryAfter == "" {
				t.Fatalf("publish on a full disk: %d (Retry-After %q) %s; want %d with Retry-After", status, retryAfter, msg, tc.refused)
			}
			t.Logf("publish on a full disk: %d %s", status, msg)
			health := getJSON(t, srv.url+"/admin/health")
			if st := health["store"].(map[string]any); st["state"] == "healthy" || !strings.Contains(fmt.Sprint(st["reason"]), "free disk space") {
				t.Errorf("GET /admin/health on a full disk: %v, want the store not healthy, saying to free disk space", health)
			}

			close(open) // the endpoint answers now: the 99 stored events must all arrive
			deadline := time.After(60 * time.Second)
			for len(want) > 0 {
				select {
				case id := <-delivered:
					delete(want, id)
				case <-deadline:
					t.Fatalf("%d of 99 stored events not delivered on the full disk", len(want))
				}
			}

			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			freed := time.Now()
			accepted := false
			giveUp := time.After(60 * time.Second)
			for i := 0; !accepted; i++ {
				status, retryAfter, msg = publishRefusal(t, srv.url, []string{fmt.Sprintf("after-%d", i)})
				switch {
				case status == http.StatusOK:
					accepted = true
				case status == tc.refused || status == http.StatusServiceUnavailable:
					secs, _ := strconv.Atoi(retryAfter)
					select { // the client waits as Retry-After says
					case <-time.After(time.Duration(max(secs, 1)) * time.Second / 4):
					case <-giveUp:
						t.Fatalf("publishes still refused 60 s after space was freed: %d %s", status, msg)
					}
				default:
					t.Fatalf("publish after space was freed: %d %s", status, msg)
				}
			}
			t.Logf("publishes accepted again %v after space was freed", time.Since(freed).Round(time.Millisecond))
			if health := getJSON(t, srv.url+"/admin/health"); health["store"].(map[string]any)["state"] != "healthy" {
				t.Errorf("GET /admin/health after space was freed: %v, want healthy", health)
			}
			srv.stop(t)
		})
	}
}

var getMu sync.Mutex

// getJSON GETs url and decodes its JSON object, whatever the status.
func getJSON(t *testing.T, url string) map[string]any {
	t.Helper()
	getMu.Lock()
	defer getMu.Unlock()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	var v map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return v
}
