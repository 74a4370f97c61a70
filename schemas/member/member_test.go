package member_test

import (
	"testing"

	"github.com/egridio/egrid/schemas/member"
)

func TestProblem(t *testing.T) {
	for _, c := range []struct {
		name string
		u    member.Unknown
		want string
	}{
		{"nested", member.Unknown{Path: "properties.retryPolicy.bogus", Parent: "properties.retryPolicy", Known: []string{"maxDeliveryAttempts", "eventTimeToLiveInMinutes"}, Document: "the body"},
			`"properties.retryPolicy.bogus" is not a member of properties.retryPolicy: check its spelling (properties.retryPolicy takes maxDeliveryAttempts and eventTimeToLiveInMinutes)`},
		{"at the top", member.Unknown{Path: "bogus", Known: []string{"since", "until", "dryRun"}, Document: "the body"},
			`"bogus" is not a member of the body: check its spelling (the body takes since, until and dryRun)`},
		{"of nothing", member.Unknown{Path: "a.b", Parent: "a", Document: "the config"},
			`"a.b" is not a member of a: check its spelling (a takes no members)`},
	} {
		if got := c.u.Problem(); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}

func TestList(t *testing.T) {
	for _, c := range []struct {
		names []string
		want  string
	}{
		{nil, "no members"},
		{[]string{"a"}, "a"},
		{[]string{"a", "b"}, "a and b"},
		{[]string{"a", "b", "c"}, "a, b and c"},
	} {
		if got := member.List(c.names); got != c.want {
			t.Errorf("List(%q) = %q, want %q", c.names, got, c.want)
		}
	}
}
