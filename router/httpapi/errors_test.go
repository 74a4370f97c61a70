package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/sas"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
)

// eventGridError decodes Event Grid's error body, failing the test when the body is not one.
func eventGridError(t *testing.T, rec *httptest.ResponseRecorder) (code, message string) {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
		t.Fatalf("body %q is not Event Grid's error shape", rec.Body)
	}
	return e.Error.Code, e.Error.Message
}

// localRequest is httptest.NewRequest addressed as a program on the server's own machine
// addresses it (Host localhost:8080), which a server run with --insecure-dev lets in
// without credentials (package devguard); httptest's own Host, example.com, it does not.
func localRequest(method, target string, body io.Reader) *http.Request {
	req := httptest.NewRequest(method, target, body)
	req.Host = "localhost:8080"
	return req
}

func serve(h http.Handler, method, target, body string, header http.Header) *httptest.ResponseRecorder {
	req := localRequest(method, target, strings.NewReader(body))
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestUnroutedRequestsAnswerJSON: the mux's own 404 and 405 come in Event Grid's error shape,
// and a path with an empty or dot segment is a 404 too, never a redirect.
func TestUnroutedRequestsAnswerJSON(t *testing.T) {
	r, err := router.New(router.Config{InsecureDev: true}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	h := httpapi.New(r)
	for _, tt := range []struct {
		name, method, path string
		status             int
		code, allow        string
	}{
		{"unknown path", "GET", "/nope", 404, "NotFound", ""},
		{"unknown admin path", "GET", "/admin/nope", 404, "NotFound", ""},
		{"wrong method on publish", "GET", "/topics/orders/api/events", 405, "MethodNotAllowed", "POST"},
		{"wrong method on a topic", "PATCH", "/admin/topics/orders", 405, "MethodNotAllowed", "PUT"},
		// Not redirected to the plain path (307, plain text), as Go's ServeMux would.
		{"empty path segment", "POST", "/topics//orders/api/events", 404, "NotFound", ""},
		{"dot-dot path segment", "GET", "/admin/topics/x/../orders", 404, "NotFound", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := serve(h, tt.method, tt.path, "", nil)
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d", rec.Code, tt.status)
			}
			code, _ := eventGridError(t, rec)
			if code != tt.code {
				t.Errorf("code %q, want %q", code, tt.code)
			}
			if !strings.Contains(rec.Header().Get("Allow"), tt.allow) {
				t.Errorf("Allow %q, want it to list %s", rec.Header().Get("Allow"), tt.allow)
			}
		})
	}
}

