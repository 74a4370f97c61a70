package schemas_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/schemas"
)

var (
	dlPublish = time.Date(2024, 5, 1, 12, 0, 0, 26575800, time.UTC)
	dlAttempt = time.Date(2024, 5, 1, 12, 5, 3, 46578800, time.FixedZone("CEST", 2*3600))
)

// deadLetterInputs returns one record per input schema: a 500 that exhausted its attempts.
func deadLetterInputs(t *testing.T) (eg, ce, custom schemas.DeadLetterRecord) {
	t.Helper()
	egs, ces, customs := encodeInputs(t)
	rec := func(e *schemas.Event) schemas.DeadLetterRecord {
		return schemas.DeadLetterRecord{
			Event: e, Reason: schemas.MaxDeliveryAttemptsExceeded, DeliveryAttempts: 3,
			LastOutcome: schemas.GenericError, LastHTTPStatus: 500, PublishTime: dlPublish, LastAttemptTime: dlAttempt,
		}
	}
	return rec(egs[0]), rec(ces[0]), rec(customs[0])
}

// The four record layouts of SPEC §5 (seeds 000 and 002), pinned by golden files.
func TestAppendDeadLettersGolden(t *testing.T) {
	eg, ce, custom := deadLetterInputs(t)
	badRequest := eg
	badRequest.Reason, badRequest.DeliveryAttempts, badRequest.LastOutcome, badRequest.LastHTTPStatus = schemas.UndeliverableDueToHTTPBadRequest, 1, schemas.BadRequest, 400
	probation := eg
	probation.Reason, probation.DeliveryAttempts, probation.LastOutcome, probation.LastHTTPStatus, probation.LastAttemptTime = schemas.UndeliverableDueToProbationCausedByClientError, 0, schemas.Probation, 0, time.Time{}
	probationCE := probation
	probationCE.Event = ce.Event
	expired := custom
	expired.Reason, expired.LastOutcome, expired.LastHTTPStatus, expired.DeliveryAttempts, expired.LastAttemptTime = schemas.TimeToLiveExceeded, 0, 0, 0, time.Time{}
	tests := []struct {
		name   string
		format schemas.DeadLetterFormat
		shape  schemas.DeadLetterShape
		recs   []schemas.DeadLetterRecord
	}{
		{"deadletter_eventgrid", schemas.DeadLetterFormat{Input: schemas.EventGrid, Delivery: schemas.EventGrid, TopicID: topicID}, schemas.DeadLetterEventGrid, []schemas.DeadLetterRecord{eg, badRequest, probation}},
		{"deadletter_eventgrid_as_cloudevents", schemas.DeadLetterFormat{Input: schemas.EventGrid, Delivery: schemas.CloudEvents, TopicID: topicID}, schemas.DeadLetterCloudEvents, []schemas.DeadLetterRecord{eg}},
		{"deadletter_cloudevents", schemas.DeadLetterFormat{Input: schemas.CloudEvents, Delivery: schemas.CloudEvents, TopicID: topicID}, schemas.DeadLetterCloudEvents, []schemas.DeadLetterRecord{ce}},
		{"deadletter_custom", schemas.DeadLetterFormat{Input: schemas.Custom, Delivery: schemas.Custom, TopicID: topicID}, schemas.DeadLetterEventGrid, []schemas.DeadLetterRecord{custom, expired}},
		{"deadletter_custom_as_eventgrid", schemas.DeadLetterFormat{Input: schemas.Custom, Delivery: schemas.EventGrid, TopicID: topicID}, schemas.DeadLetterEventGrid, []schemas.DeadLetterRecord{custom}},
		{"deadletter_namespace", schemas.DeadLetterFormat{Input: schemas.CloudEvents, Delivery: schemas.CloudEvents, Namespace: true, TopicID: topicID}, schemas.DeadLetterNamespace, []schemas.DeadLetterRecord{ce, probationCE}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.format.Shape(); got != tt.shape {
				t.Errorf("Shape() = %v, want %v", got, tt.shape)
			}
			out, err := schemas.AppendDeadLetters([]byte("kept"), tt.format, tt.recs)
			if err != nil {
				t.Fatalf("AppendDeadLetters: %v", err)
			}
			if !strings.HasPrefix(string(out), "kept") {
				t.Fatalf("AppendDeadLetters did not append to dst: %q", out)
			}
			body := out[len("kept"):]
			if !json.Valid(body) {
				t.Fatalf("object is not valid JSON: %s", body)
			}
			golden(t, tt.name, append(pretty(t, body), '\n'))

			// Every object decodes back to the records it was made from.
			back, err := schemas.DecodeDeadLetters(body, tt.format.Input, topicID)
			if err != nil {
				t.Fatalf("DecodeDeadLetters: %v", err)
			}
			if len(back) != len(tt.recs) {
				t.Fatalf("decoded %d records, want %d", len(back), len(tt.recs))
			}
			for i, got := range back {
				want := tt.recs[i]
				if tt.shape == schemas.DeadLetterNamespace {
					want.LastHTTPStatus = 0 // seed 002's layout has no HTTP status
				}
				requireSameRecord(t, i, got, want)
			}
		})
	}
}

