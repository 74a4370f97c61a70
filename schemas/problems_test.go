package schemas_test

import (
	"errors"
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
