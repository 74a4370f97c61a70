package retry_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/schemas"
)

const (
	s = time.Second
	m = time.Minute
	h = time.Hour
)

// scheduleOf spells out the expected delay after failed attempts 1..n: the listed head, then
// tail repeating.
func scheduleOf(n int, tail time.Duration, head ...time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		if i < len(head) {
			out[i] = head[i]
		} else {
			out[i] = tail
		}
	}
	return out
}

func TestProfileScheduleDelay(t *testing.T) {
	tests := []struct {
		name    string
		profile *retry.Profile
		want    []time.Duration // after attempts 1..31
	}{
		{
			name:    "eventgrid",
			profile: retry.EventGrid(),
			want:    scheduleOf(31, 12*h, 10*s, 30*s, 1*m, 5*m, 10*m, 30*m, 1*h, 3*h, 6*h),
		},
		{
			name:    "eventgrid-2019",
			profile: retry.EventGrid2019(),
			want:    scheduleOf(31, 1*h, 10*s, 30*s, 1*m, 5*m, 10*m, 30*m, 1*h),
		},
		{
			name:    "namespace",
			profile: retry.Namespace(),
			want:    scheduleOf(31, 5*m, 0, 10*s, 30*s, 1*m, 5*m),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i, want := range tt.want {
				n := i + 1
				if got := tt.profile.ScheduleDelay(n); got != want {
					t.Errorf("ScheduleDelay(%d) = %s, want %s", n, got, want)
				}
			}
			if got, want := tt.profile.ScheduleDelay(0), tt.want[0]; got != want {
				t.Errorf("ScheduleDelay(0) = %s, want the first delay %s", got, want)
			}
		})
	}
}

func TestProfileLimits(t *testing.T) {
	tests := []struct {
		profile                      *retry.Profile
		limit, defaultAttempts       int
		minTTL, maxTTL, defaultTTL   time.Duration
		wantName                     string
		floor408, floor503, floorAny time.Duration
	}{
		{retry.EventGrid(), 30, 30, 1 * m, 1440 * m, 1440 * m, "eventgrid", 2 * m, 30 * s, 10 * s},
		{retry.EventGrid2019(), 30, 30, 1 * m, 1440 * m, 1440 * m, "eventgrid-2019", 2 * m, 30 * s, 10 * s},
		{retry.Namespace(), 10, 10, 1 * m, 7 * 24 * h, 24 * h, "namespace", 2 * m, 30 * s, 10 * s},
	}
	for _, tt := range tests {
		t.Run(tt.wantName, func(t *testing.T) {
			p := tt.profile
			if p.Name != tt.wantName {
				t.Errorf("Name = %q, want %q", p.Name, tt.wantName)
			}
			if p.MaxAttemptsLimit != tt.limit || p.DefaultMaxAttempts != tt.defaultAttempts {
				t.Errorf("attempts limit/default = %d/%d, want %d/%d", p.MaxAttemptsLimit, p.DefaultMaxAttempts, tt.limit, tt.defaultAttempts)
			}
			if p.MinTTL != tt.minTTL || p.MaxTTL != tt.maxTTL || p.DefaultTTL != tt.defaultTTL {
				t.Errorf("TTL min/max/default = %s/%s/%s, want %s/%s/%s", p.MinTTL, p.MaxTTL, p.DefaultTTL, tt.minTTL, tt.maxTTL, tt.defaultTTL)
			}
			if got := p.Floor(408); got != tt.floor408 {
				t.Errorf("Floor(408) = %s, want %s", got, tt.floor408)
			}
			if got := p.Floor(503); got != tt.floor503 {
				t.Errorf("Floor(503) = %s, want %s", got, tt.floor503)
			}
			for _, code := range []int{0, 429, 500, 502} {
				if got := p.Floor(code); got != tt.floorAny {
					t.Errorf("Floor(%d) = %s, want %s", code, got, tt.floorAny)
				}
			}
			if err := p.Validate(); err != nil {
				t.Errorf("built-in profile does not validate: %v", err)
			}
		})
	}
}

func TestBuiltInProfilesAreFreshCopies(t *testing.T) {
	a := retry.EventGrid()
	a.Schedule[0] = time.Hour
	a.NeverRetry[500] = true
	a.Floors[408] = 0
	b := retry.EventGrid()
	if b.Schedule[0] != 10*s || b.NeverRetry[500] || b.Floors[408] != 2*m {
		t.Fatalf("changing one EventGrid() value changed the next: %+v", b)
	}
	// The zero Policy's default profile is not reachable, so it is unaffected too.
	var p retry.Policy
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	p.NoJitter = true
	if d := p.AfterFailure(retry.Failure{Outcome: schemas.GenericError, StatusCode: 500}, 1, "e", now, now); d.At != now.Add(10*s) {
		t.Fatalf("zero Policy retried at %s, want +10s", d.At.Sub(now))
	}
}

