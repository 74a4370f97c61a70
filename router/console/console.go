package console

import (
	"container/list"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/devguard"
	"github.com/egridio/egrid/router/metrics"
)

//go:embed assets
var assets embed.FS

// Prefix is the path the console is served under.
const Prefix = "/console/"

// DefaultAttemptsPerSubscription is how many recent attempts an [Attempts] made by
// [NewAttempts] with n <= 0 keeps per subscription.
const DefaultAttemptsPerSubscription = 50

// EventsPerAttempt is how many of an attempt's events an [Attempts] keeps, in the order of the
// request body; [Attempt.MoreEvents] counts the others. A batch holds up to 5 000 events, and
// the console shows an attempt, not its whole body: [router.Router.Explain] has any event's
// story.
const EventsPerAttempt = 20

// DefaultMaxBytes bounds what an [Attempts] keeps across all subscriptions, counted as
// [attemptCost] counts it (the event ids' bytes, and a fixed share per event and per attempt):
// past it, the oldest attempts of the subscriptions that recorded least recently go first.
const DefaultMaxBytes = 16 << 20

// Attempts keeps the most recent delivery attempts of every subscription, newest last, for
// the console's attempts view. Feed it from [router.Deps.OnAttempt] with [Attempts.Record],
// and give [router.Deps.OnSubscriptionDeleted] its [Attempts.Forget].
// It is safe for concurrent use; Record only copies the record under a short lock, so the
// delivery that reports it never waits on a reader.
//
// It holds at most [EventsPerAttempt] events of an attempt and [DefaultMaxBytes] in all. A
// deleted subscription's attempts are forgotten once its actor stops (Forget, from
// router.Deps.OnSubscriptionDeleted), so one created again under its name starts with none;
// a record of another epoch than the kept ones also starts afresh, and the console forgets
// the attempts of a subscription it finds deleted when they are asked for.
type Attempts struct {
	n        int
	maxBytes int
	mu       sync.Mutex
	by       map[string]*ring // "topic/subscription", lower case
	lru      list.List        // of *ring, the one that recorded least recently at the front
	bytes    int              // the cost of every attempt kept
}

// ring is one subscription's kept attempts, oldest first, of its epoch.
type ring struct {
	key      string
	epoch    uint64
	attempts []Attempt
	elem     *list.Element
}

// Attempt is one delivery attempt as the console shows it. It holds no endpoint, header or
// payload: only ids, counts, the outcome and the decisions.
type Attempt struct {
	Time       time.Time `json:"time"`
	DurationMs float64   `json:"durationMs"`
	Outcome    string    `json:"outcome"`
	StatusCode int       `json:"statusCode,omitempty"`
	Probe      bool      `json:"probe,omitempty"`
	NoAttempt  bool      `json:"noAttempt,omitempty"`
	// Events are the attempt's first [EventsPerAttempt] events; MoreEvents counts the others.
	Events     []Event `json:"events"`
	MoreEvents int     `json:"moreEvents,omitempty"`
}

// Event is one event of an [Attempt]: its id, the number of this attempt for it and what
// was decided ("Delivered", "Retry at …", "DeadLetter (reason)", "Drop (reason)").
type Event struct {
	ID       string `json:"id"`
	Attempt  int    `json:"attempt"`
	Decision string `json:"decision"`
}

// NewAttempts returns an Attempts that keeps the last n attempts per subscription
// ([DefaultAttemptsPerSubscription] when n <= 0), within [DefaultMaxBytes] in all.
func NewAttempts(n int) *Attempts {
	if n <= 0 {
		n = DefaultAttemptsPerSubscription
	}
	return &Attempts{n: n, maxBytes: DefaultMaxBytes, by: make(map[string]*ring)}
}

func attemptsKey(topic, sub string) string { return strings.ToLower(topic + "/" + sub) }

// attemptCost is what at counts against an Attempts' bound: its events' ids and decisions,
// plus a fixed share per event and per attempt for the rest of what they hold.
func attemptCost(at *Attempt) int {
	n := 128
	for _, ev := range at.Events {
		n += 64 + len(ev.ID) + len(ev.Decision)
	}
	return n
}

