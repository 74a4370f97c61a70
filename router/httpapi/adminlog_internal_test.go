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