// TestUnknownTopicAnswersLikeAWrongKey: without valid credentials an unknown topic cannot be
// told from a known one; --insecure-dev keeps the 404. The same request to a server that has
// the topic and to one that has not gets the same answer, byte for byte, on every data-plane
// route and for every form of credentials: names match ignoring case, and a message that
// repeated the topic's name as it was created ("orders" for /topics/ORDERS) told that it
// exists.
func TestUnknownTopicAnswersLikeAWrongKey(t *testing.T) {
	ctx := context.Background()
	r, err := router.New(router.Config{}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateTopic(ctx, "ns-orders", router.TopicSpec{Kind: router.KindNamespace}); err != nil {
		t.Fatal(err)
	}
	empty, err := router.New(router.Config{}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close(ctx)
	known, unknown := httpapi.New(r), httpapi.New(empty)

	wrongKey := "d3Jvbmc="
	token, err := sas.Sign("https://example.invalid/topics/ORDERS", time.Now().Add(time.Hour), wrongKey)
	if err != nil {
		t.Fatal(err)
	}
	event := `[{"id":"1","eventType":"t","subject":"s","eventTime":"2024-01-01T00:00:00Z","dataVersion":"1","data":{}}]`
	routes := []struct{ name, path, body string }{
		{"ORDERS", "/topics/ORDERS/api/events?api-version=2018-01-01", event},
		{"Ns-Orders", "/topics/Ns-Orders:publish?api-version=2023-11-01", `{"specversion":"1.0","id":"1","source":"/s","type":"t"}`},
		{"NS-ORDERS", "/topics/NS-ORDERS/eventsubscriptions/workers:receive?api-version=2023-11-01", ""},
		{"nS-oRdErS", "/topics/nS-oRdErS/eventsubscriptions/workers:acknowledge?api-version=2023-11-01", `{"lockTokens":["x"]}`},
	}
	for _, rt := range routes {
		for _, c := range []struct {
			creds  string
			query  string
			header http.Header
		}{
			{creds: "none"},
			{creds: "aeg-sas-key header", header: http.Header{"Aeg-Sas-Key": {wrongKey}}},
			{creds: "aeg-sas-key query", query: "&aeg-sas-key=d3Jvbmc%3D"},
			{creds: "aeg-sas-key query twice", query: "&aeg-sas-key=a&aeg-sas-key=b"},
			{creds: "aeg-sas-token", header: http.Header{"Aeg-Sas-Token": {token}}},
			{creds: "SharedAccessSignature", header: http.Header{"Authorization": {"SharedAccessSignature " + token}}},
			{creds: "SharedAccessKey", header: http.Header{"Authorization": {"SharedAccessKey " + wrongKey}}},
			{creds: "Bearer", header: http.Header{"Authorization": {"Bearer x"}}},
		} {
			header := http.Header{"Content-Type": {"application/json"}}
			for k, v := range c.header {
				header[k] = v
			}
			k := serve(known, "POST", rt.path+c.query, rt.body, header)
			u := serve(unknown, "POST", rt.path+c.query, rt.body, header)
			if k.Code != 401 || u.Code != 401 {
				t.Errorf("%s, credentials %s: known topic %d, unknown topic %d; want 401 for both", rt.path, c.creds, k.Code, u.Code)
				continue
			}
			_, msg := eventGridError(t, k)
			if k.Body.String() != u.Body.String() || k.Header().Get("Content-Type") != u.Header().Get("Content-Type") {
				t.Errorf("%s, credentials %s: the answers tell the topics apart:\n known:   %s\n unknown: %s", rt.path, c.creds, k.Body, u.Body)
			}
			if _, after, ok := strings.Cut(msg, "of topic "); ok {
				if named := strings.TrimRight(strings.Fields(after)[0], ":"); named != rt.name {
					t.Errorf("%s, credentials %s: %q names the topic %s; want it as the request wrote it, %s", rt.path, c.creds, msg, named, rt.name)
				}
			}
		}
	}

	dev, err := router.New(router.Config{InsecureDev: true}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close(ctx)
	rec := serve(httpapi.New(dev), "POST", "/topics/unknwn/api/events", event, http.Header{"Content-Type": {"application/json"}})
	if rec.Code != 404 {
		t.Errorf("--insecure-dev, unknown topic: %d, want 404", rec.Code)
	}
}

// failingStore fails every definition write and journal append with err, which names a
// file, as a disk store's would.
type failingStore struct {
	store.Store
	err error
}

var errDisk = errors.New("open /var/lib/egrid/secret-dir/000042.log: input/output error")

// errDiskFull is how the disk store refuses writes after a write failed on a full disk.
var errDiskFull = fmt.Errorf("disk store: a write to disk failed: %w: %w", store.ErrDiskFull,
	errors.New("write /var/lib/egrid/secret-dir/000042.log: no space left on device"))

func (f failingStore) PutTopic(context.Context, string, []byte) error    { return f.err }
func (f failingStore) CreateTopic(context.Context, string, []byte) error { return f.err }
func (f failingStore) PutSubscription(context.Context, string, string, []byte) error {
	return f.err
}
func (f failingStore) CreateSubscription(context.Context, string, string, []byte) error {
	return f.err
}
func (f failingStore) DeleteSubscription(context.Context, string, string) error { return f.err }
func (f failingStore) Append(context.Context, string, time.Time, []*schemas.Event) (uint64, error) {
	return 0, f.err
}

// TestStoreFailuresAre503WithoutPaths: an admin write the store refuses is a 503 with
// Retry-After, not a 400, and neither it nor a failed publish shows a server path. When the
// store refuses because a write failed on a full disk (store.ErrDiskFull), both are 507 with
// Retry-After, saying to free disk space.
func TestStoreFailuresAre503WithoutPaths(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemory()
	defer mem.Close()
	ok, err := router.New(router.Config{}, router.Deps{Store: mem})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ok.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	ok.Close(ctx)

	for _, tc := range []struct {
		name string
		err  error
		code int
		says string
	}{
		{name: "I/O error", err: errDisk, code: http.StatusServiceUnavailable, says: "retry later"},
		{name: "full disk", err: errDiskFull, code: http.StatusInsufficientStorage, says: "frees disk space"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := router.New(router.Config{AdminToken: "tok"}, router.Deps{Store: failingStore{mem, tc.err}, Sinks: nullSinks()})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close(ctx)
			if _, err := r.CreateTopic(ctx, "other", router.TopicSpec{}); !errors.Is(err, router.ErrUnavailable) {
				t.Errorf("CreateTopic on a failing store: %v, want ErrUnavailable", err)
			}
			h := httpapi.New(r)
			admin := http.Header{"Authorization": {"Bearer tok"}}
			spec, _ := r.Topic("orders")
			for _, tt := range []struct{ name, method, path, body string }{
				{"put topic", "PUT", "/admin/topics/orders", `{}`},
				{"put subscription", "PUT", "/admin/topics/orders/eventSubscriptions/sub-1", `{"properties":{"destination":{"endpointType":"Sink","properties":{"sinkName":"null"}}}}`},
			} {
				rec := serve(h, tt.method, tt.path, tt.body, admin)
				if rec.Code != tc.code || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), tc.says) {
					t.Errorf("%s: %d, Retry-After %q; want %d with Retry-After saying %q (%s)", tt.name, rec.Code, rec.Header().Get("Retry-After"), tc.code, tc.says, rec.Body)
				}
				if strings.Contains(rec.Body.String(), "/var/lib") {
					t.Errorf("%s: the body shows a server path: %s", tt.name, rec.Body)
				}
			}
			rec := serve(h, "POST", "/topics/orders/api/events", `[{"id":"1","eventType":"t","subject":"s","eventTime":"2024-01-01T00:00:00Z","dataVersion":"1","data":{}}]`,
				http.Header{"Content-Type": {"application/json"}, "Aeg-Sas-Key": {spec.Key1}})
			if rec.Code != tc.code || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), tc.says) || strings.Contains(rec.Body.String(), "/var/lib") {
				t.Errorf("publish on a failing store: %d (Retry-After %q) %s; want %d with Retry-After saying %q, without the server path", rec.Code, rec.Header().Get("Retry-After"), rec.Body, tc.code, tc.says)
			}
		})
	}
}

