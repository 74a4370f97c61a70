package schemas_test

import (
	"fmt"
	"reflect"
	"strconv"
	"testing"

	"github.com/egridio/egrid/schemas"
)

// roundTripDataVersions are dataVersions a fragment cannot hold as they are, or that look
// percent-encoded already, next to plain ones.
var roundTripDataVersions = []string{"1.0", "v 1", "100%", "é", "a#b", "%41", "%2", "%%", "a%2541", ""}

// eventString shows e with its Raw as text.
func eventString(e *schemas.Event) string {
	c := *e
	c.Raw = nil
	return fmt.Sprintf("%+v raw %s", c, e.Raw)
}

// An Event Grid or custom-schema event delivered as a CloudEvent carries "#"+dataVersion as its
// dataschema, percent-encoded where a fragment cannot hold a byte. Dead-lettered in that form
// and decoded for replay, it carries exactly the dataVersion it was published with.
func TestDeadLetteredAsCloudEventKeepsDataVersion(t *testing.T) {
	mapping := &schemas.InputMapping{
		ID:          schemas.FieldMapping{SourceField: "id"},
		EventType:   schemas.FieldMapping{DefaultValue: "Orders.Created"},
		DataVersion: schemas.FieldMapping{SourceField: "v"},
	}
	for _, dv := range roundTripDataVersions {
		t.Run(strconv.Quote(dv), func(t *testing.T) {
			eg, err := schemas.DecodeEventGrid([]byte(array(egEvent(`dataVersion=`+strconv.Quote(dv)))), topicID, schemas.ClassicLimits)
			if err != nil {
				t.Fatal(err)
			}
			custom, err := schemas.DecodeCustom([]byte(`[{"id":"o-1","v":`+strconv.Quote(dv)+`}]`), mapping, topicID, schemas.ClassicLimits, ids(), customNow)
			if err != nil {
				t.Fatal(err)
			}
			for _, tt := range []struct {
				in schemas.Schema
				ev *schemas.Event
			}{{schemas.EventGrid, eg[0]}, {schemas.Custom, custom[0]}} {
				if tt.ev.DataVersion != dv {
					t.Fatalf("%v: published with dataVersion %q, decoded %q", tt.in, dv, tt.ev.DataVersion)
				}
				rec := schemas.DeadLetterRecord{Event: tt.ev, Reason: schemas.MaxDeliveryAttemptsExceeded, DeliveryAttempts: 1, LastOutcome: schemas.GenericError, PublishTime: dlPublish}
				body, err := schemas.AppendDeadLetters(nil, schemas.DeadLetterFormat{Input: tt.in, Delivery: schemas.CloudEvents, TopicID: topicID}, []schemas.DeadLetterRecord{rec})
				if err != nil {
					t.Fatal(err)
				}
				recs, err := schemas.DecodeDeadLetters(body, tt.in, topicID)
				if err != nil {
					t.Fatalf("%v: DecodeDeadLetters(%s): %v", tt.in, body, err)
				}
				if got := recs[0].Event; !reflect.DeepEqual(*got, *tt.ev) {
					t.Errorf("%v: the record %s decodes to\n%s\nwant\n%s", tt.in, body, eventString(got), eventString(tt.ev))
				}
			}
		})
	}
}

// A record written before the fragment was percent-encoded holds "#"+dataVersion as it was: a
// bare '%' in it does not decode and is kept.
func TestDeadLetterWithUnencodedFragmentKeepsIt(t *testing.T) {
	for _, schema := range []string{"#100%", "#%zz", "#v 1", "#é"} {
		body := `[{"specversion":"1.0","type":"T","source":"` + topicID + `","id":"e1","time":"2024-05-01T12:00:00Z","subject":"s","dataschema":"` + schema + `","datacontenttype":"application/json","data":{},"deadletterreason":"MaxDeliveryAttemptsExceeded","deliveryattempts":1,"lastdeliveryoutcome":"NotFound","publishtime":"2024-05-01T12:00:00Z"}]`
		recs, err := schemas.DecodeDeadLetters([]byte(body), schemas.EventGrid, topicID)
		if err != nil {
			t.Fatalf("dataschema %q: %v", schema, err)
		}
		if got := recs[0].Event.DataVersion; got != schema[1:] {
			t.Errorf("dataschema %q decodes to dataVersion %q, want %q", schema, got, schema[1:])
		}
	}
}

// storedCase is a dead-letter record (one array element) and the event it holds.
type storedCase struct {
	name   string
	in     schemas.Schema
	record string
	want   schemas.Event
}

