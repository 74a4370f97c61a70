package schemas_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/egridio/egrid/schemas"
)

// A decode lists its first 20 problems and counts them all, and the events that have them, so
// a client learns how many of its events are bad.
func TestProblemsAreCounted(t *testing.T) {
	bad := func(n int, changes ...string) string {
		es := make([]string, n)
		for i := range es {
			es[i] = egEvent(changes...)
		}
		return array(es...)
	}
	ceBad := func(n int) string {
		es := make([]string, n)
		for i := range es {
			es[i] = ceEvent(`time="x"`)
		}
		return array(es...)
	}
	for name, c := range map[string]struct {
		decode                func() error
		listed, total, events int
	}{
		"5000 events with a bad eventTime": {func() error {
			_, err := schemas.DecodeEventGrid([]byte(bad(5000, `eventTime="x"`)), topicID, schemas.ClassicLimits)
			return err
		}, 20, 5000, 5000},
		"21 events with a bad eventTime": {func() error {
			_, err := schemas.DecodeEventGrid([]byte(bad(21, `eventTime="x"`)), topicID, schemas.ClassicLimits)
			return err
		}, 20, 21, 21},
		"20 events with two problems each": {func() error {
			_, err := schemas.DecodeEventGrid([]byte(bad(20, `-id`, `eventTime="x"`)), topicID, schemas.ClassicLimits)
			return err
		}, 20, 40, 20},
		"3 events": {func() error {
			_, err := schemas.DecodeEventGrid([]byte(array(egEvent(`eventTime="x"`, `-id`), egEvent(), egEvent(`-subject`))), topicID, schemas.ClassicLimits)
			return err
		}, 3, 3, 2},
		"CloudEvents": {func() error {
			_, err := schemas.DecodeCloudEvents([]byte(ceBad(1000)), schemas.NamespaceLimits)
			return err
		}, 20, 1000, 1000},
		"custom": {func() error {
			m := &schemas.InputMapping{EventTime: schemas.FieldMapping{SourceField: "ts"}, EventType: schemas.FieldMapping{DefaultValue: "T"}}
			_, err := schemas.DecodeCustom([]byte("["+strings.Repeat(`{"ts":"x"},`, 99)+`{"ts":"x"}]`), m, topicID, schemas.ClassicLimits, ids(), customNow)
			return err
		}, 20, 100, 100},
	} {
		t.Run(name, func(t *testing.T) {
			err := c.decode()
			if got := len(schemas.ValidationErrors(err)); got != c.listed {
				t.Errorf("%d problems listed, want %d", got, c.listed)
			}
			var pe *schemas.ProblemsError
			if !errors.As(err, &pe) {
				t.Fatalf("got %T %v, want a *ProblemsError", err, err)
			}
			if pe.Total != c.total || pe.Events != c.events || len(pe.Problems) != c.listed {
				t.Errorf("Total %d, Events %d, %d listed; want %d, %d, %d", pe.Total, pe.Events, len(pe.Problems), c.total, c.events, c.listed)
			}
		})
	}
}

// A binary-mode publish of many bad ce-* headers lists the first 20 problems by attribute
// name, whatever order the headers came in (a map's), and counts them all. Before, the 20
// listed were whichever map order gave first.
func TestBinaryProblemsAreTheFirstByName(t *testing.T) {
	attrs := map[string]string{"specversion": "1.0", "id": "1", "source": "/s", "type": "t"}
	for i := range 30 {
		attrs[fmt.Sprintf("bad_%02d", i)] = "x"
	}
	_, err := schemas.DecodeCloudEventBinary(attrs, "application/json", []byte(`{}`), schemas.NamespaceLimits)
	var pe *schemas.ProblemsError
	if !errors.As(err, &pe) || pe.Total != 30 || pe.Events != 1 || len(pe.Problems) != 20 {
		t.Fatalf("got %v, want a ProblemsError of 30 problems in 1 event, 20 listed", err)
	}
	for i, e := range schemas.ValidationErrors(err) {
		if want := fmt.Sprintf("bad_%02d", i); e.Field != want {
			t.Errorf("problem %d names %q, want %q", i, e.Field, want)
		}
	}
}

// Problems found outside a decoder are listed as a decode lists its own: the first 20, in
// the order given, and a count of them all.
func TestProblemsOfAFrontEnd(t *testing.T) {
	if err := schemas.Problems(nil); err != nil {
		t.Errorf("no problems: %v, want nil", err)
	}
	one := &schemas.ValidationError{Index: 0, Field: "ce-id", Reason: "is sent in 2 headers"}
	if err := schemas.Problems([]*schemas.ValidationError{one}); err != one {
		t.Errorf("one problem: %v, want it", err)
	}
	var errs []*schemas.ValidationError
	for i := range 5000 {
		errs = append(errs, &schemas.ValidationError{Index: 0, Field: fmt.Sprintf("ce-x%04d", i), Reason: "is sent in 2 headers"})
	}
	err := schemas.Problems(errs)
	var pe *schemas.ProblemsError
	if !errors.As(err, &pe) || pe.Total != 5000 || pe.Events != 1 || len(pe.Problems) != 20 || pe.Problems[19] != errs[19] {
		t.Fatalf("got %#v, want the first 20 of 5000 problems of one event", err)
	}
	if msg := err.Error(); !strings.HasSuffix(msg, "and 4980 more problems, not listed") || len(msg) > 4096 {
		t.Errorf("the message is %d bytes ending %q", len(msg), msg[max(0, len(msg)-60):])
	}
}