// damagedStore refuses every definition write as a disk store refuses a name its damaged
// stored definition holds.
type damagedStore struct{ store.Store }

var errDamagedDef = fmt.Errorf("topic \"orders\": its stored definition is damaged: delete the topic (egrid topic delete --name orders) and create it again: %w", store.ErrDamaged)

func (damagedStore) PutTopic(context.Context, string, []byte) error    { return errDamagedDef }
func (damagedStore) CreateTopic(context.Context, string, []byte) error { return errDamagedDef }
func (damagedStore) PutSubscription(context.Context, string, string, []byte) error {
	return errDamagedDef
}
func (damagedStore) CreateSubscription(context.Context, string, string, []byte) error {
	return errDamagedDef
}

// TestDamagedDefinitionIs409: creating a topic or subscription whose name a damaged stored
// definition holds answers 409 Conflict with the store's message (it says to delete it
// first), not a 503 that asks to retry what cannot succeed.
func TestDamagedDefinitionIs409(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemory()
	defer mem.Close()
	ok, err := router.New(router.Config{}, router.Deps{Store: mem})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ok.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	ok.Close(ctx)

	r, err := router.New(router.Config{AdminToken: "tok"}, router.Deps{Store: damagedStore{mem}, Sinks: nullSinks()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	h := httpapi.New(r)
	admin := http.Header{"Authorization": {"Bearer tok"}}
	for _, tt := range []struct{ name, method, path, body string }{
		{"put topic", "PUT", "/admin/topics/other", `{}`},
		{"put subscription", "PUT", "/admin/topics/orders/eventSubscriptions/sub-1", `{"properties":{"destination":{"endpointType":"Sink","properties":{"sinkName":"null"}}}}`},
	} {
		rec := serve(h, tt.method, tt.path, tt.body, admin)
		if rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), "delete the topic") {
			t.Errorf("%s: %d %s; want 409 saying to delete it first", tt.name, rec.Code, rec.Body)
		}
	}
}

