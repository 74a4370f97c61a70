package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpserver"
	"github.com/egridio/egrid/schemas"
)

func receiveCommand(e env) *cli.Command {
	return &cli.Command{
		Name:  "receive",
		Usage: "run a webhook endpoint that prints every delivery, or pull from a queue subscription (for trying egrid out)",
		Description: `Listens on --listen and prints each request it receives: the aeg-* headers and the
body. It answers the Event Grid validation handshake (echoing validationCode) and the
CloudEvents OPTIONS handshake, so subscriptions to it validate. --fail-first N answers the first
N deliveries with --fail-status to watch the retry schedule.

With --pull it is a consumer of a queue subscription instead (--delivery-mode queue on a
namespace topic): it receives up to --max-events events at a time (a long poll of up to
--max-wait-time seconds), prints each with its delivery count and lock token, and acknowledges
them, until --count events have come (0: until interrupted). It authenticates with the topic
key, as egrid publish does.

Examples:
   egrid receive --listen 127.0.0.1:9000
   egrid event-subscription create --topic orders --name printer --endpoint http://127.0.0.1:9000/

   egrid event-subscription create --topic ns-orders --name workers --delivery-mode queue
   egrid receive --pull --topic ns-orders --subscription workers --key "$KEY" --max-events 10`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Usage: "address to listen on", Value: "127.0.0.1:9000"},
			&cli.IntFlag{Name: "fail-first", Usage: "answer the first N deliveries with --fail-status"},
			&cli.IntFlag{Name: "fail-status", Usage: "status for failed deliveries", Value: http.StatusServiceUnavailable},
			&cli.BoolFlag{Name: "pull", Usage: "pull from a queue subscription instead of listening (needs --topic and --subscription)"},
			&cli.StringFlag{Name: "server", Usage: "--pull: egrid server URL (env EGRID_SERVER)", Value: "http://" + defaultListen},
			&cli.StringFlag{Name: "topic", Usage: "--pull: the namespace topic"},
			&cli.StringFlag{Name: "subscription", Usage: "--pull: the queue event subscription"},
			&cli.StringFlag{Name: "key", Usage: "--pull: topic key, sent as aeg-sas-key (env EGRID_TOPIC_KEY); omit against --insecure-dev servers"},
			&cli.IntFlag{Name: "max-events", Usage: "--pull: events per receive, 1-100", Value: 10},
			&cli.IntFlag{Name: "max-wait-time", Usage: "--pull: seconds a receive waits for a first event, 10-120", Value: 60},
			&cli.IntFlag{Name: "count", Usage: "--pull: stop after this many events (0: until interrupted)"},
		},
		Action: func(c *cli.Context) error {
			if c.Bool("pull") {
				return pullReceive(c, e)
			}
			ln, err := net.Listen("tcp", c.String("listen"))
			if err != nil {
				return cli.Exit(fmt.Sprintf("listening on %s: %v (use --listen)", c.String("listen"), err), 1)
			}
			h := &receiver{out: e.Stdout, failFirst: int64(c.Int("fail-first")), failStatus: c.Int("fail-status"), start: time.Now()}
			srv := receiverServer(h)
			fmt.Fprintf(e.Stderr, "receiving on http://%s/\n", ln.Addr())
			go func() {
				<-c.Context.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(ctx)
			}()
			if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
				return err
			}
			return nil
		},
	}
}

// receiverServer is the HTTP server of egrid receive: h within the bounds egrid's own server
// has on header, body and idle time and header size (package httpserver), so a client that
// stalls does not hold a connection and a handler for ever.
func receiverServer(h http.Handler) *http.Server {
	return httpserver.New(httpserver.Config{}, h, httpserver.Requests{}, nil)
}

// receiver prints deliveries and answers the validation handshakes.
type receiver struct {
	out        io.Writer
	mu         sync.Mutex
	n          atomic.Int64
	failFirst  int64
	failStatus int
	start      time.Time
}