// pretty indents a JSON value for a readable golden file; member order and values are kept.
func pretty(t *testing.T, body []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := json.Indent(&b, body, "", "  "); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func requireSameRecord(t *testing.T, i int, got, want schemas.DeadLetterRecord) {
	t.Helper()
	if got.Reason != want.Reason || got.DeliveryAttempts != want.DeliveryAttempts || got.LastOutcome != want.LastOutcome ||
		got.LastHTTPStatus != want.LastHTTPStatus || !got.PublishTime.Equal(want.PublishTime.Truncate(100*time.Nanosecond)) ||
		!got.LastAttemptTime.Equal(want.LastAttemptTime.Truncate(100*time.Nanosecond)) {
		t.Errorf("record %d decodes to %s/%d/%s/%d/%v/%v, want %s/%d/%s/%d/%v/%v", i,
			got.Reason, got.DeliveryAttempts, got.LastOutcome, got.LastHTTPStatus, got.PublishTime, got.LastAttemptTime,
			want.Reason, want.DeliveryAttempts, want.LastOutcome, want.LastHTTPStatus, want.PublishTime, want.LastAttemptTime)
	}
	g, w := *got.Event, *want.Event
	if !reflect.DeepEqual(g, w) {
		t.Errorf("record %d: event decodes to\n%+v\nwant\n%+v\nraw %s\nwant %s", i, g, w, g.Raw, w.Raw)
	}
}

// The records of the seeds, written by Azure Event Grid, decode: egrid can replay what Azure
// dead-lettered.
func TestDecodeDeadLettersFromSeeds(t *testing.T) {
	const storageTopic = "/subscriptions/000000000-0000-0000-0000-00000000000000/resourceGroups/rgwithoutpolicy/providers/Microsoft.Storage/storageAccounts/myegteststgfoo"
	tests := []struct {
		name    string
		in      schemas.Schema
		topicID string
		body    string
		want    schemas.DeadLetterRecord
	}{
		{
			name: "Event Grid schema (seed 000)", in: schemas.EventGrid, topicID: storageTopic,
			body: `[{
    "id": "93902694-901e-008f-6f95-7153a806873c",
    "eventTime": "2020-08-13T17:18:13.1647262Z",
    "eventType": "Microsoft.Storage.BlobCreated",
    "dataVersion": "",
    "metadataVersion": "1",
    "topic": "` + storageTopic + `",
    "subject": "/blobServices/default/containers/deadletter/blobs/myBlobFile.txt",
    "data": {"api": "PutBlob", "contentLength": 0},
    "deadLetterReason": "MaxDeliveryAttemptsExceeded",
    "deliveryAttempts": 1,
    "lastDeliveryOutcome": "NotFound",
    "publishTime": "2020-08-13T17:18:14.0265758Z",
    "lastDeliveryAttemptTime": "2020-08-13T17:18:14.0465788Z"
}]`,
			want: schemas.DeadLetterRecord{
				Event: &schemas.Event{
					ID: "93902694-901e-008f-6f95-7153a806873c", Type: "Microsoft.Storage.BlobCreated",
					Subject: "/blobServices/default/containers/deadletter/blobs/myBlobFile.txt", Time: "2020-08-13T17:18:13.1647262Z",
					Source: storageTopic,
				},
				Reason: schemas.MaxDeliveryAttemptsExceeded, DeliveryAttempts: 1, LastOutcome: schemas.NotFound,
				PublishTime:     time.Date(2020, 8, 13, 17, 18, 14, 26575800, time.UTC),
				LastAttemptTime: time.Date(2020, 8, 13, 17, 18, 14, 46578800, time.UTC),
			},
		},
		{
			name: "CloudEvents (seed 000)", in: schemas.CloudEvents, topicID: topicID,
			body: `[{
    "id": "caee971c-3ca0-4254-8f99-1395b394588e",
    "source": "mysource",
    "dataversion": "1.0",
    "subject": "mySubject",
    "type": "fooEventType",
    "datacontenttype": "application/json",
    "specversion": "1.0",
    "data": {"prop1": "value1", "prop2": 5},
    "deadletterreason": "MaxDeliveryAttemptsExceeded",
    "deliveryattempts": 1,
    "lastdeliveryoutcome": "NotFound",
    "publishtime": "2020-08-13T21:21:36.4018726Z"
}]`,
			want: schemas.DeadLetterRecord{
				Event: &schemas.Event{
					ID: "caee971c-3ca0-4254-8f99-1395b394588e", Type: "fooEventType", Subject: "mySubject",
					Source: "mysource", SpecVersion: "1.0",
				},
				Reason: schemas.MaxDeliveryAttemptsExceeded, DeliveryAttempts: 1, LastOutcome: schemas.NotFound,
				PublishTime: time.Date(2020, 8, 13, 21, 21, 36, 401872600, time.UTC),
			},
		},
		{
			name: "custom schema (seed 000)", in: schemas.Custom, topicID: topicID,
			body: `[{
    "id": "8bc07e6f-0885-4729-90e4-7c3f052bd754",
    "eventTime": "2020-08-13T18:11:29.4121391Z",
    "eventType": "myEventType",
    "dataVersion": "1.0",
    "metadataVersion": "1",
    "topic": "/subscriptions/x/resourceGroups/rgwithoutpolicy/providers/Microsoft.EventGrid/topics/myCustomSchemaTopic",
    "subject": "subjectDefault",
    "deadLetterReason": "MaxDeliveryAttemptsExceeded",
    "deliveryAttempts": 1,
    "lastDeliveryOutcome": "NotFound",
    "publishTime": "2020-08-13T18:11:29.4121391Z",
    "lastDeliveryAttemptTime": "2020-08-13T18:11:29.4277644Z",
    "data": {"prop1": "my property", "prop2": 5, "myEventType": "fooEventType"}
}]`,
			want: schemas.DeadLetterRecord{
				Event: &schemas.Event{
					ID: "8bc07e6f-0885-4729-90e4-7c3f052bd754", Type: "myEventType", Subject: "subjectDefault",
					Time: "2020-08-13T18:11:29.4121391Z", DataVersion: "1.0", Source: topicID,
					Raw: []byte(`{"prop1": "my property", "prop2": 5, "myEventType": "fooEventType"}`),
				},
				Reason: schemas.MaxDeliveryAttemptsExceeded, DeliveryAttempts: 1, LastOutcome: schemas.NotFound,
				PublishTime:     time.Date(2020, 8, 13, 18, 11, 29, 412139100, time.UTC),
				LastAttemptTime: time.Date(2020, 8, 13, 18, 11, 29, 427764400, time.UTC),
			},
		},
		{
			name: "namespace (seed 002)", in: schemas.CloudEvents, topicID: topicID,
			body: `[
  {
    "deadLetterProperties": {
      "deadletterreason": "Maximum delivery attempts was exceeded.",
      "deliveryattempts": 1,
      "deliveryresult": "Event was not acknowledged nor rejected.",
      "publishutc": "2023-11-01T20:33:51.4521467Z",
      "deliveryattemptutc": "2023-11-01T20:33:52.3692079Z"
    },
    "event": {
      "comexampleextension1": "value1",
      "id": "A234-1234-1234",
      "comexampleothervalue": "5",
      "datacontenttype": "text/xml",
      "specversion": "1.0",
      "time": "2018-04-05T17:31:00Z",
      "source": "/mycontext",
      "type": "com.example.someevent",
      "data": "<much wow=\"xml\"/>"
    }
  }
]`,
			want: schemas.DeadLetterRecord{
				Event: &schemas.Event{
					ID: "A234-1234-1234", Type: "com.example.someevent", Time: "2018-04-05T17:31:00Z",
					Source: "/mycontext", SpecVersion: "1.0",
				},
				Reason: schemas.MaxDeliveryAttemptsExceeded, DeliveryAttempts: 1, LastOutcome: schemas.GenericError,
				PublishTime:     time.Date(2023, 11, 1, 20, 33, 51, 452146700, time.UTC),
				LastAttemptTime: time.Date(2023, 11, 1, 20, 33, 52, 369207900, time.UTC),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, err := schemas.DecodeDeadLetters([]byte(tt.body), tt.in, tt.topicID)
			if err != nil {
				t.Fatalf("DecodeDeadLetters: %v", err)
			}
			if len(recs) != 1 {
				t.Fatalf("decoded %d records, want 1", len(recs))
			}
			got := recs[0]
			want := tt.want
			if tt.want.Event.Raw == nil {
				want.Event.Raw = got.Event.Raw // checked below by decoding
			}
			requireSameRecord(t, 0, got, want)
			if strings.Contains(string(got.Event.Raw), "deadLetterReason") || strings.Contains(string(got.Event.Raw), "deadletterreason") {
				t.Errorf("the event kept dead-letter members: %s", got.Event.Raw)
			}
		})
	}
}

func TestDecodeDeadLettersRefuses(t *testing.T) {
	const eg = `{"id":"1","subject":"s","eventType":"T","eventTime":"2024-01-01T00:00:00Z","data":{}`
	tests := []struct {
		name, body string
		in         schemas.Schema
		wantIndex  int
		wantText   string
	}{
		{"not an array", `{}`, schemas.EventGrid, -1, "is not a JSON array"},
		{"malformed", `[{"a":}]`, schemas.EventGrid, -1, "is not valid JSON"},
		{"not a record", `[` + eg + `}]`, schemas.EventGrid, 0, "is not a dead-letter record"},
		{"bad attempts", `[` + eg + `,"deadLetterReason":"X","deliveryAttempts":"3","publishTime":"2024-01-01T00:00:00Z"}]`, schemas.EventGrid, 0, "deliveryAttempts: must be a number"},
		{"bad time", `[` + eg + `,"deadLetterReason":"X","publishTime":"yesterday"}]`, schemas.EventGrid, 0, "publishTime: is not an RFC 3339 time"},
		{"Event Grid event on a CloudEvents topic", `[` + eg + `,"deadLetterReason":"X"}]`, schemas.CloudEvents, 0, "is not a CloudEvent"},
		{"invalid event", `[{"id":"1","deadLetterReason":"X"}]`, schemas.EventGrid, 0, "is required"},
		{"custom without object data", `[` + strings.Replace(eg, `"data":{}`, `"data":5`, 1) + `,"deadLetterReason":"X"}]`, schemas.Custom, 0, "published JSON object"},
		{"second record bad", `[` + eg + `,"deadLetterReason":"X"},` + eg + `,"deadLetterReason":7}]`, schemas.EventGrid, 1, "deadLetterReason: must be a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, err := schemas.DecodeDeadLetters([]byte(tt.body), tt.in, topicID)
			if err == nil {
				t.Fatalf("decoded %d records, want an error", len(recs))
			}
			if recs != nil {
				t.Errorf("got records with an error")
			}
			var de *schemas.DeadLetterDecodeError
			if !errors.As(err, &de) || de.Index != tt.wantIndex {
				t.Errorf("error %v: want a *DeadLetterDecodeError with index %d", err, tt.wantIndex)
			}
			if !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("error %q does not say %q", err, tt.wantText)
			}
		})
	}
}

