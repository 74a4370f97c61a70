package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// bigQueue answers :receive with n events whose data is size bytes sent in binary mode, so
// carried as data_base64 (a third larger), written as it goes, and :acknowledge with every
// token acknowledged, sending the tokens it got on acked.
func bigQueue(t *testing.T, n, size int, acked chan<- []string) *httptest.Server {
	data := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xfe}, size))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, ":receive"):
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			_, _ = io.WriteString(w, `{"value":[`)
			for i := range n {
				if i > 0 {
					_, _ = io.WriteString(w, ",")
				}
				_, _ = io.WriteString(w, bigEvent(i, data))
			}
			_, _ = io.WriteString(w, "]}")
		case strings.HasSuffix(r.URL.Path, ":acknowledge"):
			var body struct {
				LockTokens []string `json:"lockTokens"`
			}
			_ = json.NewDecoder(r.Body).Decode(&body)
			acked <- body.LockTokens
			_ = json.NewEncoder(w).Encode(map[string]any{"failedLockTokens": []any{}, "succeededLockTokens": body.LockTokens})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// bigEvent is the i-th received event of bigQueue.
func bigEvent(i int, data string) string {
	return fmt.Sprintf(`{"brokerProperties":{"lockToken":"tok-%d","deliveryCount":1},"event":{"specversion":"1.0","id":"%d","source":"/big","type":"Big","datacontenttype":"application/octet-stream","data_base64":"%s"}}`, i, i, data)
}

// eventCounter is a stdout that keeps only the number of events printed and their bytes.
type eventCounter struct{ events, bytes int }

func (c *eventCounter) Write(p []byte) (int, error) {
	if bytes.HasPrefix(p, []byte("--- +")) {
		c.events++
	}
	c.bytes += len(p)
	return len(p), nil
}

// TestReceivePullReadsALargeAnswer receives 100 events of 512 KiB of binary data in one
// answer, about 70 MB, more than the 64 MB the consumer used to read of it: it reads it
// whole, prints every event and acknowledges them all. (Events of 1 MB would make 140 MB:
// TestMaxReceiveAnswerHoldsTheLargestEvents checks the bound covers them without the memory.)
func TestReceivePullReadsALargeAnswer(t *testing.T) {
	const n, size = 100, 512 << 10
	acked := make(chan []string, 1)
	srv := bigQueue(t, n, size, acked)
	var out eventCounter
	var errs bytes.Buffer
	code := run(context.Background(), []string{"egrid", "receive", "--pull", "--server", srv.URL, "--topic", "ns-big",
		"--subscription", "workers", "--key", "k", "--max-events", "100", "--count", "100"},
		env{Stdout: &out, Stderr: &errs, Getenv: func(string) string { return "" }})
	if code != 0 || out.events != n || out.bytes < n*size*4/3 {
		t.Fatalf("exit %d, %d events (%d bytes) printed; want 0, %d events\n%s", code, out.events, out.bytes, n, errs.String())
	}
	if tokens := <-acked; len(tokens) != n || tokens[0] != "tok-0" || tokens[n-1] != fmt.Sprintf("tok-%d", n-1) {
		t.Errorf("acknowledged %d tokens, want the %d received", len(tokens), n)
	}
}

// TestReceivePullRefusesAnAnswerOverItsBound: an answer larger than the requested events can
// take is refused with an error that says so, and nothing is printed or acknowledged.
func TestReceivePullRefusesAnAnswerOverItsBound(t *testing.T) {
	acked := make(chan []string, 1)
	srv := bigQueue(t, 1, 3<<20, acked) // one event of 4 MB: more than twice the 1 MB an event may take
	var out eventCounter
	var errs bytes.Buffer
	code := run(context.Background(), []string{"egrid", "receive", "--pull", "--server", srv.URL, "--topic", "ns-big",
		"--subscription", "workers", "--key", "k", "--max-events", "1", "--count", "1"},
		env{Stdout: &out, Stderr: &errs, Getenv: func(string) string { return "" }})
	want := fmt.Sprintf("the answer of :receive is over %d bytes", maxReceiveAnswer(1))
	if code != 1 || out.events != 0 || !strings.Contains(errs.String(), want) || !strings.Contains(errs.String(), "--max-events") {
		t.Fatalf("exit %d, %d events printed, stderr %q; want 1, none, %q", code, out.events, errs.String(), want)
	}
	select {
	case tokens := <-acked:
		t.Errorf("acknowledged %v", tokens)
	default:
	}
}

// TestMaxReceiveAnswerHoldsTheLargestEvents: the bound for n events holds n events whose
// 1 MB of binary data is carried as data_base64, with 64 KB of attributes beside, and grows
// with n.
func TestMaxReceiveAnswerHoldsTheLargestEvents(t *testing.T) {
	data := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xfe}, 1<<20))
	ev := bigEvent(99, data)
	ev = ev[:len(ev)-2] + `,"ext":"` + strings.Repeat("x", 64<<10) + `"}}`
	for _, n := range []int{1, 10, 100} {
		answer := int64(len(`{"value":[]}`) + n*(len(ev)+1))
		if got := maxReceiveAnswer(n); got < answer || got > 3*answer {
			t.Errorf("maxReceiveAnswer(%d) = %d; the answer of %d such events is %d bytes", n, got, n, answer)
		}
	}
}