func (h *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodOptions { // CloudEvents abuse protection
		if origin := r.Header.Get("WebHook-Request-Origin"); origin != "" {
			w.Header().Set("WebHook-Allowed-Origin", origin)
			w.Header().Set("Allow", "POST")
		}
		return
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if r.Header.Get("aeg-event-type") == "SubscriptionValidation" {
		var evs []struct {
			Data struct {
				ValidationCode string `json:"validationCode"`
			} `json:"data"`
		}
		if json.Unmarshal(body, &evs) == nil && len(evs) > 0 {
			h.print(r, body, http.StatusOK, "validation handshake answered")
			_ = json.NewEncoder(w).Encode(map[string]string{"validationResponse": evs[0].Data.ValidationCode})
			return
		}
	}
	status := http.StatusOK
	if h.n.Add(1) <= h.failFirst {
		status = h.failStatus
	}
	h.print(r, body, status, "")
	w.WriteHeader(status)
}

func (h *receiver) print(r *http.Request, body []byte, status int, note string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var names []string
	for k := range r.Header {
		if lk := strings.ToLower(k); strings.HasPrefix(lk, "aeg-") || lk == "content-type" || lk == "traceparent" {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	// Anyone who reaches --listen chooses the path, the headers and the body: the path
	// (decoded, so %1b is ESC) is quoted, the rest goes through termSafe, so none of it
	// drives the terminal. The body's newlines and tabs are kept: pretty JSON stays readable.
	fmt.Fprintf(h.out, "--- +%s %s %q → %d %s\n", time.Since(h.start).Round(time.Millisecond), termSafe(r.Method), r.URL.Path, status, note)
	for _, k := range names {
		fmt.Fprintf(h.out, "%s: %s\n", termSafe(strings.ToLower(k)), termSafe(r.Header.Get(k)))
	}
	fmt.Fprintf(h.out, "%s\n", termSafeText(string(body)))
}

// pullReceive consumes a queue subscription from the terminal: receive, print, acknowledge.
// An interrupt ends it between requests or during a long poll; events received by a poll the
// interrupt cut short stay locked until their lock expires, then are redelivered.
func pullReceive(c *cli.Context, e env) error {
	var missing []string
	for _, f := range []string{"topic", "subscription"} {
		if c.String(f) == "" {
			missing = append(missing, "--"+f)
		}
	}
	if len(missing) > 0 {
		return cli.Exit("receive --pull needs "+strings.Join(missing, " and ")+": the namespace topic and its queue event subscription", 2)
	}
	maxEvents, maxWait, count := c.Int("max-events"), c.Int("max-wait-time"), c.Int("count")
	if maxEvents < 1 || maxEvents > router.MaxReceiveEvents {
		return cli.Exit(fmt.Sprintf("--max-events %d: use 1-%d", maxEvents, router.MaxReceiveEvents), 2)
	}
	if lo, hi := int(router.MinReceiveWait/time.Second), int(router.MaxReceiveWait/time.Second); maxWait < lo || maxWait > hi {
		return cli.Exit(fmt.Sprintf("--max-wait-time %d: use %d-%d seconds", maxWait, lo, hi), 2)
	}
	if count < 0 {
		return cli.Exit(fmt.Sprintf("--count %d: use 0 (until interrupted) or more", count), 2)
	}
	cl := newClient(c, e)
	cl.http.Timeout = time.Duration(maxWait)*time.Second + 30*time.Second // the long poll, and then some
	key := c.String("key")
	if key == "" {
		key = e.Getenv("EGRID_TOPIC_KEY")
	}
	base := cl.server + "/topics/" + pathSegment(c.String("topic")) + "/eventsubscriptions/" + pathSegment(c.String("subscription"))
	p := &puller{cl: cl, key: key, base: base}
	fmt.Fprintf(e.Stderr, "pulling from %s (Ctrl-C stops)\n", base)
	start, got := time.Now(), 0
	for count == 0 || got < count {
		n := maxEvents
		if count > 0 && count-got < n {
			n = count - got
		}
		var res struct {
			Value []struct {
				BrokerProperties struct {
					LockToken     string `json:"lockToken"`
					DeliveryCount int    `json:"deliveryCount"`
				} `json:"brokerProperties"`
				Event json.RawMessage `json:"event"`
			} `json:"value"`
		}
		err := p.post(c.Context, fmt.Sprintf(":receive?api-version=%s&maxEvents=%d&maxWaitTime=%d", pullAPIVersion, n, maxWait), nil, &res, maxReceiveAnswer(n))
		if c.Context.Err() != nil {
			return nil // interrupted
		}
		if err != nil {
			return err
		}
		tokens := make([]string, 0, len(res.Value))
		for _, v := range res.Value {
			got++
			fmt.Fprintf(e.Stdout, "--- +%s event %d deliveryCount=%d lockToken=%s\n%s\n", time.Since(start).Round(time.Millisecond), got, v.BrokerProperties.DeliveryCount, termSafe(v.BrokerProperties.LockToken), termSafeText(string(v.Event)))
			tokens = append(tokens, v.BrokerProperties.LockToken)
		}
		if len(tokens) == 0 {
			continue
		}
		var ack struct {
			Failed []struct {
				LockToken string `json:"lockToken"`
				Error     struct {
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			} `json:"failedLockTokens"`
			Succeeded []string `json:"succeededLockTokens"`
		}
		// Acknowledge even when interrupted meanwhile: the events were printed.
		if err := p.post(context.WithoutCancel(c.Context), ":acknowledge?api-version="+pullAPIVersion, map[string][]string{"lockTokens": tokens}, &ack, maxSettleAnswer); err != nil {
			return err
		}
		for _, f := range ack.Failed {
			fmt.Fprintf(e.Stderr, "not acknowledged: %s: %s %s (it will be delivered again)\n", termSafe(f.LockToken), termSafe(f.Error.Code), termSafe(f.Error.Message))
		}
		fmt.Fprintf(e.Stderr, "acknowledged %d of %d\n", len(ack.Succeeded), len(tokens))
	}
	return nil
}

// pullAPIVersion is the api-version egrid receive --pull sends: the newest the namespace
// TypeSpec defines, as the Azure SDKs send it.
const pullAPIVersion = "2024-06-01"

// puller sends the pull operations of one queue subscription with the topic key.
type puller struct {
	cl   *client
	key  string
	base string
}

// maxReceiveAnswer is the largest answer a :receive of up to maxEvents events can have. An
// event took at most schemas.NamespaceLimits.MaxEventBytes (1 MB) of its publish request, data
// and attribute values together, and takes at most twice that in its structured form: a
// binary-mode body grows by a third as data_base64, or at most doubles as a JSON string (text
// that escaping would more than double is kept as data_base64), and JSON escaping at most
// doubles an attribute value. On top come its
// attribute names (headers of the publish: 64 KB by default), its lock token and
// brokerProperties. For 100 events that is about 207 MB.
func maxReceiveAnswer(maxEvents int) int64 {
	perEvent := 2*int64(schemas.NamespaceLimits.MaxEventBytes) + httpserver.DefaultMaxHeaderBytes + 1<<10
	return int64(maxEvents)*perEvent + 1<<10
}

// maxSettleAnswer bounds the answer of a settle operation: up to router.MaxLockTokens tokens,
// each with an error code and message when it failed.
const maxSettleAnswer = 1 << 20

// post sends one operation (op holds its query) and decodes the answer, at most limit bytes,
// into out. A longer answer is an error: it is not one an egrid server or Event Grid sends.
func (p *puller) post(ctx context.Context, op string, body any, out any, limit int64) error {
	var rd io.Reader = http.NoBody
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.base+op, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if p.key != "" {
		req.Header.Set("aeg-sas-key", p.key)
	}
	resp, err := p.cl.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return cli.Exit(fmt.Sprintf("calling %s: %v (is `egrid serve` running? use --server)", p.cl.server, err), 1)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return cli.Exit(fmt.Sprintf("reading the answer of %s: %v (retry; events received and not acknowledged come back when their locks expire)", strings.SplitN(op, "?", 2)[0], err), 1)
	}
	if int64(len(raw)) > limit {
		return cli.Exit(fmt.Sprintf("the answer of %s is over %d bytes, the most it can take: is --server %s an egrid server or an Event Grid namespace? (if it takes larger events, use a smaller --max-events)", strings.SplitN(op, "?", 2)[0], limit, p.cl.server), 1)
	}
	if resp.StatusCode != http.StatusOK {
		return serverError(resp, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return cli.Exit(fmt.Sprintf("the answer of %s is not the JSON expected: %v", strings.SplitN(op, "?", 2)[0], err), 1)
	}
	return nil
}