func TestProfileByName(t *testing.T) {
	tests := []struct {
		name     string
		wantName string
		wantErr  bool
	}{
		{name: "eventgrid", wantName: "eventgrid"},
		{name: "EventGrid", wantName: "eventgrid"},
		{name: "", wantName: "eventgrid"},
		{name: "eventgrid-2019", wantName: "eventgrid-2019"},
		{name: "EVENTGRID-2019", wantName: "eventgrid-2019"},
		{name: " Namespace ", wantName: "namespace"},
		{name: "eventgrid2019", wantErr: true},
		{name: "azure", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := retry.ProfileByName(tt.name)
			if tt.wantErr {
				if !errors.Is(err, retry.ErrUnknownProfile) {
					t.Fatalf("err = %v, want ErrUnknownProfile", err)
				}
				for _, valid := range retry.Names() {
					if !strings.Contains(err.Error(), valid) {
						t.Errorf("error %q does not list valid name %q", err, valid)
					}
				}
				if !strings.Contains(err.Error(), tt.name) {
					t.Errorf("error %q does not name the bad value %q", err, tt.name)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Name != tt.wantName {
				t.Fatalf("Name = %q, want %q", p.Name, tt.wantName)
			}
		})
	}
}

func TestCustomProfile(t *testing.T) {
	base := retry.Namespace()
	custom, err := retry.CustomProfile(base, []time.Duration{time.Minute, 2 * time.Minute}, 15*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if custom.Name != "custom:namespace" {
		t.Errorf("Name = %q, want custom:namespace", custom.Name)
	}
	for n, want := range map[int]time.Duration{1: m, 2: 2 * m, 3: 15 * m, 30: 15 * m} {
		if got := custom.ScheduleDelay(n); got != want {
			t.Errorf("ScheduleDelay(%d) = %s, want %s", n, got, want)
		}
	}
	// The status policy comes from the base.
	if !custom.NeverRetry[414] || !custom.NeverRetryOutcomes[schemas.InvalidDestination] || custom.MaxAttemptsLimit != 10 {
		t.Errorf("custom profile lost the base's status policy: %+v", custom)
	}
	// And is a copy: changing it leaves the base alone.
	custom.NeverRetry[500] = true
	if base.NeverRetry[500] {
		t.Error("changing the custom profile changed its base")
	}
	// A custom profile of a custom profile keeps one prefix.
	again, err := retry.CustomProfile(custom, nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if again.Name != "custom:namespace" {
		t.Errorf("Name = %q, want custom:namespace", again.Name)
	}
}

func TestCustomProfileInvalid(t *testing.T) {
	tests := []struct {
		name       string
		base       *retry.Profile
		schedule   []time.Duration
		tail       time.Duration
		wantFields []string
	}{
		{name: "nil base", base: nil, tail: m},
		{name: "negative delay", base: retry.EventGrid(), schedule: []time.Duration{s, -s}, tail: m, wantFields: []string{"schedule[1]"}},
		{name: "zero tail", base: retry.EventGrid(), tail: 0, wantFields: []string{"tail"}},
		{name: "every problem at once", base: retry.EventGrid(), schedule: []time.Duration{-s, 25 * h}, tail: -m, wantFields: []string{"schedule[0]", "schedule[1]", "tail"}},
		{name: "delay beyond the longest TTL", base: retry.Namespace(), tail: 8 * 24 * h, wantFields: []string{"tail"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := retry.CustomProfile(tt.base, tt.schedule, tt.tail)
			if err == nil {
				t.Fatal("CustomProfile accepted an invalid schedule")
			}
			if got := fieldsOf(err); tt.wantFields != nil && !slices.Equal(got, tt.wantFields) {
				t.Fatalf("fields = %v, want %v (error: %v)", got, tt.wantFields, err)
			}
		})
	}
}

func TestProfileValidate(t *testing.T) {
	p := &retry.Profile{
		Schedule:           []time.Duration{-s},
		Floors:             map[int]time.Duration{503: -s},
		DefaultFloor:       -s,
		MaxAttemptsLimit:   0,
		DefaultMaxAttempts: 5,
		MinTTL:             0,
		MaxTTL:             -m,
		DefaultTTL:         m,
	}
	want := []string{"name", "schedule[0]", "tail", "floors[503]", "defaultFloor", "maxAttemptsLimit", "defaultMaxAttempts", "minTTL", "maxTTL", "defaultTTL"}
	if got := fieldsOf(p.Validate()); !slices.Equal(got, want) {
		t.Fatalf("fields = %v, want %v", got, want)
	}
}

// fieldsOf lists the Field of every *retry.FieldError in err's tree, depth first.
func fieldsOf(err error) []string {
	var out []string
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if fe, ok := e.(*retry.FieldError); ok {
			out = append(out, fe.Field)
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, c := range u.Unwrap() {
				walk(c)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}
