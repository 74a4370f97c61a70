package retry

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/egridio/egrid/schemas"
)

// Names of the built-in profiles, as a subscription names them (SPEC §2.1).
const (
	// NameEventGrid names [EventGrid], the default for every topic that is not a namespace topic.
	NameEventGrid = "eventgrid"
	// NameEventGrid2019 names [EventGrid2019].
	NameEventGrid2019 = "eventgrid-2019"
	// NameNamespace names [Namespace], the default for namespace topics.
	NameNamespace = "namespace"
)

// customPrefix starts the name of a profile made by [CustomProfile].
const customPrefix = "custom:"

// Profile is a retry profile as data: one column of the table in SPEC §2.1. The built-in
// constructors return a fresh value each call, so a caller may change its copy without touching
// anyone else's. A hand-built or edited profile should pass [Profile.Validate].
type Profile struct {
	// Name identifies the profile: one of the Name* constants, or "custom:<base>" for a profile
	// made by [CustomProfile].
	Name string

	// Schedule holds the delay after failed attempt n (1-based) at Schedule[n-1].
	Schedule []time.Duration
	// Tail is the delay after every failed attempt past the end of Schedule.
	Tail time.Duration

	// NeverRetry holds the HTTP statuses that end a delivery at once: the event is
	// dead-lettered, or dropped when no dead-letter destination is configured.
	NeverRetry map[int]bool
	// NeverRetryOutcomes holds the connection-level outcomes that end a delivery at once, for
	// failures a request can never get past (the namespace profile's invalid URL or TLS name
	// mismatch, reported as schemas.InvalidDestination).
	NeverRetryOutcomes map[schemas.Outcome]bool
	// DeadLetterAtOnceIfConfigured holds the HTTP statuses that end a delivery at once only
	// when a dead-letter destination is configured, and are retried otherwise (the 2019
	// documents' 400 and 413, seeds 003 and 004).
	DeadLetterAtOnceIfConfigured map[int]bool

	// Floors maps an HTTP status to the minimum delay before the next attempt.
	Floors map[int]time.Duration
	// DefaultFloor is the minimum delay after any failure whose status has no entry in Floors,
	// including failures without an HTTP response.
	DefaultFloor time.Duration
	// UnflooredRetries is how many first retries go out at their schedule delay with no
	// floor (Floors and DefaultFloor apply from retry UnflooredRetries+1 on): the namespace
	// profile's 1, for seed 002's "0 s (immediate retry)".
	UnflooredRetries int

	// MaxAttemptsLimit is the largest maxDeliveryAttempts a subscription may set (the smallest
	// is 1), and DefaultMaxAttempts the value used when it sets none.
	MaxAttemptsLimit, DefaultMaxAttempts int

	// MinTTL and MaxTTL bound the event time to live a subscription may set; DefaultTTL is the
	// value used when it sets none. The time to live is measured from the publish time.
	MinTTL, MaxTTL, DefaultTTL time.Duration

	// WaitOnClientErrorProbation makes the events that come due while a client error
	// (Unauthorized, Forbidden, NotFound, ResolutionError, InvalidDestination) keeps the
	// endpoint on probation wait for it to end, as during any other probation, instead of
	// ending without an attempt (SPEC §2.2): the 2019 profile, whose documents retry 401, 403
	// and 404 after 5 minutes; ending new events unattempted while the event that met the 401
	// is retried would contradict them.
	WaitOnClientErrorProbation bool
}

// EventGrid returns the default profile, Event Grid's current documented behaviour (SPEC §2.1,
// eventgrid-behaviour.md §6.2-6.5): delays 10 s, 30 s, 1 m, 5 m, 10 m, 30 m, 1 h, 3 h, 6 h, then
// 12 h repeating; 400, 401, 403, 404 and 413 are never retried; floors 408: 2 m, 503: 30 s,
// anything else 10 s; maxDeliveryAttempts 1..30 (default 30); time to live 1..1440 minutes
// (default 1440).
func EventGrid() *Profile {
	return &Profile{
		Name: NameEventGrid,
		Schedule: []time.Duration{
			10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute, 10 * time.Minute,
			30 * time.Minute, time.Hour, 3 * time.Hour, 6 * time.Hour,
		},
		Tail:                         12 * time.Hour,
		NeverRetry:                   statusSet(400, 401, 403, 404, 413),
		NeverRetryOutcomes:           map[schemas.Outcome]bool{},
		DeadLetterAtOnceIfConfigured: map[int]bool{},
		Floors:                       map[int]time.Duration{408: 2 * time.Minute, 503: 30 * time.Second},
		DefaultFloor:                 10 * time.Second,
		MaxAttemptsLimit:             30,
		DefaultMaxAttempts:           30,
		MinTTL:                       time.Minute,
		MaxTTL:                       1440 * time.Minute,
		DefaultTTL:                   1440 * time.Minute,
	}
}

