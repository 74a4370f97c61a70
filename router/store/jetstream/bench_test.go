package jetstream_test

import (
	"strings"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/schemas"
)

// benchEvent is an event whose Raw is exactly 1 KB.
func benchEvent() *schemas.Event {
	return &schemas.Event{
		ID: "bench", Type: "Bench.Event", Subject: "/bench", Time: "2026-01-01T00:00:00Z", DataVersion: "1.0",
		Raw: []byte(`{"pad":"` + strings.Repeat("x", 1024-len(`{"pad":""}`)) + `"}`),
	}
}

// BenchmarkAppend measures Store.Append of 1 KB events against the package's in-process
// server (file storage, R1), beside BenchmarkRawPublish, the same server taking the same
// bodies from the plain JetStream client: the difference is the store's cost (encoding, the
// writer goroutine, the expected-sequence and message-ID headers).
//
//	go test -run '^$' -bench 'Append|RawPublish' ./router/store/jetstream
func BenchmarkAppend(b *testing.B) {
	for _, bc := range []struct {
		name     string
		events   int
		parallel bool
	}{
		{"serial/1", 1, false},
		{"serial/10", 10, false},
		{"parallel/1", 1, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := open(b, connect(b), newPrefix(b))
			b.Cleanup(func() { _ = s.Close() })
			if err := s.PutTopic(b.Context(), "t", nil); err != nil {
				b.Fatal(err)
			}
			evs := make([]*schemas.Event, bc.events)
			for i := range evs {
				evs[i] = benchEvent()
			}
			at := time.Unix(1, 0)
			b.SetBytes(int64(1024 * bc.events))
			b.ResetTimer()
			if bc.parallel {
				b.SetParallelism(32)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := s.Append(b.Context(), "t", at, evs); err != nil {
							b.Error(err)
							return
						}
					}
				})
			} else {
				for range b.N {
					if _, err := s.Append(b.Context(), "t", at, evs); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.N*bc.events)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkRawPublish is the baseline of BenchmarkAppend: synchronous JetStream publishes of
// the same 1 KB bodies to a stream configured as the store's journal streams ("serial/10"
// publishes ten pipelined and waits for their ten acknowledgements, as one Append of ten
// does).
func BenchmarkRawPublish(b *testing.B) {
	for _, bc := range []struct {
		name     string
		events   int
		parallel bool
	}{
		{"serial/1", 1, false},
		{"serial/10", 10, false},
		{"parallel/1", 1, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p := newPrefix(b)
			js, err := njs.New(connect(b))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := js.CreateStream(b.Context(), njs.StreamConfig{
				Name: p + "_raw", Subjects: []string{p + ".raw"}, Storage: njs.FileStorage, Replicas: 1,
				Discard: njs.DiscardNew, Duplicates: time.Second,
			}); err != nil {
				b.Fatal(err)
			}
			body := benchEvent().Raw
			subj := p + ".raw"
			b.SetBytes(int64(1024 * bc.events))
			b.ResetTimer()
			switch {
			case bc.parallel:
				b.SetParallelism(32)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := js.Publish(b.Context(), subj, body); err != nil {
							b.Error(err)
							return
						}
					}
				})
			case bc.events == 1:
				for range b.N {
					if _, err := js.Publish(b.Context(), subj, body); err != nil {
						b.Fatal(err)
					}
				}
			default:
				fs := make([]njs.PubAckFuture, bc.events)
				for range b.N {
					for i := range fs {
						if fs[i], err = js.PublishAsync(subj, body); err != nil {
							b.Fatal(err)
						}
					}
					for _, f := range fs {
						select {
						case <-f.Ok():
						case err := <-f.Err():
							b.Fatal(err)
						}
					}
				}
			}
			b.ReportMetric(float64(b.N*bc.events)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