// DecodeDeadLetterRecords decodes an object record by record: the records that cannot be
// decoded are described (index and reason, in order) and left out, the others returned; only
// an object that is not a JSON array fails as a whole.
func TestDecodeDeadLetterRecordsLeavesOutOnlyTheBadRecords(t *testing.T) {
	const topicID = "/subscriptions/s/resourceGroups/r/providers/Microsoft.EventGrid/topics/orders"
	rec := func(id string) string {
		return `{"id":"` + id + `","subject":"s","eventType":"T","eventTime":"2024-01-01T00:00:00Z","data":{},"deadLetterReason":"X"}`
	}
	body := `[` + rec("e1") + `,{"id":"2","deadLetterReason":"X"},` + rec("e3") + `,7,` + rec("e5") + `]`
	recs, bad, err := schemas.DecodeDeadLetterRecords([]byte(body), schemas.EventGrid, topicID)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.Event.ID)
	}
	if !slices.Equal(ids, []string{"e1", "e3", "e5"}) {
		t.Errorf("decoded %v, want e1, e3 and e5", ids)
	}
	if len(bad) != 2 || bad[0].Index != 1 || !strings.Contains(bad[0].Reason, "is required") || bad[1].Index != 3 {
		t.Errorf("bad records %v, want records 1 and 3 with their reasons", bad)
	}
	if _, err := schemas.DecodeDeadLetters([]byte(body), schemas.EventGrid, topicID); err == nil {
		t.Error("DecodeDeadLetters of an object with bad records: want an error")
	}
	if recs, bad, err := schemas.DecodeDeadLetterRecords([]byte(`[`+rec("e1")+`,{]`), schemas.EventGrid, topicID); err == nil || recs != nil || bad != nil {
		t.Errorf("an object that is not valid JSON: %d records, %v, %v; want only an error", len(recs), bad, err)
	}
}