// Record keeps rec; it has the signature of [router.Deps.OnAttempt].
func (a *Attempts) Record(rec *router.AttemptRecord) {
	shown := min(len(rec.EventIDs), EventsPerAttempt)
	at := Attempt{
		Time: rec.Time, DurationMs: float64(rec.Duration.Microseconds()) / 1000, Outcome: rec.Outcome.String(),
		StatusCode: rec.StatusCode, Probe: rec.Probe, NoAttempt: rec.NoAttempt,
		Events: make([]Event, shown), MoreEvents: len(rec.EventIDs) - shown,
	}
	for i, id := range rec.EventIDs[:shown] {
		ev := Event{ID: strings.Clone(id), Decision: "Delivered"}
		if i < len(rec.Attempts) {
			ev.Attempt = rec.Attempts[i]
		}
		if i < len(rec.Decisions) && rec.Decisions[i].Action != 0 {
			ev.Decision = rec.Decisions[i].String()
		}
		at.Events[i] = ev
	}
	k := attemptsKey(rec.Topic, rec.Subscription)
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.by[k]
	if r != nil && r.epoch != rec.Epoch { // a subscription of the name since created again
		a.drop(r)
		r = nil
	}
	if r == nil {
		r = &ring{key: k, epoch: rec.Epoch}
		r.elem = a.lru.PushBack(r)
		a.by[k] = r
	}
	a.lru.MoveToBack(r.elem)
	r.attempts = append(r.attempts, at)
	a.bytes += attemptCost(&at)
	if len(r.attempts) > a.n {
		a.dropOldest(r)
	}
	for a.bytes > a.maxBytes && a.lru.Len() > 0 {
		a.dropOldest(a.lru.Front().Value.(*ring))
	}
}

// dropOldest drops r's oldest attempt, and r when that was its last.
func (a *Attempts) dropOldest(r *ring) {
	a.bytes -= attemptCost(&r.attempts[0])
	r.attempts[0] = Attempt{}
	r.attempts = r.attempts[1:]
	if len(r.attempts) == 0 {
		a.lru.Remove(r.elem)
		delete(a.by, r.key)
	}
}

// drop forgets r.
func (a *Attempts) drop(r *ring) {
	for _, at := range r.attempts {
		a.bytes -= attemptCost(&at)
	}
	a.lru.Remove(r.elem)
	delete(a.by, r.key)
}

// Forget drops the attempts kept of a subscription (the console calls it for one it finds
// deleted).
func (a *Attempts) Forget(topic, sub string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r := a.by[attemptsKey(topic, sub)]; r != nil {
		a.drop(r)
	}
}

// Recent returns the kept attempts of a subscription, newest first.
func (a *Attempts) Recent(topic, sub string) []Attempt {
	a.mu.Lock()
	var out []Attempt
	if r := a.by[attemptsKey(topic, sub)]; r != nil {
		out = slices.Clone(r.attempts)
	}
	a.mu.Unlock()
	slices.Reverse(out)
	if out == nil {
		out = []Attempt{}
	}
	return out
}

// Console serves the web console; build it with [New]. It is an [http.Handler] that expects
// the full request path (mount it at [Prefix] without stripping it).
type Console struct {
	r        *router.Router
	attempts *Attempts
	cfg      router.Config
	mux      *http.ServeMux
}