// EventGrid2019 returns the profile of the 2019 documents (SPEC §2.1, seeds 003 and 004):
// delays 10 s, 30 s, 1 m, 5 m, 10 m, 30 m, 1 h, then 1 h repeating; no status is always final,
// but 400 and 413 end a delivery at once when a dead-letter destination is configured (and are
// retried otherwise); floors 400/401/403/404: 5 m, 408: 2 m, 503: 30 s, anything else 10 s;
// limits as [EventGrid].
func EventGrid2019() *Profile {
	return &Profile{
		Name: NameEventGrid2019,
		Schedule: []time.Duration{
			10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute, 10 * time.Minute,
			30 * time.Minute, time.Hour,
		},
		Tail:                         time.Hour,
		NeverRetry:                   map[int]bool{},
		NeverRetryOutcomes:           map[schemas.Outcome]bool{},
		DeadLetterAtOnceIfConfigured: statusSet(400, 413),
		Floors: map[int]time.Duration{
			400: 5 * time.Minute, 401: 5 * time.Minute, 403: 5 * time.Minute, 404: 5 * time.Minute,
			408: 2 * time.Minute, 503: 30 * time.Second,
		},
		DefaultFloor:       10 * time.Second,
		MaxAttemptsLimit:   30,
		DefaultMaxAttempts: 30,
		MinTTL:             time.Minute,
		MaxTTL:             1440 * time.Minute,
		DefaultTTL:         1440 * time.Minute,

		WaitOnClientErrorProbation: true,
	}
}

// Namespace returns the profile of namespace-topic push delivery (SPEC §2.1, seed 002):
// delays 0 s, 10 s, 30 s, 1 m, 5 m, then 5 m repeating; 400, 401, 403, 404, 413 and 414 and
// the outcome schemas.InvalidDestination are never retried; floors 408: 2 m, 503: 30 s,
// anything else 10 s, from the second retry on; maxDeliveryAttempts 1..10 (default 10); time to live PT1M..P7D (default
// P1D).
//
// The first retry follows seed 002's schedule, "0 s (立即重试, immediate retry)": no status
// floor applies to it (UnflooredRetries 1), so it goes out as soon as the first attempt has
// failed — unless the failure put the endpoint on probation (Busy, TimedOut, SocketError:
// 10-30 s, SPEC §2.2), which holds it like any other delivery. The floors apply from the
// second retry on.
func Namespace() *Profile {
	return &Profile{
		Name: NameNamespace,
		Schedule: []time.Duration{
			0, 10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute,
		},
		Tail:                         5 * time.Minute,
		NeverRetry:                   statusSet(400, 401, 403, 404, 413, 414),
		NeverRetryOutcomes:           map[schemas.Outcome]bool{schemas.InvalidDestination: true},
		DeadLetterAtOnceIfConfigured: map[int]bool{},
		Floors:                       map[int]time.Duration{408: 2 * time.Minute, 503: 30 * time.Second},
		DefaultFloor:                 10 * time.Second,
		UnflooredRetries:             1,
		MaxAttemptsLimit:             10,
		DefaultMaxAttempts:           10,
		MinTTL:                       time.Minute,
		MaxTTL:                       7 * 24 * time.Hour,
		DefaultTTL:                   24 * time.Hour,
	}
}

// ErrUnknownProfile is returned (wrapped) by [ProfileByName] for a name that is not a built-in
// profile.
var ErrUnknownProfile = errors.New("unknown retry profile")

// Names returns the names of the built-in profiles, default first.
func Names() []string {
	return []string{NameEventGrid, NameEventGrid2019, NameNamespace}
}

// ProfileByName returns a fresh copy of the built-in profile called name, matched
// case-insensitively as ARM matches enum values. The empty name gives [EventGrid]. An unknown
// name gives an error wrapping [ErrUnknownProfile] that lists the valid names.
func ProfileByName(name string) (*Profile, error) {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "", NameEventGrid:
		return EventGrid(), nil
	case NameEventGrid2019:
		return EventGrid2019(), nil
	case NameNamespace:
		return Namespace(), nil
	}
	return nil, fmt.Errorf("%w %q: use one of %s", ErrUnknownProfile, name, strings.Join(Names(), ", "))
}