func TestAppendDeadLettersRefusesImpossibleConversion(t *testing.T) {
	_, ce, _ := deadLetterInputs(t)
	if _, err := schemas.AppendDeadLetters(nil, schemas.DeadLetterFormat{Input: schemas.CloudEvents, Delivery: schemas.EventGrid}, []schemas.DeadLetterRecord{ce}); err == nil {
		t.Error("CloudEvents input dead-lettered as Event Grid schema: want an error")
	}
	if _, err := schemas.AppendDeadLetters(nil, schemas.DeadLetterFormat{Input: schemas.EventGrid, Delivery: schemas.EventGrid}, []schemas.DeadLetterRecord{{}}); err == nil {
		t.Error("a record without an event: want an error")
	}
}

func TestParseReasonAndOutcome(t *testing.T) {
	for _, r := range schemas.Reasons {
		got, err := schemas.ParseReason(strings.ToLower(string(r)))
		if err != nil || got != r {
			t.Errorf("ParseReason(%q) = %q, %v", strings.ToLower(string(r)), got, err)
		}
	}
	if _, err := schemas.ParseReason("Sunspots"); err == nil || !strings.Contains(err.Error(), "MaxDeliveryAttemptsExceeded") {
		t.Errorf("ParseReason(Sunspots) = %v, want an error listing the reasons", err)
	}
	for _, o := range []schemas.Outcome{schemas.BadRequest, schemas.Probation, schemas.URITooLong, schemas.GenericError} {
		got, err := schemas.ParseOutcome(strings.ToUpper(o.String()))
		if err != nil || got != o {
			t.Errorf("ParseOutcome(%q) = %v, %v", o, got, err)
		}
	}
	if _, err := schemas.ParseOutcome("Delivering"); err == nil {
		t.Error("ParseOutcome(Delivering): want an error")
	}
}

