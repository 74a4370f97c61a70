package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/logattr"
)

// The ERRORs an admin call's failure logs carry the topic, the subscription and the event id
// of the call, as every line about them does: they carried only the error, so two events'
// damaged histories read alike and the log's flood guard folded them into one count.
func TestAdminErrorLogsNameWhatTheCallWasAbout(t *testing.T) {
	for _, cause := range []error{router.ErrStoreDamaged, router.ErrHistoryDamaged, router.ErrInsufficientStorage, router.ErrUnavailable} {
		var logs bytes.Buffer
		a := &API{log: slog.New(slog.NewJSONHandler(&logs, nil))}
		req := httptest.NewRequest("GET", "/admin/topics/orders/eventSubscriptions/audit/events/e1", nil)
		req.SetPathValue("topic", "orders")
		req.SetPathValue("name", "audit")
		req.SetPathValue("id", "e1")
		a.writeAdminError(httptest.NewRecorder(), req, fmt.Errorf("reading: %w", cause))
		var rec map[string]any
		if err := json.Unmarshal(logs.Bytes(), &rec); err != nil {
			t.Fatalf("%v: log %q: %v", cause, logs.String(), err)
		}
		if rec[logattr.Topic] != "orders" || rec[logattr.Subscription] != "audit" || rec[logattr.EventID] != "e1" {
			t.Errorf("%v: logged %s; want topic, subscription and eventId", cause, strings.TrimSpace(logs.String()))
		}
	}
}

// An explain call that names its event in the query (…/events?id=e1, the form for an id such
// as "." or "..") logged no event id: only the path's was read.
func TestAdminErrorLogsNameTheEventOfAnExplainByQuery(t *testing.T) {
	for _, c := range []struct{ target, want string }{
		{"/admin/topics/orders/eventSubscriptions/audit/events?id=e1", "e1"},
		{"/admin/topics/orders/eventSubscriptions/audit/events?id=..", ".."},
		{"/admin/topics/orders/eventSubscriptions/audit/events?id=a&id=b", ""}, // refused before any log; names none
	} {
		var logs bytes.Buffer
		a := &API{log: slog.New(slog.NewJSONHandler(&logs, nil))}
		req := httptest.NewRequest("GET", c.target, nil)
		req.Pattern = "GET /admin/topics/{topic}/eventSubscriptions/{name}/events"
		req.SetPathValue("topic", "orders")
		req.SetPathValue("name", "audit")
		a.writeAdminError(httptest.NewRecorder(), req, fmt.Errorf("reading: %w", router.ErrHistoryDamaged))
		var rec map[string]any
		if err := json.Unmarshal(logs.Bytes(), &rec); err != nil {
			t.Fatalf("%s: log %q: %v", c.target, logs.String(), err)
		}
		got, _ := rec[logattr.EventID].(string)
		if got != c.want || rec[logattr.Topic] != "orders" || rec[logattr.Subscription] != "audit" {
			t.Errorf("%s: logged %s; want topic, subscription and eventId %q", c.target, strings.TrimSpace(logs.String()), c.want)
		}
	}
}
