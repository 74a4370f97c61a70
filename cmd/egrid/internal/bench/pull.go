package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egridio/egrid/router"
)

// Pull scenario shape: PullConsumers consumers, each receiving PullBatch events per
// :receive and acknowledging them in one :acknowledge.
const (
	PullConsumers = 8
	PullBatch     = 100
)

// pull publishes CloudEvents to a namespace topic with one queue subscription for the load
// phase (the same-run baseline: the publish rate of the same router, 100 events per request),
// then drains the queue with PullConsumers consumers, each looping :receive?maxEvents=100
// and :acknowledge over HTTP, and reports received-and-acknowledged events/s and its ratio to
// the publish rate. A ratio of 1 means consumers keep up with publishers.
func pull(ctx context.Context, b *Runner, s Scenario) ([]Result, error) {
	eg, err := b.startEgrid(router.Config{})
	if err != nil {
		return nil, err
	}
	defer eg.close()
	if _, err := eg.r.CreateTopic(ctx, "bench-ns", router.TopicSpec{Kind: router.KindNamespace}); err != nil {
		return nil, err
	}
	spec := router.SubscriptionSpec{DeliveryConfiguration: &router.DeliveryConfiguration{
		DeliveryMode: router.DeliveryModeQueue,
		Queue:        &router.QueueInfo{ReceiveLockDurationInSeconds: 300},
	}}
	if err := eg.r.CreateSubscription(ctx, "bench-ns", "pull", spec); err != nil {
		return nil, err
	}
	body := cloudEventBody(PullBatch, "q")
	l, err := b.load(ctx, "egrid publish (100/request)", eg.url+"/topics/bench-ns:publish?api-version=2024-06-01", body, b.opt.Duration)
	if err != nil {
		return nil, err
	}
	rps := l.rate()
	publishRate := rps * PullBatch
	published := eg.r.Metrics().Snapshot().Sum("PublishSuccessCount", "bench-ns")
	if published == 0 {
		return nil, fmt.Errorf("no event was published")
	}

	var consumed, failed atomic.Int64
	drainCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := loadClient(PullConsumers)
	defer client.CloseIdleConnections()
	base := eg.url + "/topics/bench-ns/eventsubscriptions/pull"
	var wg sync.WaitGroup
	start := time.Now()
	for range PullConsumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for drainCtx.Err() == nil {
				n, err := receiveAndAck(drainCtx, client, base)
				if err != nil {
					if drainCtx.Err() == nil {
						failed.Add(1)
					}
					continue
				}
				consumed.Add(int64(n))
			}
		}()
	}
	last := b.drain(ctx, fmt.Sprintf("pulling (%d × %d)", PullConsumers, PullBatch), consumed.Load, published, 120*time.Second)
	cancel()
	wg.Wait()
	got := consumed.Load()
	rate := float64(got) / last.Sub(start).Seconds()
	res := Result{Scenario: s.Name, Metric: fmt.Sprintf("receive+acknowledge, %d consumers × %d", PullConsumers, PullBatch),
		Value: rate, Unit: "events/s", Baseline: publishRate, Ratio: rate / publishRate, Target: s.Target}
	var notes []string
	if got < published {
		notes = append(notes, fmt.Sprintf("only %d of %d received within the bound", got, published))
	}
	if n := failed.Load(); n > 0 {
		notes = append(notes, fmt.Sprintf("%d failed requests", n))
	}
	res.Note = strings.Join(notes, "; ")
	return []Result{res}, nil
}

// receiveAndAck receives up to PullBatch events and acknowledges them; it returns how many
// were acknowledged.
func receiveAndAck(ctx context.Context, client *http.Client, base string) (int, error) {
	raw, err := post(ctx, client, fmt.Sprintf("%s:receive?api-version=2024-06-01&maxEvents=%d&maxWaitTime=10", base, PullBatch), nil)
	if err != nil {
		return 0, err
	}
	tokens := lockTokens(raw)
	if len(tokens) == 0 {
		return 0, nil
	}
	var ack struct {
		Succeeded []string `json:"succeededLockTokens"`
	}
	raw, err = post(ctx, client, base+":acknowledge?api-version=2024-06-01", map[string][]string{"lockTokens": tokens})
	if err != nil {
		return 0, err
	}
	if err := json.Unmarshal(raw, &ack); err != nil {
		return 0, err
	}
	return len(ack.Succeeded), nil
}

// lockTokenKey precedes each lock token in a receive answer.
var lockTokenKey = []byte(`"brokerProperties":{"lockToken":"`)

// lockTokens picks the lock tokens out of a receive answer without decoding its events: the
// load generator shares the machine's CPU with the server it measures, so it parses no more
// than it must. (The bench's events hold no such member; the REST-shape tests in
// router/httpapi parse the answers fully.)
func lockTokens(raw []byte) []string {
	var out []string
	for {
		i := bytes.Index(raw, lockTokenKey)
		if i < 0 {
			return out
		}
		raw = raw[i+len(lockTokenKey):]
		end := bytes.IndexByte(raw, '"')
		if end < 0 {
			return out
		}
		out = append(out, string(raw[:end]))
		raw = raw[end:]
	}
}

// post sends in as JSON (no body when nil) and returns the answer's body, or an error for an
// answer other than 200.
func post(ctx context.Context, client *http.Client, url string, in any) ([]byte, error) {
	var rd io.Reader = http.NoBody
	if in != nil {
		raw, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %d %s", url, resp.StatusCode, raw)
	}
	return raw, nil
}

// cloudEventBody returns a JSON array of n CloudEvents of about 1 KB each, with ids as
// [eventBody] makes them.
func cloudEventBody(n int, idPrefix string) []byte {
	pad := strings.Repeat("x", 820)
	var b bytes.Buffer
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"specversion":"1.0","id":"%s-%s-%d","source":"/bench","type":"Bench.Event","subject":"/bench","time":"2026-01-01T00:00:00Z","datacontenttype":"application/json","data":{"pad":%q,"sent":0}}`, idPrefix, idZeros, i, pad)
	}
	b.WriteByte(']')
	return b.Bytes()
}