// TestTopicEndpointTrustsOnlyLoopbackHosts: a topic read builds its endpoint from publicUrl,
// or from a loopback Host header; any other Host header is not echoed.
func TestTopicEndpointTrustsOnlyLoopbackHosts(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name, publicURL, host, want string
	}{
		{"untrusted host", "", "evil.example", "/topics/orders/api/events"},
		{"untrusted host with port", "", "evil.example:443", "/topics/orders/api/events"},
		{"loopback address", "", "127.0.0.1:8080", "http://127.0.0.1:8080/topics/orders/api/events"},
		{"loopback v6", "", "[::1]:8080", "http://[::1]:8080/topics/orders/api/events"},
		{"localhost", "", "localhost:8080", "http://localhost:8080/topics/orders/api/events"},
		{"publicUrl wins", "https://egrid.example.com/", "evil.example", "https://egrid.example.com/topics/orders/api/events"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := router.New(router.Config{AdminToken: "tok", PublicURL: tt.publicURL}, router.Deps{})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close(ctx)
			if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest("GET", "/admin/topics/orders", nil)
			req.Host = tt.host
			req.Header.Set("Authorization", "Bearer tok")
			rec := httptest.NewRecorder()
			httpapi.New(r).ServeHTTP(rec, req)
			var got struct {
				Properties struct{ Endpoint string }
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != 200 {
				t.Fatalf("GET topic: %d %s", rec.Code, rec.Body)
			}
			if got.Properties.Endpoint != tt.want {
				t.Errorf("endpoint %q, want %q", got.Properties.Endpoint, tt.want)
			}
		})
	}
}

// explainRouter is a router on mem (wrapped by wrap, when not nil) with the topic orders and
// its event subscription sub-1, for the explain tests; the router, then mem, close as the
// test ends.
func explainRouter(t *testing.T, mem *store.Memory, wrap func(store.Store) store.Store) *router.Router {
	t.Helper()
	ctx := context.Background()
	t.Cleanup(func() { mem.Close() })
	var st store.Store = mem
	if wrap != nil {
		st = wrap(mem)
	}
	r, err := router.New(router.Config{AdminToken: "tok"}, router.Deps{Store: st, Sinks: nullSinks()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(ctx) })
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateSubscription(ctx, "orders", "sub-1", router.SubscriptionSpec{Destination: router.SinkDestination("null")}); err != nil {
		t.Fatal(err)
	}
	return r
}

// historyFailingStore fails every read of a delivery history with an error naming a file.
type historyFailingStore struct{ store.Store }

func (historyFailingStore) History(context.Context, string, string, string, time.Time) (store.HistoryRecord, error) {
	return store.HistoryRecord{}, errDisk
}

