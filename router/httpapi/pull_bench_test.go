package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/store"
)

// BenchmarkReceiveAnswer receives 100 events of 900 KB over HTTP (:receive?maxEvents=100)
// into a client that drops the bytes, and reports the memory the server allocated per byte
// of answer (alloc-B/answer-B): each copy of the events made to answer them adds 1. The
// events are published, and acknowledged afterwards, with the timer stopped.
func BenchmarkReceiveAnswer(b *testing.B) {
	const events, size = 100, 900_000
	r, err := router.New(router.Config{}, router.Deps{Store: store.NewMemory()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Close(context.Background()) })
	ctx := b.Context()
	topic, err := r.CreateTopic(ctx, "nsq", router.TopicSpec{Kind: router.KindNamespace})
	if err != nil {
		b.Fatal(err)
	}
	spec := router.SubscriptionSpec{DeliveryConfiguration: &router.DeliveryConfiguration{DeliveryMode: router.DeliveryModeQueue}}
	if err := r.CreateSubscription(ctx, "nsq", "que", spec); err != nil {
		b.Fatal(err)
	}
	api := httpapi.New(r)
	pad := strings.Repeat("x", size)
	var answered int64
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		for j := range events { // one a request: a request holds at most 1 MB
			ev := json.RawMessage(fmt.Sprintf(`{"specversion":"1.0","id":"e%d-%d","source":"/orders","type":"Order.Created","data":{"pad":%q}}`, i, j, pad))
			if err := r.Publish(ctx, "nsq", ev); err != nil {
				b.Fatal(err)
			}
		}
		w := &discardAnswer{header: http.Header{}}
		req := httptest.NewRequest(http.MethodPost, "/topics/nsq/eventsubscriptions/que:receive?maxEvents=100&maxWaitTime=10", nil)
		req.Header.Set("aeg-sas-key", topic.Key1)
		b.StartTimer()
		api.ServeHTTP(w, req)
		b.StopTimer()
		if w.status != 0 && w.status != http.StatusOK {
			b.Fatalf("receive: %d", w.status)
		}
		answered += w.n
		if res, err := r.Acknowledge(ctx, "nsq", "que", w.tokens); err != nil || len(res.Succeeded) != events {
			b.Fatalf("acknowledge: %+v %v; want %d events", res, err, events)
		}
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(answered)/float64(b.N), "answer-B/op")
}

// discardAnswer is an http.ResponseWriter that counts the answer's bytes and keeps none.
type discardAnswer struct {
	header http.Header
	status int
	n      int64
	tokens []string
}

// tokenKey comes before each lock token of an answer, within one write.
var tokenKey = []byte(`"lockToken":"`)

func (d *discardAnswer) Header() http.Header { return d.header }
func (d *discardAnswer) WriteHeader(s int)   { d.status = s }
func (d *discardAnswer) Write(p []byte) (int, error) {
	d.n += int64(len(p))
	for rest := p; ; {
		i := bytes.Index(rest, tokenKey)
		if i < 0 {
			break
		}
		rest = rest[i+len(tokenKey):]
		tok, _, _ := bytes.Cut(rest, []byte(`"`))
		d.tokens = append(d.tokens, string(tok))
	}
	return len(p), nil
}
