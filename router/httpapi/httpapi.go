package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpserver"
	"github.com/egridio/egrid/schemas/clip"
)

// API serves a router's HTTP data plane and admin plane. Build it with [New]; it is an
// [http.Handler] safe for concurrent use.
type API struct {
	r   *router.Router
	cfg router.Config // InsecureDev, AdminToken, PublicURL, AnyAPIVersion
	log *slog.Logger
	mux http.Handler
	// polls is done once EndPolls was called: :receive long polls end with it.
	polls    context.Context
	endPolls context.CancelFunc
	// admitPoll, when set (AdmitPolls), takes a slot for a :receive about to wait.
	admitPoll func(w http.ResponseWriter, queue string) (release func(), ok bool)
	// admitBody, when set (AdmitBodies), takes a slot for a publish or settle about to read
	// its body.
	admitBody func(w http.ResponseWriter, req *http.Request) (release func(), ok bool)
}

// New returns the HTTP data plane and admin plane of r:
//
//	POST /topics/{topic}/api/events          classic publish (SPEC §1.1), api-version 2018-01-01; not to a namespace topic,
//	                                         nor in binary content mode (structured CloudEvents only)
//	POST /topics/{topic}:publish             namespace publish: structured, batch or binary CloudEvents,
//	                                         api-version 2023-11-01 or 2024-06-01
//	POST /topics/{topic}/eventsubscriptions/{sub}:receive|:acknowledge|:release|:reject|:renewLock
//	                                         pull delivery of a queue event subscription (pull.go),
//	                                         api-version 2023-11-01 or 2024-06-01
//	PUT|GET|DELETE /admin/topics/{topic}     topics, ARM-shaped bodies (SPEC §1.2)
//	GET /admin/topics
//	POST /admin/topics/{topic}/listKeys
//	PUT|GET|DELETE /admin/topics/{topic}/eventSubscriptions/{name}
//	                                         a GET adds deliveryState; {"loading": true, "loadingSince": …} while the
//	                                         subscription reads its stored state
//	GET /admin/topics/{topic}/eventSubscriptions
//	POST /admin/topics/{topic}/eventSubscriptions/{name}/endProbation
//	                                         503 with Retry-After while the subscription reads its stored state
//	GET /admin/topics/{topic}/eventSubscriptions/{name}/events/{id}, or …/events?id={id}
//	                                         an event's delivery history ([router.Router.Explain]); the query
//	                                         form carries the ids "." and ".." that a browser drops from a path
//	GET  /admin/health                       the store's health: 200 when healthy, else 503 (SPEC §6)
//	GET  /admin/deadLetters, GET|POST …/eventSubscriptions/{name}/deadLetters[/records|/replay]
//	GET  /eventsubscriptions/{name}/validate?id=..&token=..   validationUrl of a manual validation (SPEC §2.5; no admin token)
//
// A data-plane request without api-version is taken; one with a version its route does not
// take is a 400 (apiversion.go). It takes its settings from the router's config: InsecureDev,
// AdminToken, PublicURL and AnyAPIVersion.
// Mount it at the root of a server or under a prefix with http.StripPrefix. Every error it
// answers has Event Grid's JSON shape, the 404 and 405 of unknown routes and methods included.
// It never redirects: a path with an empty, "." or ".." segment is answered 404 naming its
// plain form ([httpserver.PlainPaths]), where Go's ServeMux would redirect to it. (net/http
// itself answers, in plain text and before any handler runs, a request whose header is over
// the server's MaxHeaderBytes (431) and one whose framing it cannot read: conflicting
// Content-Length headers (400), a Transfer-Encoding other than chunked (501). Those cannot be
// JSON.)
func New(r *router.Router) *API {
	a := &API{r: r, cfg: r.Config(), log: r.Logger()}
	a.polls, a.endPolls = context.WithCancel(context.Background())
	mux := http.NewServeMux()
	mux.HandleFunc("POST /topics/{topic}/api/events", a.handleClassicPublish)
	mux.HandleFunc("POST /topics/{topicAction}", a.handleNamespacePublish)
	mux.HandleFunc(pullPath, a.handlePull)
	a.adminRoutes(mux)
	a.mux = recoverPanics(limitPath(httpserver.PlainPaths(jsonErrors(mux))), a.log)
	return a
}

// MaxPathBytes bounds a request's path (percent-decoded). The longest path a route takes is an
// explain of a 1 024-byte event id, about 1.2 KB; answers echo names from the path (an unknown
// route, topic or event subscription), so a longer path only made longer answers — up to six
// times the path, JSON escaping '<' and '>' — and a client that does not read them kept them in
// the server's memory.
const MaxPathBytes = 2048

// Guard gives another handler served beside the API (the web console) what every route of
// the API has: a handler's panic answers 500 with Event Grid's error body and is logged with
// its stack (recoverPanics), a path over MaxPathBytes answers 414 before h sees it
// (limitPath), and a path with an empty, "." or ".." segment 404 ([httpserver.PlainPaths]).
func Guard(h http.Handler, log *slog.Logger) http.Handler {
	return recoverPanics(limitPath(httpserver.PlainPaths(h)), log)
}