// FuzzDecodeDeadLetters: decoding never panics, and whatever decodes encodes again (in the
// topic's own schema) and decodes to the same events.
func FuzzDecodeDeadLetters(f *testing.F) {
	f.Add([]byte(`[{"id":"1","subject":"s","eventType":"T","eventTime":"2024-01-01T00:00:00Z","data":{},"deadLetterReason":"X","deliveryAttempts":2,"publishTime":"2024-01-01T00:00:00Z"}]`), uint8(1))
	f.Add([]byte(`[{"specversion":"1.0","id":"1","source":"/s","type":"T","deadletterreason":"X","publishtime":"2024-01-01T00:00:00.1234567Z"}]`), uint8(2))
	f.Add([]byte(`[{"deadLetterProperties":{"deadletterreason":"Maximum delivery attempts was exceeded.","deliveryattempts":1},"event":{"specversion":"1.0","id":"1","source":"/s","type":"T"}}]`), uint8(2))
	f.Add([]byte(`[{"id":"1","eventType":"T","data":{"a":1},"deadLetterReason":"X"}]`), uint8(3))
	f.Fuzz(func(t *testing.T, body []byte, schema uint8) {
		in := schemas.Schema(schema%3 + 1)
		recs, err := schemas.DecodeDeadLetters(body, in, topicID)
		if err != nil {
			return
		}
		out, err := schemas.AppendDeadLetters(nil, schemas.DeadLetterFormat{Input: in, Delivery: in, TopicID: topicID}, recs)
		if err != nil {
			t.Fatalf("decoded records do not encode: %v", err)
		}
		again, err := schemas.DecodeDeadLetters(out, in, topicID)
		if err != nil {
			t.Fatalf("re-encoded records do not decode: %v\n%s", err, out)
		}
		if len(again) != len(recs) {
			t.Fatalf("%d records became %d", len(recs), len(again))
		}
		for i := range recs {
			if again[i].Event.ID != recs[i].Event.ID || again[i].Reason != recs[i].Reason || again[i].DeliveryAttempts != recs[i].DeliveryAttempts {
				t.Fatalf("record %d changed: %+v became %+v", i, recs[i], again[i])
			}
		}
	})
}

