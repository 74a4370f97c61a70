package schemas_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/egridio/egrid/schemas"
)

// benchEventGridBody is a publish of n Event Grid events of about 1 KB each, shaped like a
// real one: a nested data object with strings, numbers and an array.
func benchEventGridBody(n int) []byte {
	events := make([]string, n)
	for i := range events {
		events[i] = fmt.Sprintf(`{"id":"%08d-7c1e-4b59-9a4e-1f0d3c2b1a09","subject":"/orders/%d","eventType":"Contoso.Orders.OrderCreated","eventTime":"2024-05-01T12:00:%02d.1234567Z","dataVersion":"1.0","data":{"orderId":"o-%d","customer":{"id":"c-42","name":"Jane Doe","email":"jane@example.com","tier":"gold"},"total":129.95,"currency":"EUR","lines":[{"sku":"A-1","qty":2,"price":19.99},{"sku":"B-7","qty":1,"price":89.97}],"note":"%s","tags":["web","promo","eu"],"paid":true}}`,
			i, i, i%60, i, strings.Repeat("lorem ipsum ", 52))
	}
	return []byte(array(events...))
}

func BenchmarkDecodeEventGrid(b *testing.B) {
	body := benchEventGridBody(100)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := schemas.DecodeEventGrid(body, topicID, schemas.ClassicLimits); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkDecodeCloudEvents(b *testing.B) {
	eg, err := schemas.DecodeEventGrid(benchEventGridBody(100), topicID, schemas.ClassicLimits)
	if err != nil {
		b.Fatal(err)
	}
	body, _, err := schemas.EncodeBatch(nil, schemas.EventGrid, schemas.CloudEvents, topicID, eg)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := schemas.DecodeCloudEvents(body, schemas.ClassicLimits); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkEncodeBatch(b *testing.B) {
	eg, err := schemas.DecodeEventGrid(benchEventGridBody(100), topicID, schemas.ClassicLimits)
	if err != nil {
		b.Fatal(err)
	}
	ceBody, _, err := schemas.EncodeBatch(nil, schemas.EventGrid, schemas.CloudEvents, topicID, eg)
	if err != nil {
		b.Fatal(err)
	}
	ce, err := schemas.DecodeCloudEvents(ceBody, schemas.ClassicLimits)
	if err != nil {
		b.Fatal(err)
	}
	custom, err := schemas.DecodeCustom(benchEventGridBody(100), &schemas.InputMapping{
		ID:        schemas.FieldMapping{SourceField: "id"},
		EventType: schemas.FieldMapping{SourceField: "eventType"},
		Subject:   schemas.FieldMapping{SourceField: "subject"},
		EventTime: schemas.FieldMapping{SourceField: "eventTime"},
	}, topicID, schemas.ClassicLimits, ids(), customNow)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name    string
		in, out schemas.Schema
		events  []*schemas.Event
	}{
		{"EventGrid->EventGrid/1", schemas.EventGrid, schemas.EventGrid, eg[:1]},
		{"EventGrid->EventGrid/100", schemas.EventGrid, schemas.EventGrid, eg},
		{"EventGrid->CloudEvents/1", schemas.EventGrid, schemas.CloudEvents, eg[:1]},
		{"EventGrid->CloudEvents/100", schemas.EventGrid, schemas.CloudEvents, eg},
		{"CloudEvents->CloudEvents/100", schemas.CloudEvents, schemas.CloudEvents, ce},
		{"Custom->EventGrid/100", schemas.Custom, schemas.EventGrid, custom},
		{"Custom->CloudEvents/100", schemas.Custom, schemas.CloudEvents, custom},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var dst []byte
			b.ReportAllocs()
			for b.Loop() {
				var err error
				dst, _, err = schemas.EncodeBatch(dst[:0], bc.in, bc.out, topicID, bc.events)
				if err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(len(dst)))
			b.ReportMetric(float64(b.N*len(bc.events))/b.Elapsed().Seconds(), "events/s")
		})
	}
}