// TestExplainOnAFailingStoreIs503WithoutPaths: an explain whose history the store cannot read
// is the server's problem: 503 with Retry-After, the store's error (a server path) in the log
// only — not a 400 telling the client its request was wrong, with the path in it.
func TestExplainOnAFailingStoreIs503WithoutPaths(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemory()
	r := explainRouter(t, mem, func(st store.Store) store.Store { return historyFailingStore{st} })
	if _, err := r.Explain(ctx, "orders", "sub-1", "e1"); !errors.Is(err, router.ErrUnavailable) {
		t.Errorf("Explain on a failing store: %v, want ErrUnavailable", err)
	}
	rec := serve(httpapi.New(r), "GET", "/admin/topics/orders/eventSubscriptions/sub-1/events/e1", "", http.Header{"Authorization": {"Bearer tok"}})
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Errorf("explain on a failing store: %d, Retry-After %q; want 503 with Retry-After (%s)", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	if _, msg := eventGridError(t, rec); !strings.Contains(msg, "retry later") {
		t.Errorf("message %q; want it to say to retry later", msg)
	}
	if strings.Contains(rec.Body.String(), "/var/lib") {
		t.Errorf("the answer shows a server path: %s", rec.Body)
	}
}

// historyDamagedStore fails every read of a delivery history as the disk store does for one
// in a damaged table block: an error wrapping disk.ErrCorrupt that names the data directory.
type historyDamagedStore struct{ store.Store }

func (historyDamagedStore) History(_ context.Context, topic, sub, id string, _ time.Time) (store.HistoryRecord, error) {
	return store.HistoryRecord{}, fmt.Errorf("%w: the delivery history of event %q of subscription %q of topic %q is in a damaged table block and cannot be read (pebble: corruption); egrid store check --data-dir /var/lib/egrid/secret-dir lists the damage",
		disk.ErrCorrupt, id, sub, topic)
}

// TestExplainOfAHistoryInADamagedBlockIs500: a delivery history the store finds in a damaged
// block is damage, not a store to retry: 500 saying the history is damaged and to run egrid
// store check, no Retry-After, the store's error (a server path) in the log only. Before, it
// was 503 "retry later", which could never help.
func TestExplainOfAHistoryInADamagedBlockIs500(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemory()
	r := explainRouter(t, mem, func(st store.Store) store.Store { return historyDamagedStore{st} })
	if _, err := r.Explain(ctx, "orders", "sub-1", "e1"); !errors.Is(err, router.ErrHistoryDamaged) || errors.Is(err, router.ErrUnavailable) {
		t.Errorf("Explain of a history in a damaged block: %v, want ErrHistoryDamaged, not ErrUnavailable", err)
	}
	rec := serve(httpapi.New(r), "GET", "/admin/topics/orders/eventSubscriptions/sub-1/events/e1", "", http.Header{"Authorization": {"Bearer tok"}})
	if rec.Code != http.StatusInternalServerError || rec.Header().Get("Retry-After") != "" {
		t.Errorf("explain of a history in a damaged block: %d, Retry-After %q (%s); want 500 without Retry-After", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	if _, msg := eventGridError(t, rec); !strings.Contains(msg, "delivery history is damaged") || !strings.Contains(msg, "egrid store check") || strings.Contains(msg, "retry") {
		t.Errorf("message %q; want it to say the history is damaged and to run egrid store check, not to retry", msg)
	}
	if strings.Contains(rec.Body.String(), "/var/lib") {
		t.Errorf("the answer shows a server path: %s", rec.Body)
	}
}

// TestExplainOfADamagedHistoryIs500: a stored delivery history that does not decode is the
// server's problem, not the request's: 500 saying what is damaged, where it answered 400 with
// the decoder's error as if the client had sent something wrong.
func TestExplainOfADamagedHistoryIs500(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemory()
	r := explainRouter(t, mem, nil)
	damaged := store.HistoryRecord{EventID: "e1", Expires: time.Now().Add(time.Hour), Payload: []byte("\x00not a history")}
	if err := mem.PutHistory(ctx, "orders", "sub-1", 0, []store.HistoryRecord{damaged}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Explain(ctx, "orders", "sub-1", "e1"); !errors.Is(err, router.ErrHistoryDamaged) {
		t.Errorf("Explain of a damaged history: %v, want ErrHistoryDamaged", err)
	}
	rec := serve(httpapi.New(r), "GET", "/admin/topics/orders/eventSubscriptions/sub-1/events/e1", "", http.Header{"Authorization": {"Bearer tok"}})
	if rec.Code != http.StatusInternalServerError {
		t.Errorf("explain of a damaged history: %d (%s); want 500", rec.Code, rec.Body)
	}
	if _, msg := eventGridError(t, rec); !strings.Contains(msg, "damaged") {
		t.Errorf("message %q; want it to say the history is damaged", msg)
	}
}

// subscriptionDamagedStore fails, while damaged is set, every write of a subscription's record
// as a store that finds the data it needs damaged does: an error wrapping disk.ErrCorrupt
// that names the data directory.
type subscriptionDamagedStore struct {
	store.Store
	damaged *atomic.Bool
}

func (s subscriptionDamagedStore) PutSubscription(ctx context.Context, topic, name string, spec []byte) error {
	if !s.damaged.Load() {
		return s.Store.PutSubscription(ctx, topic, name, spec)
	}
	return fmt.Errorf("%w: subscription %q of topic %q: a damaged table block (pebble: corruption); egrid store check --data-dir /var/lib/egrid/secret-dir lists the damage", disk.ErrCorrupt, name, topic)
}

func (s subscriptionDamagedStore) CreateSubscription(ctx context.Context, topic, name string, spec []byte) error {
	if !s.damaged.Load() {
		return s.Store.CreateSubscription(ctx, topic, name, spec)
	}
	return s.PutSubscription(ctx, topic, name, spec)
}

// TestAdminCallMeetingDamagedDataIs500: an admin call the store refuses because the data it
// needs is damaged (router.ErrStoreDamaged) is answered 500 saying the data is damaged and
// that retrying does not help, without Retry-After, the store's error (a server path) in the
// log only. Before, it was ErrUnavailable: 503 "retry later", which never helps.
func TestAdminCallMeetingDamagedDataIs500(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemory()
	var damaged atomic.Bool
	r := explainRouter(t, mem, func(st store.Store) store.Store { return subscriptionDamagedStore{st, &damaged} })
	damaged.Store(true)
	err := r.CreateSubscription(ctx, "orders", "sub-2", router.SubscriptionSpec{Destination: router.SinkDestination("null")})
	if !errors.Is(err, router.ErrStoreDamaged) || errors.Is(err, router.ErrUnavailable) {
		t.Errorf("CreateSubscription on damaged data: %v, want ErrStoreDamaged, not ErrUnavailable", err)
	}
	rec := serve(httpapi.New(r), "PUT", "/admin/topics/orders/eventSubscriptions/sub-2", `{"properties":{"destination":{"endpointType":"Sink","properties":{"sinkName":"null"}}}}`, http.Header{"Authorization": {"Bearer tok"}})
	if rec.Code != http.StatusInternalServerError || rec.Header().Get("Retry-After") != "" {
		t.Errorf("a create on damaged data: %d, Retry-After %q (%s); want 500 without Retry-After", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	if _, msg := eventGridError(t, rec); !strings.Contains(msg, "damaged") || !strings.Contains(msg, "retrying does not help") || !strings.Contains(msg, "server log") {
		t.Errorf("message %q; want it to say the data is damaged, that retrying does not help, and where the cause is", msg)
	}
	if strings.Contains(rec.Body.String(), "/var/lib") {
		t.Errorf("the answer shows a server path: %s", rec.Body)
	}
}

// journalClosedStore refuses appends as the disk store refuses them to a topic whose journal
// ends in a damaged table block reaching past it.
type journalClosedStore struct{ store.Store }

func (journalClosedStore) Append(context.Context, string, time.Time, []*schemas.Event) (uint64, error) {
	return 0, fmt.Errorf("appending to topic %q: %w", "orders", store.CorruptSentinel("disk store: corrupt: the topic's newest journal entries are in a damaged table block in /var/lib/egrid/secret-dir"))
}

// TestPublishToADamagedJournalSaysWhatToDo: a publish the store refuses because the topic's
// journal is damaged (store.ErrCorrupt, router.ErrStoreDamaged) answers 500 saying to delete the topic and create it
// again, or to restore a backup, without Retry-After or a server path. Before, it said "retry
// later", which cannot succeed; only the server's log said what to do.
func TestPublishToADamagedJournalSaysWhatToDo(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemory()
	defer mem.Close()
	r, err := router.New(router.Config{}, router.Deps{Store: journalClosedStore{mem}, Sinks: nullSinks()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	spec, _ := r.Topic("orders")
	rec := serve(httpapi.New(r), "POST", "/topics/orders/api/events", `[{"id":"1","eventType":"t","subject":"s","eventTime":"2024-01-01T00:00:00Z","dataVersion":"1","data":{}}]`,
		http.Header{"Content-Type": {"application/json"}, "Aeg-Sas-Key": {spec.Key1}})
	body := rec.Body.String()
	if rec.Code != http.StatusInternalServerError || rec.Header().Get("Retry-After") != "" || !strings.Contains(body, "delete the topic and create it again") ||
		!strings.Contains(body, "restore") || strings.Contains(body, "retry later") || strings.Contains(body, "/var/lib") {
		t.Errorf("publish to a damaged journal: %d (Retry-After %q) %s; want 500 saying to delete the topic or restore, without Retry-After or a server path", rec.Code, rec.Header().Get("Retry-After"), body)
	}
}
