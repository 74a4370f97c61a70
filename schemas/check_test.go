package schemas_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/egridio/egrid/schemas"
)

// topicID is the ARM resource ID of the topic the tests publish to.
const topicID = "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg/providers/Microsoft.EventGrid/topics/orders"

// wantProblem is an expected *schemas.ValidationError: Index and Field exactly, Reason as a
// substring.
type wantProblem struct {
	index  int
	field  string
	reason string
}

// checkProblems asserts that err is exactly the validation errors in want, in order.
func checkProblems(t *testing.T, err error, want []wantProblem) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %d validation errors", len(want))
	}
	var tooLarge *schemas.TooLargeError
	var tooMany *schemas.TooManyEventsError
	if errors.As(err, &tooLarge) || errors.As(err, &tooMany) {
		t.Fatalf("got %T %v, want validation errors", err, err)
	}
	got := schemas.ValidationErrors(err)
	if len(got) != len(want) {
		t.Fatalf("got %d validation errors, want %d:\n%v", len(got), len(want), err)
	}
	for i, w := range want {
		g := got[i]
		if g.Index != w.index || g.Field != w.field || !strings.Contains(g.Reason, w.reason) {
			t.Errorf("error %d = {Index: %d, Field: %q, Reason: %q}, want {Index: %d, Field: %q, Reason containing %q}",
				i, g.Index, g.Field, g.Reason, w.index, w.field, w.reason)
		}
	}
}

// members builds a JSON object from ordered "name": value pairs: base members are kept in
// order, changes of the form `name=<json>` replace or add a member and `-name` removes one.
func members(base []string, changes ...string) string {
	type kv struct{ k, v string }
	var ms []kv
	for _, b := range base {
		k, v, _ := strings.Cut(b, "=")
		ms = append(ms, kv{k, v})
	}
	for _, c := range changes {
		if name, ok := strings.CutPrefix(c, "-"); ok {
			for i := range ms {
				if ms[i].k == name {
					ms = append(ms[:i], ms[i+1:]...)
					break
				}
			}
			continue
		}
		k, v, _ := strings.Cut(c, "=")
		replaced := false
		for i := range ms {
			if ms[i].k == k {
				ms[i].v, replaced = v, true
			}
		}
		if !replaced {
			ms = append(ms, kv{k, v})
		}
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + m.k + `":` + m.v)
	}
	b.WriteByte('}')
	return b.String()
}

// egBase is a valid Event Grid schema event.
var egBase = []string{`id="e1"`, `subject="/orders/1"`, `eventType="Orders.Created"`, `eventTime="2024-05-01T12:00:00Z"`, `data={"n":1}`}

// egEvent returns a valid Event Grid event with changes applied (see members).
func egEvent(changes ...string) string { return members(egBase, changes...) }

// ceBase is a valid CloudEvent.
var ceBase = []string{`specversion="1.0"`, `id="c1"`, `source="/orders"`, `type="Orders.Created"`}

// ceEvent returns a valid CloudEvent with changes applied (see members).
func ceEvent(changes ...string) string { return members(ceBase, changes...) }

// array joins JSON values into a JSON array.
func array(values ...string) string { return "[" + strings.Join(values, ",") + "]" }