// Dead-letter records written by an earlier release hold what that release accepted at
// publish, which today's publish may refuse: a source or dataschema that is no URI-reference,
// a time with a ',' before its fraction, a lower-case "t" or "z". They decode for replay, and
// the event comes back as it was stored.
func TestDecodeDeadLettersTakesRecordsOfEarlierReleases(t *testing.T) {
	const ceFacts = `,"deadletterreason":"MaxDeliveryAttemptsExceeded","deliveryattempts":1,"lastdeliveryoutcome":"NotFound","publishtime":"2024-05-01T12:00:00Z"}`
	const egFacts = `,"deadLetterReason":"MaxDeliveryAttemptsExceeded","deliveryAttempts":1,"lastDeliveryOutcome":"NotFound","publishTime":"2024-05-01T12:00:00Z"}`
	egRaw := func(eventTime, dataVersion string) string {
		return `{"id":"e1","topic":"` + topicID + `","subject":"s","eventType":"T","eventTime":"` + eventTime + `","data":{"n":1},"dataVersion":"` + dataVersion + `","metadataVersion":"1"}`
	}
	// converted is how an Event Grid or custom event was delivered as a CloudEvent.
	converted := func(time, dataschema string) string {
		return `{"specversion":"1.0","type":"T","source":"` + topicID + `","id":"e1","time":"` + time + `","subject":"s","dataschema":"` + dataschema + `","datacontenttype":"application/json","data":{"n":1}`
	}
	var tests []storedCase
	for _, ce := range []struct{ name, event, source, time string }{
		{"source with a space", `{"specversion":"1.0","id":"c1","source":"my source","type":"T","time":"2024-05-01T12:00:00Z","data":{}`, "my source", "2024-05-01T12:00:00Z"},
		{"time with a ',' fraction", `{"specversion":"1.0","id":"c1","source":"/s","type":"T","time":"2024-05-01T12:00:00,5Z","data":{}`, "/s", "2024-05-01T12:00:00,5Z"},
		{"dataschema with a space", `{"specversion":"1.0","id":"c1","source":"/s","type":"T","dataschema":"#1 0","data":{}`, "/s", ""},
		{"time with lower-case t and z", `{"specversion":"1.0","id":"c1","source":"/s","type":"T","time":"2024-05-01t12:00:00z","data":{}`, "/s", "2024-05-01t12:00:00z"},
		{"time with offset +24:00", `{"specversion":"1.0","id":"c1","source":"/s","type":"T","time":"2024-05-01T12:00:00+24:00","data":{}`, "/s", "2024-05-01T12:00:00+24:00"},
	} {
		tests = append(tests, storedCase{"CloudEvents: " + ce.name, schemas.CloudEvents, ce.event + ceFacts,
			schemas.Event{ID: "c1", Type: "T", Time: ce.time, Source: ce.source, SpecVersion: "1.0", Raw: []byte(ce.event + "}")}})
	}
	for _, eventTime := range []string{"2024-05-01T12:00:00,5Z", "2024-05-01t12:00:00z", "2024-05-01T12:00:00+24:00"} {
		raw := egRaw(eventTime, "1.0")
		tests = append(tests, storedCase{"Event Grid: eventTime " + eventTime, schemas.EventGrid, raw[:len(raw)-1] + egFacts,
			schemas.Event{ID: "e1", Type: "T", Subject: "s", Time: eventTime, DataVersion: "1.0", Source: topicID, Raw: []byte(raw)}})
		tests = append(tests, storedCase{"Event Grid as CloudEvents: time " + eventTime, schemas.EventGrid, converted(eventTime, "#1 0") + ceFacts,
			schemas.Event{ID: "e1", Type: "T", Subject: "s", Time: eventTime, DataVersion: "1 0", Source: topicID, Raw: []byte(egRaw(eventTime, "1 0"))}})
		tests = append(tests, storedCase{"custom: eventTime " + eventTime, schemas.Custom, `{"id":"e1","topic":"` + topicID + `","subject":"s","eventType":"T","eventTime":"` + eventTime + `","data":{"n":1},"dataVersion":"1 0","metadataVersion":"1"` + egFacts,
			schemas.Event{ID: "e1", Type: "T", Subject: "s", Time: eventTime, DataVersion: "1 0", Source: topicID, Raw: []byte(`{"n":1}`)}})
		tests = append(tests, storedCase{"custom as CloudEvents: time " + eventTime, schemas.Custom, converted(eventTime, "#1 0") + ceFacts,
			schemas.Event{ID: "e1", Type: "T", Subject: "s", Time: eventTime, DataVersion: "1 0", Source: topicID, Raw: []byte(`{"n":1}`)}})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, err := schemas.DecodeDeadLetters([]byte("["+tt.record+"]"), tt.in, topicID)
			if err != nil {
				t.Fatalf("DecodeDeadLetters: %v", err)
			}
			if got := *recs[0].Event; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("decodes to\n%s\nwant\n%s", eventString(&got), eventString(&tt.want))
			}
		})
	}
}

// A publish stays strict: what a dead-letter record may hold from an earlier release is still
// refused when it is published.
func TestPublishRefusesWhatOnlyStoredRecordsMayHold(t *testing.T) {
	for _, ev := range []string{
		ceEvent(`source="my source"`),
		ceEvent(`time="2024-05-01T12:00:00,5Z"`),
		ceEvent(`dataschema="#1 0"`),
	} {
		if _, err := schemas.DecodeCloudEvents([]byte(array(ev)), schemas.ClassicLimits); err == nil {
			t.Errorf("DecodeCloudEvents(%s) took it", ev)
		}
	}
	if _, err := schemas.DecodeEventGrid([]byte(array(egEvent(`eventTime="2024-05-01T12:00:00,5Z"`))), topicID, schemas.ClassicLimits); err == nil {
		t.Errorf("DecodeEventGrid took an eventTime with a ',' fraction")
	}
}