// New returns the console of r. attempts is what r's Deps.OnAttempt feeds; nil shows no
// attempts.
func New(r *router.Router, attempts *Attempts) *Console {
	if attempts == nil {
		attempts = NewAttempts(0)
	}
	c := &Console{r: r, attempts: attempts, cfg: r.Config(), mux: http.NewServeMux()}
	static, _ := fs.Sub(assets, "assets")
	files := http.StripPrefix(Prefix, http.FileServerFS(static))
	c.mux.HandleFunc("GET "+Prefix, func(w http.ResponseWriter, req *http.Request) {
		name := strings.TrimPrefix(req.URL.Path, Prefix)
		if st, err := fs.Stat(static, name); name != "" && (err != nil || st.IsDir()) {
			notFound(w, req)
			return
		}
		files.ServeHTTP(w, req)
	})
	// Every other request under the prefix: a method no route takes, or a path none has.
	c.mux.HandleFunc(Prefix, func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "the console's routes take GET only")
			return
		}
		notFound(w, req)
	})
	c.mux.HandleFunc("GET /console", func(w http.ResponseWriter, req *http.Request) {
		http.Redirect(w, req, Prefix, http.StatusMovedPermanently)
	})
	c.mux.HandleFunc("GET "+Prefix+"api/attempts/{topic}/{subscription}", c.admin(c.getAttempts))
	c.mux.HandleFunc("GET "+Prefix+"api/counters", c.admin(c.getCounters))
	return c
}

// notFound answers a console path that names no page, asset or route, with Event Grid's
// error body as the admin API answers an unknown route.
func notFound(w http.ResponseWriter, req *http.Request) {
	p := req.URL.Path
	if len(p) > 256 {
		p = p[:256] + "…"
	}
	writeError(w, http.StatusNotFound, "NotFound", "no console route for "+req.Method+" "+p+
		": the console is at "+Prefix+", its data routes are "+Prefix+"api/attempts/{topic}/{subscription} and "+Prefix+"api/counters")
}

// ServeHTTP serves one request, with headers that keep the page to its own scripts and out
// of frames and caches.
func (c *Console) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	c.mux.ServeHTTP(w, req)
}

// admin checks the bearer token exactly as the admin API does: a configured token is always
// required, and --insecure-dev only opens a server that has none, and only to this machine's
// own programs ([devguard.Check]).
func (c *Console) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		if c.cfg.InsecureDev && c.cfg.AdminToken == "" {
			if err := devguard.Check(req, c.cfg.PublicURL); err != nil {
				writeError(w, http.StatusForbidden, "Forbidden", err.Error())
				return
			}
		} else {
			if c.cfg.AdminToken == "" {
				writeError(w, http.StatusForbidden, "Forbidden", "the admin API is disabled: set adminToken in the server config (or run with --insecure-dev for local development)")
				return
			}
			got, ok := devguard.BearerToken(req)
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(c.cfg.AdminToken)) != 1 {
				writeError(w, http.StatusUnauthorized, "Unauthorized", "the admin API needs Authorization: Bearer <adminToken from the server config>")
				return
			}
		}
		h(w, req)
	}
}

func (c *Console) getAttempts(w http.ResponseWriter, req *http.Request) {
	topic, sub := req.PathValue("topic"), req.PathValue("subscription")
	if _, err := c.r.Subscription(topic, sub); err != nil {
		if errors.Is(err, router.ErrSubscriptionNotFound) || errors.Is(err, router.ErrTopicNotFound) {
			c.attempts.Forget(topic, sub) // deleted: its attempts are no use to anyone
		}
		writeError(w, http.StatusNotFound, "NotFound", err.Error())
		return
	}
	writeJSON(w, map[string]any{"value": c.attempts.Recent(topic, sub)})
}

// counter is one counter of the router's metrics set.
type counter struct {
	Name  string `json:"name"`
	Scope string `json:"scope"`
	Dim   string `json:"dim,omitempty"`
	Value int64  `json:"value"`
}

// getCounters answers the router's counters, for the page to chart rates from successive
// reads.
func (c *Console) getCounters(w http.ResponseWriter, _ *http.Request) {
	snap := c.r.Metrics().Snapshot()
	out := make([]counter, 0, len(snap))
	for _, k := range snap.Keys() {
		if k.Name == metrics.DestinationProcessingDurationInMs {
			continue // a sum of durations, not a rate
		}
		out = append(out, counter{Name: k.Name, Scope: k.Scope, Dim: k.Dim, Value: snap[k]})
	}
	writeJSON(w, map[string]any{"time": c.r.Now(), "value": out})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers Event Grid's error body, as the admin API does.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
}
