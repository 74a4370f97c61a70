package webhook_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/webhook"
)

// hostileStatus is a status line whose reason phrase is terminal escape sequences: set the
// window title (OSC 0, ended by BEL) and clear the screen (CSI 2J).
const hostileStatus = "503 \x1b]0;PWNED\x07\x1b[2J"

// hostileServer answers every request with the status line "HTTP/1.1 " + status, written on
// the raw connection, as net/http's own server never would.
func hostileServer(t *testing.T, status string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijacking: %v", err)
			return
		}
		defer conn.Close()
		_, _ = rw.WriteString("HTTP/1.1 " + status + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		_ = rw.Flush()
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestEndpointStatusIsQuoted: the reason phrase of an endpoint's status line is the endpoint's
// own text. The errors of a delivery and of the handshakes, which reach logs, the admin API,
// `egrid explain` and terminals, carry it quoted, its escape sequences shown and not obeyed;
// a plain status stays as it is.
func TestEndpointStatusIsQuoted(t *testing.T) {
	srv := hostileServer(t, hostileStatus)
	ctx := context.Background()
	errs := map[string]error{}
	errs["Deliver"] = newSink(t, webhook.Config{URL: srv.URL + "/hook"}, nil).Deliver(ctx, &sinks.Batch{Subscription: "s", Body: []byte(`[]`)})
	_, errs["ValidateSubscription"] = webhook.ValidateSubscription(ctx, nil, webhook.ValidationRequest{URL: srv.URL + "/hook", Code: "c"})
	_, errs["RequestDelivery"] = webhook.RequestDelivery(ctx, nil, webhook.AbuseProtectionRequest{URL: srv.URL + "/hook", Origin: "eventgrid.azure.net"})
	errs["NotifyDeletion"] = webhook.NotifyDeletion(ctx, nil, webhook.DeletionRequest{URL: srv.URL + "/hook", Subscription: "s"})
	for name, err := range errs {
		if err == nil {
			t.Errorf("%s against a 503: nil error", name)
			continue
		}
		if msg := err.Error(); strings.ContainsAny(msg, "\x1b\x07") || !strings.Contains(msg, `503 "\x1b]0;PWNED\a\x1b[2J"`) {
			t.Errorf("%s: error %q; want the status quoted, 503 %q", name, msg, "\x1b]0;PWNED\a\x1b[2J")
		}
	}

	plain := hostileServer(t, "503 Service Unavailable")
	err := newSink(t, webhook.Config{URL: plain.URL + "/hook"}, nil).Deliver(ctx, &sinks.Batch{Subscription: "s", Body: []byte(`[]`)})
	if err == nil || !strings.Contains(err.Error(), "answered 503 Service Unavailable") {
		t.Errorf("Deliver against a plain 503: %v; want the status as it is", err)
	}
}