// DeadLetterSizeBound is an upper bound of the encoded record in every layout, for every input
// and delivery schema, with the longest reason and with strings full of escapes.
func TestDeadLetterSizeBound(t *testing.T) {
	egs, ces, customs := encodeInputs(t)
	escapes := `\u0001\"\\\n\u2028`
	quotes := `q\"b\\` // what the attributes copied into headers may escape (a source cannot: it is a URI-reference)
	nastyEG, err := schemas.DecodeEventGrid([]byte(array(egEvent(`id="`+quotes+`"`, `subject="`+strings.Repeat(escapes, 20)+`"`, `eventType="`+quotes+`"`, `dataVersion="`+quotes+`"`))), topicID, schemas.ClassicLimits)
	if err != nil {
		t.Fatal(err)
	}
	nastyCE, err := schemas.DecodeCloudEvents([]byte(array(ceEvent(`id="`+quotes+`"`, `subject="`+strings.Repeat(escapes, 20)+`"`, `source="\/`+strings.Repeat("&", 40)+`"`))), schemas.ClassicLimits)
	if err != nil {
		t.Fatal(err)
	}
	inputs := map[schemas.Schema][]*schemas.Event{
		schemas.EventGrid:   append(egs, nastyEG...),
		schemas.CloudEvents: append(ces, nastyCE...),
		schemas.Custom:      customs,
	}
	records := func(e *schemas.Event) []schemas.DeadLetterRecord {
		return []schemas.DeadLetterRecord{
			{Event: e, Reason: schemas.UndeliverableDueToProbationCausedByClientError, DeliveryAttempts: 1 << 40,
				LastOutcome: schemas.InvalidDestination, LastHTTPStatus: 1 << 30, PublishTime: dlPublish, LastAttemptTime: dlAttempt},
			{Event: e, Reason: schemas.TimeToLiveExceeded, PublishTime: dlPublish},
			{Event: e, Reason: schemas.Reason(strings.Repeat(escapes, 10)), DeliveryAttempts: 3, PublishTime: dlPublish},
		}
	}
	for _, in := range []schemas.Schema{schemas.EventGrid, schemas.CloudEvents, schemas.Custom} {
		for _, out := range []schemas.Schema{schemas.EventGrid, schemas.CloudEvents, schemas.Custom} {
			if !schemas.CanDeliver(in, out) {
				continue
			}
			for _, namespace := range []bool{false, true} {
				for _, topic := range []string{topicID, ""} {
					f := schemas.DeadLetterFormat{Input: in, Delivery: out, Namespace: namespace, TopicID: topic}
					for i, e := range inputs[in] {
						recs := records(e)
						body, err := schemas.AppendDeadLetters(nil, f, recs)
						if err != nil {
							t.Fatalf("%+v event %d: %v", f, i, err)
						}
						bound := 1 // the closing bracket; each record's bound counts its comma or the opening one
						for j := range recs {
							one, err := schemas.AppendDeadLetters(nil, f, recs[j:j+1])
							if err != nil {
								t.Fatal(err)
							}
							b := schemas.DeadLetterSizeBound(f, &recs[j])
							if len(one)-1 > b {
								t.Errorf("%+v event %d record %d: %d bytes written, bound %d", f, i, j, len(one)-1, b)
							}
							bound += b
						}
						if len(body) > bound {
							t.Errorf("%+v event %d: the object takes %d bytes, its records' bounds %d", f, i, len(body), bound)
						}
					}
				}
			}
		}
	}
}
