package main

import (
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
)

func receiveCommand(e env) *cli.Command {
	return &cli.Command{
		Name:  "receive",
		Usage: "run a webhook endpoint that prints every delivery (for trying egrid out)",
		Description: `Listens on --listen and prints each request it receives: the aeg-* headers and the
body. It answers the Event Grid validation handshake (echoing validationCode) and the
CloudEvents OPTIONS handshake, so subscriptions to it validate. --fail-first N answers the first
N deliveries with --fail-status to watch the retry schedule.

Example:
   egrid receive --listen 127.0.0.1:9000
   egrid event-subscription create --topic orders --name printer --endpoint http://127.0.0.1:9000/`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Usage: "address to listen on", Value: "127.0.0.1:9000"},
			&cli.IntFlag{Name: "fail-first", Usage: "answer the first N deliveries with --fail-status"},
			&cli.IntFlag{Name: "fail-status", Usage: "status for failed deliveries", Value: http.StatusServiceUnavailable},
		},
		Action: func(c *cli.Context) error {
			ln, err := net.Listen("tcp", c.String("listen"))
			if err != nil {
				return cli.Exit(fmt.Sprintf("listening on %s: %v (use --listen)", c.String("listen"), err), 1)
			}
			h := &receiver{out: e.Stdout, failFirst: int64(c.Int("fail-first")), failStatus: c.Int("fail-status"), start: time.Now()}
			srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
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
	fmt.Fprintf(h.out, "--- +%s %s %s → %d %s\n", time.Since(h.start).Round(time.Millisecond), r.Method, r.URL.Path, status, note)
	for _, k := range names {
		fmt.Fprintf(h.out, "%s: %s\n", strings.ToLower(k), r.Header.Get(k))
	}
	fmt.Fprintf(h.out, "%s\n", body)
}
