package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/sinks"
)

func nullSinks() map[string]sinks.Sink {
	return map[string]sinks.Sink{"null": sinks.Func(func(context.Context, *sinks.Batch) error { return nil })}
}

// TestAdminNamesAreCaseInsensitive: the admin API and the data plane routes fold names too,
// and answers show the case a name was created with.
func TestAdminNamesAreCaseInsensitive(t *testing.T) {
	r, err := router.New(router.Config{AdminToken: "tok"}, router.Deps{Sinks: nullSinks()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	srv := httptest.NewServer(httpapi.New(r))
	defer srv.Close()

	if status, body := adminDo(t, srv, "tok", "PUT", "/admin/topics/Orders", `{}`); status != 201 {
		t.Fatalf("PUT Orders: %d %v", status, body)
	}
	status, body := adminDo(t, srv, "tok", "PUT", "/admin/topics/orders", `{}`)
	if status != 200 || body["name"] != "Orders" {
		t.Fatalf("PUT orders: %d name %v, want 200 for the existing topic, named Orders", status, body["name"])
	}
	sub := `{"properties":{"destination":{"endpointType":"Sink","properties":{"sinkName":"null"}}}}`
	if status, body := adminDo(t, srv, "tok", "PUT", "/admin/topics/orders/eventSubscriptions/sub-a", sub); status != 201 {
		t.Fatalf("PUT sub-a: %d %v", status, body)
	}
	status, body = adminDo(t, srv, "tok", "PUT", "/admin/topics/ORDERS/eventSubscriptions/SUB-A", sub)
	if status != 200 || body["name"] != "sub-a" {
		t.Fatalf("PUT SUB-A: %d name %v, want 200 for the existing sub-a", status, body["name"])
	}
	if !strings.HasSuffix(body["id"].(string), "/topics/Orders/providers/Microsoft.EventGrid/eventSubscriptions/sub-a") {
		t.Errorf("id %v, want the names as created", body["id"])
	}
	status, body = adminDo(t, srv, "tok", "GET", "/admin/topics/ORDERS/eventSubscriptions", "")
	if status != 200 || len(body["value"].([]any)) != 1 {
		t.Fatalf("list: %d %v, want one subscription", status, body)
	}
	if status, _ := adminDo(t, srv, "tok", "GET", "/admin/topics/orders/eventSubscriptions/Sub-A", ""); status != 200 {
		t.Errorf("GET Sub-A: %d", status)
	}
	_, keys := adminDo(t, srv, "tok", "POST", "/admin/topics/oRdErS/listKeys", "")
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/topics/ORDERS/api/events", strings.NewReader(`[{"id":"1","eventType":"t","subject":"s","eventTime":"2024-01-01T00:00:00Z","dataVersion":"1","data":{}}]`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("aeg-sas-key", keys["key1"].(string))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("publish to /topics/ORDERS: %d", resp.StatusCode)
	}
	if status, _ := adminDo(t, srv, "tok", "DELETE", "/admin/topics/Orders/eventSubscriptions/SUB-a", ""); status != 200 {
		t.Errorf("DELETE SUB-a: %d", status)
	}
	if status, _ := adminDo(t, srv, "tok", "DELETE", "/admin/topics/ORDERS", ""); status != 200 {
		t.Errorf("DELETE ORDERS: %d", status)
	}
}
