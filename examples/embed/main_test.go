package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestEmbeddedService runs the example: an event posted to the service's own HTTP server
// reaches its Go function.
func TestEmbeddedService(t *testing.T) {
	got := make(chan string, 1)
	svc, err := NewService(context.Background(), func(id, eventType string, _ []byte) error {
		got <- id + " " + eventType
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Router.Close(context.Background())
	srv := httptest.NewServer(svc.Mux)
	defer srv.Close()

	body := `[{"id":"o-1","subject":"/orders/1","eventType":"Order.Created","eventTime":"2026-01-01T00:00:00Z","data":{"total":42}}]`
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/events/topics/orders/api/events?api-version=2018-01-01", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("aeg-sas-key", svc.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("publish: %d", resp.StatusCode)
	}
	select {
	case g := <-got:
		if g != "o-1 Order.Created" {
			t.Fatalf("handler got %q", g)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the event never reached the Go function")
	}
}
