package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// objectHold is a proxy in front of MinIO that, while armed, lets every object write land in
// MinIO but never answers it: the writer cannot know that its object exists. It reports the
// key of each write it holds.
type objectHold struct {
	*httptest.Server
	armed atomic.Bool
	held  chan string
}

func newObjectHold(t *testing.T, minioEndpoint string) *objectHold {
	target, err := url.Parse("http://" + minioEndpoint)
	if err != nil {
		t.Fatal(err)
	}
	// The default director keeps the request's Host header, which the client signed.
	proxy := httputil.NewSingleHostReverseProxy(target)
	h := &objectHold{held: make(chan string, 64)}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut || !strings.HasSuffix(r.URL.Path, ".json") || !h.armed.Load() {
			proxy.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		proxy.ServeHTTP(rec, r) // the object lands in MinIO
		if rec.Code/100 != 2 {
			t.Errorf("MinIO refused the held write of %s: %d %s", r.URL.Path, rec.Code, rec.Body)
		}
		select {
		case h.held <- r.URL.Path:
		default:
		}
		<-r.Context().Done() // no answer, until the writer is gone
	}))
	t.Cleanup(h.Close)
	return h
}

var recordsRE = regexp.MustCompile(`records=(\d+)`)

// Dead letters survive kill -9 exactly once: events end (one attempt) and are
// dead-lettered while the server is killed after its first object landed in MinIO but before
// it learnt so. The restarted server writes that object again under the same key and the other
// dead letters once: every event is in MinIO exactly once, in exactly one object.
func TestKill9WhileDeadLetteringWritesEachEndingOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: starts MinIO and kills the server; skipped with -short")
	}
	m := testkit.StartMinIO(t)
	hold := newObjectHold(t, m.Endpoint)
	hold.armed.Store(true)
	data := filepath.Join(t.TempDir(), "data")
	// Time runs 100 times faster: dead letters wait 1 s.
	args := []string{"--insecure-dev", "--data-dir", data, "--time-scale", "100", "--dead-letter-delay", "100s",
		"--minio-endpoint", strings.TrimPrefix(hold.URL, "http://"), "--minio-access-key", m.AccessKey, "--minio-secret-key", m.SecretKey}
	first := startLogged(t, nil, "", args...)
	server := "--server=" + first.url
	// 404 ends an event at its first attempt and puts the endpoint on a client-error probation,
	// during which the events that come due end without an attempt: all are dead-lettered
	// within moments.
	hook := newDeadLetterHook(t, http.StatusNotFound)
	for _, args := range [][]string{
		{"topic", "create", server, "--name", "orders"},
		{"event-subscription", "create", server, "--topic", "orders", "--name", "billing",
			"--endpoint", hook.URL, "--max-delivery-attempts", "1", "--deadletter-container", "dl-crash"},
	} {
		if code, out := cliRun(t, args...); code != 0 {
			t.Fatalf("egrid %s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
	}

	// 400 events in requests of 20, published while the first ones already end: at the kill
	// some are settled and in the outbox, some in an object that landed, some not yet tried.
	const total = 400
	var ids []string
	for i := range total {
		ids = append(ids, fmt.Sprintf("ev-%03d", i))
	}
	for i := 0; i < total; i += 20 {
		resp, err := http.Post(first.url+"/topics/orders/api/events?api-version=2018-01-01", "application/json", bytes.NewReader(eventsBody(ids[i:i+20])))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("publish: %d", resp.StatusCode)
		}
	}
	select {
	case key := <-hold.held:
		t.Logf("killing the server after %s landed", key)
	case <-time.After(60 * time.Second):
		t.Fatalf("no dead-letter object written within 60 s")
	}
	first.kill(t)
	hold.armed.Store(false)

	written := make(chan string, 1000)
	second := startLogged(t, written, "dead letters written", args...)
	n := 0
	deadline := time.After(90 * time.Second)
	for n < total {
		select {
		case line := <-written:
			mm := recordsRE.FindStringSubmatch(line)
			if mm == nil {
				t.Fatalf("log line without a record count: %s", line)
			}
			k, _ := strconv.Atoi(mm[1])
			n += k
		case <-deadline:
			t.Fatalf("the restarted server wrote %d dead letters within 90 s, want %d", n, total)
		}
	}
	if n != total {
		t.Errorf("the restarted server wrote %d dead letters, want %d", n, total)
	}

	ctx := context.Background()
	objs, err := m.Store().List(ctx, "dl-crash", sinks.ListQuery{Prefix: "BILLING/"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, o := range objs {
		body, _, err := m.Store().Get(ctx, "dl-crash", o.Key, 0)
		if err != nil {
			t.Fatal(err)
		}
		var recs []struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(body, &recs); err != nil {
			t.Fatalf("object %s: %v", o.Key, err)
		}
		for _, r := range recs {
			seen[r.ID]++
		}
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("%s is in MinIO %d times, want once", id, seen[id])
		}
		delete(seen, id)
	}
	for id, c := range seen {
		t.Errorf("%s is in MinIO %d times but was never published", id, c)
	}
	second.stop(t)
}
