package filter_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/egridio/egrid/router/filter"
	"github.com/egridio/egrid/schemas"
)

// blobEvent is a ~1 KB Event Grid event, a storage BlobCreated notification.
func blobEvent() *schemas.Event {
	ev := egEvent(`{"api":"PutBlockList","clientRequestId":"6d79dbfb-0e37-4fc4-981f-442c9ca89bb1",` +
		`"requestId":"831e1650-001e-001b-66ab-eeb76e000000","eTag":"0x8D4BCC2E4835CD0",` +
		`"contentType":"image/jpeg","contentLength":524288,"blobType":"BlockBlob",` +
		`"url":"https://example.blob.core.windows.net/images/2024/05/01/cat.jpg","sequencer":"00000000000004420000000000028963",` +
		`"storageDiagnostics":{"batchId":"b68529f3-68cd-4744-baa4-3c0498ec19f0","notes":"` + strings.Repeat("x", 300) + `"},` +
		`"tags":["cats","pets","uploads"],"metadata":{"owner":"team-a","retention":"30d","source":"mobile"}}`)
	ev.Type = "Microsoft.Storage.BlobCreated"
	ev.Subject = "/blobServices/default/containers/images/blobs/2024/05/01/cat.jpg"
	return ev
}

// BenchmarkMatch measures Match on a ~1 KB Event Grid event: (a) event type and subject
// prefix only, which never reads the raw JSON, and (b) two advanced filters on data paths,
// which scan it once.
func BenchmarkMatch(b *testing.B) {
	ev := blobEvent()
	if n := len(ev.Raw); n < 900 || n > 1300 {
		b.Fatalf("benchmark event is %d bytes, want about 1 KB", n)
	}
	benchmarks := []struct {
		name string
		spec string
	}{
		{name: "type+prefix", spec: `{"includedEventTypes":["Microsoft.Storage.BlobCreated","Microsoft.Storage.BlobDeleted"],
			"subjectBeginsWith":"/blobServices/default/containers/images/"}`},
		{name: "two-data-paths", spec: `{"advancedFilters":[
			{"operatorType":"NumberGreaterThan","key":"data.contentLength","value":1024},
			{"operatorType":"StringIn","key":"data.metadata.owner","values":["team-a","team-b"]}]}`},
	}
	for _, bm := range benchmarks {
		f := mustCompile(b, spec(b, bm.spec), schemas.EventGrid)
		if !f.Match(ev) {
			b.Fatalf("%s: the benchmark filter does not match the event", bm.name)
		}
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !f.Match(ev) {
					b.Fatal("no match")
				}
			}
		})
	}
}

// largeEvent is an Event Grid event of about 1 MB whose data is the given member, repeated
// item filling the JSON value val as in fmt's %s: val is "[%s]" for an array, `"%s"` for a
// string.
func largeEvent(member, val, item, sep string) *schemas.Event {
	n := (1 << 20) / (len(item) + len(sep))
	items := strings.TrimSuffix(strings.Repeat(item+sep, n), sep)
	return egEvent(`{"` + member + `":` + strings.Replace(val, "%s", items, 1) + `}`)
}

// notContainsSpec is n StringNotContains filters on key, each with one 256-character value
// the tests' values do not contain: within Azure's limits, and each one needs the value
// case-folded.
func notContainsSpec(n int, key string, arrays bool) filter.Spec {
	var s filter.Spec
	s.EnableAdvancedFilteringOnArrays = arrays
	for i := range n {
		s.AdvancedFilters = append(s.AdvancedFilters, filter.AdvancedFilter{
			OperatorType: "StringNotContains", Key: key,
			Values: []any{fmt.Sprintf("%0256d", i)},
		})
	}
	return s
}

// BenchmarkMatchLarge measures Match on events of about 1 MB that cost most: (a) 25
// StringNotContains filters on one string of 512k "é" (each filter needs the value folded),
// and (b) NumberIn on an array of 512k zeros with array filtering on (every element is
// read).
func BenchmarkMatchLarge(b *testing.B) {
	benchmarks := []struct {
		name string
		ev   *schemas.Event
		f    *filter.Filter
	}{
		{name: "25-not-contains", ev: largeEvent("s", `"%s"`, "é", ""), f: mustCompile(b, notContainsSpec(25, "data.s", false), schemas.EventGrid)},
		{name: "array-number-in", ev: largeEvent("a", "[%s]", "0", ","), f: mustCompile(b, spec(b, `{"enableAdvancedFilteringOnArrays":true,
			"advancedFilters":[{"operatorType":"NumberNotIn","key":"data.a","values":[1]}]}`), schemas.EventGrid)},
	}
	for _, bm := range benchmarks {
		if !bm.f.Match(bm.ev) {
			b.Fatalf("%s: the benchmark filter does not match the event", bm.name)
		}
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !bm.f.Match(bm.ev) {
					b.Fatal("no match")
				}
			}
		})
	}
}