// CustomProfile returns a profile with the user's own schedule — delays after failed attempts
// 1..len(schedule), then tail repeating — and everything else (never-retried statuses, floors,
// limits) copied from base. Its name is "custom:" followed by base's name. Floors still apply,
// so a delay below a status's floor is raised to it. The result is validated: delays must not be
// negative, tail must be positive, and no delay may exceed base's longest time to live (such a
// delay could never be followed by an attempt).
func CustomProfile(base *Profile, schedule []time.Duration, tail time.Duration) (*Profile, error) {
	if base == nil {
		return nil, errors.New("custom retry profile: no base profile: start from retry.EventGrid(), retry.EventGrid2019() or retry.Namespace()")
	}
	p := base.clone()
	p.Name = customPrefix + strings.TrimPrefix(base.Name, customPrefix)
	p.Schedule = slices.Clone(schedule)
	p.Tail = tail
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("custom retry profile: %w", err)
	}
	return p, nil
}

// ScheduleDelay returns the scheduled delay after failed attempt n (1-based): Schedule[n-1],
// or Tail once the schedule has run out. An n below 1 is treated as 1. Floors, Retry-After,
// jitter and the time scale are applied by [Policy.AfterFailure], not here.
func (p *Profile) ScheduleDelay(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	if n <= len(p.Schedule) {
		return p.Schedule[n-1]
	}
	return p.Tail
}

// Floor returns the minimum delay after a failure with HTTP status code (0 when there was no
// HTTP response): its entry in Floors, else DefaultFloor.
func (p *Profile) Floor(code int) time.Duration {
	if d, ok := p.Floors[code]; ok {
		return d
	}
	return p.DefaultFloor
}

// Validate checks that the profile is usable and reports every problem at once, each as a
// *[FieldError] joined with errors.Join.
func (p *Profile) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	if p.Name == "" {
		bad("name", "is empty: name the profile")
	}
	longest := p.MaxTTL
	delayOK := func(d time.Duration) bool { return d >= 0 && (longest <= 0 || d <= longest) }
	// checkDelay names the field (field formatted with index) only when d is wrong: a router
	// validates a policy at every subscription it creates or restores.
	checkDelay := func(d time.Duration, field string, index int) {
		if delayOK(d) {
			return
		}
		if index >= 0 {
			field = fmt.Sprintf(field, index)
		}
		switch {
		case d < 0:
			bad(field, "is %s: a delay cannot be negative", d)
		default:
			bad(field, "is %s: longer than the longest time to live (%s), so no attempt could follow it", d, longest)
		}
	}
	for i, d := range p.Schedule {
		checkDelay(d, "schedule[%d]", i)
	}
	if p.Tail <= 0 {
		bad("tail", "is %s: the repeating delay must be positive", p.Tail)
	} else {
		checkDelay(p.Tail, "tail", -1)
	}
	floorsOK := true
	for _, d := range p.Floors {
		floorsOK = floorsOK && delayOK(d)
	}
	if !floorsOK { // reported in code order
		for _, code := range slices.Sorted(maps.Keys(p.Floors)) {
			checkDelay(p.Floors[code], "floors[%d]", code)
		}
	}
	checkDelay(p.DefaultFloor, "defaultFloor", -1)
	if p.MaxAttemptsLimit < 1 {
		bad("maxAttemptsLimit", "is %d: must be at least 1", p.MaxAttemptsLimit)
	}
	if p.DefaultMaxAttempts < 1 || p.DefaultMaxAttempts > max(p.MaxAttemptsLimit, 1) {
		bad("defaultMaxAttempts", "is %d: must be between 1 and maxAttemptsLimit (%d)", p.DefaultMaxAttempts, p.MaxAttemptsLimit)
	}
	if p.MinTTL <= 0 {
		bad("minTTL", "is %s: must be positive", p.MinTTL)
	}
	if p.MaxTTL < p.MinTTL {
		bad("maxTTL", "is %s: must not be below minTTL (%s)", p.MaxTTL, p.MinTTL)
	}
	if p.DefaultTTL < p.MinTTL || p.DefaultTTL > p.MaxTTL {
		bad("defaultTTL", "is %s: must be between minTTL (%s) and maxTTL (%s)", p.DefaultTTL, p.MinTTL, p.MaxTTL)
	}
	return errors.Join(errs...)
}

// clone returns a deep copy of p.
func (p *Profile) clone() *Profile {
	c := *p
	c.Schedule = slices.Clone(p.Schedule)
	c.NeverRetry = maps.Clone(p.NeverRetry)
	c.NeverRetryOutcomes = maps.Clone(p.NeverRetryOutcomes)
	c.DeadLetterAtOnceIfConfigured = maps.Clone(p.DeadLetterAtOnceIfConfigured)
	c.Floors = maps.Clone(p.Floors)
	return &c
}

// statusSet returns a set of HTTP status codes.
func statusSet(codes ...int) map[int]bool {
	s := make(map[int]bool, len(codes))
	for _, c := range codes {
		s[c] = true
	}
	return s
}