// limitPath answers a request whose path is over MaxPathBytes with 414 URI Too Long and Event
// Grid's error body, before any route sees it.
func limitPath(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if n := len(req.URL.Path); n > MaxPathBytes {
			writeError(w, http.StatusRequestURITooLong, "RequestUriTooLong", fmt.Sprintf("the request path is %d bytes, over the limit of %d bytes: topic and event subscription names are at most 50 and 64 characters, event ids at most 1024 bytes; check the URL", n, MaxPathBytes))
			return
		}
		h.ServeHTTP(w, req)
	})
}

// ServeHTTP serves one request.
func (a *API) ServeHTTP(w http.ResponseWriter, req *http.Request) { a.mux.ServeHTTP(w, req) }

// recoverPanics answers a request whose handler panicked — a bug — with 500 and Event Grid's
// error body, and logs the panic with its stack, so the client learns that its request
// failed and should be retried instead of seeing its connection dropped without an answer
// (what net/http does with a panic). A panic after the answer's status was sent can no
// longer be answered: it aborts the response (http.ErrAbortHandler), so the client does not
// take a cut-off answer for a whole one. http.ErrAbortHandler itself passes through.
func recoverPanics(h http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		tw := &statusTracker{ResponseWriter: w}
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if p == http.ErrAbortHandler {
				panic(p)
			}
			if log != nil {
				log.Error("http handler panicked", "method", req.Method, "path", req.URL.Path, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			}
			if tw.wroteHeader {
				panic(http.ErrAbortHandler)
			}
			w.Header().Del("Content-Length")
			writeError(w, http.StatusInternalServerError, "InternalServerError", "the server failed serving this request (the server log has the cause): retry it; a publish answered this way may or may not have been accepted")
		}()
		h.ServeHTTP(tw, req)
	})
}

// statusTracker records whether a handler sent its answer's status.
type statusTracker struct {
	http.ResponseWriter
	wroteHeader bool
}

func (t *statusTracker) WriteHeader(status int) {
	t.wroteHeader = true
	t.ResponseWriter.WriteHeader(status)
}

func (t *statusTracker) Write(b []byte) (int, error) {
	t.wroteHeader = true
	return t.ResponseWriter.Write(b)
}

// Unwrap gives http.ResponseController the underlying writer (Flush, deadlines).
func (t *statusTracker) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// jsonErrors answers the requests mux has no route for — its own plain-text 404 and 405 —
// with Event Grid's error body, keeping the status and the Allow header.
func jsonErrors(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		h, pattern := mux.Handler(req)
		if pattern != "" {
			mux.ServeHTTP(w, req)
			return
		}
		probe := &statusProbe{header: make(http.Header)}
		h.ServeHTTP(probe, req)
		switch probe.status {
		case http.StatusMethodNotAllowed:
			if allow := probe.header.Get("Allow"); allow != "" {
				w.Header().Set("Allow", allow)
			}
			writeError(w, http.StatusMethodNotAllowed, "MethodNotAllowed", fmt.Sprintf("%s is not allowed on %s: use %s", clip.String(req.Method), clip.String(req.URL.Path), probe.header.Get("Allow")))
		case http.StatusNotFound, 0:
			writeError(w, http.StatusNotFound, "NotFound", fmt.Sprintf("no route for %s %s: publish to /topics/{topic}/api/events or /topics/{topic}:publish, pull from /topics/{topic}/eventsubscriptions/{name}:receive; the admin API is under /admin/topics", clip.String(req.Method), clip.String(req.URL.Path)))
		default: // a redirect the mux makes (a cleaned path): pass it on
			for k, v := range probe.header {
				w.Header()[k] = v
			}
			w.WriteHeader(probe.status)
		}
	})
}

// statusProbe records what the mux's own handler for an unrouted request answers.
type statusProbe struct {
	header http.Header
	status int
}

func (p *statusProbe) Header() http.Header { return p.header }
func (p *statusProbe) Write(b []byte) (int, error) {
	if p.status == 0 {
		p.status = http.StatusOK
	}
	return len(b), nil
}
func (p *statusProbe) WriteHeader(status int) {
	if p.status == 0 {
		p.status = status
	}
}

// apiError is Event Grid's error body.
type apiError struct {
	Error apiErrorBody `json:"error"`
}

type apiErrorBody struct {
	Code    string        `json:"code"`
	Message string        `json:"message"`
	Details []errorDetail `json:"details"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// writeError answers status with Event Grid's error body. Every answer has the same shape,
// Azure's documented one: code, message and details. An error without details of its own
// (a 401, a 413, ...) has one detail repeating its code and message, so a client reading
// error.details[0] finds the problem whatever the status.
func writeError(w http.ResponseWriter, status int, code, msg string, details ...errorDetail) {
	if len(details) == 0 {
		details = []errorDetail{{Code: code, Message: msg}}
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(apiError{Error: apiErrorBody{Code: code, Message: msg, Details: details}})
}

// flatten lists the errors an errors.Join holds, recursively.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}
