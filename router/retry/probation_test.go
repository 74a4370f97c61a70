package retry_test

import (
	"testing"
	"time"

	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/schemas"
)

func TestProbationTable(t *testing.T) {
	tests := []struct {
		outcome     schemas.Outcome
		want        time.Duration // 0: no probation from one failure
		clientError bool
	}{
		{schemas.Busy, 10 * s, false},
		{schemas.TimedOut, 10 * s, false},
		{schemas.SocketError, 30 * s, false},
		{schemas.NotFound, 5 * m, true},
		{schemas.ResolutionError, 5 * m, true},
		{schemas.Unauthorized, 5 * m, true},
		{schemas.Forbidden, 5 * m, true},
		{schemas.Disabled, 5 * m, false},
		{schemas.Full, 5 * m, false},
		{schemas.InvalidDestination, 10 * m, true},
		{schemas.GenericError, 0, false},
		{schemas.BadRequest, 0, false},
		{schemas.PayloadTooLarge, 0, false},
		{schemas.URITooLong, 0, false},
		{schemas.Aborted, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.outcome.String(), func(t *testing.T) {
			if d, ok := retry.ProbationDuration(tt.outcome); d != tt.want || ok != (tt.want != 0) {
				t.Errorf("ProbationDuration = %s, %v; want %s", d, ok, tt.want)
			}
			if got := retry.IsClientError(tt.outcome); got != tt.clientError {
				t.Errorf("IsClientError = %v, want %v", got, tt.clientError)
			}

			var p retry.Probation
			p.Failed(tt.outcome, t0, 0)
			if tt.want == 0 {
				if st := p.State(t0); st != retry.Healthy || !p.Until().IsZero() || p.ClientError() {
					t.Fatalf("one %s failure: state %s, until %s, client error %v; want Healthy", tt.outcome, st, p.Until(), p.ClientError())
				}
				return
			}
			if !p.Until().Equal(t0.Add(tt.want)) {
				t.Fatalf("Until = +%s, want +%s", p.Until().Sub(t0), tt.want)
			}
			if p.Cause() != tt.outcome || p.ClientError() != tt.clientError {
				t.Fatalf("Cause %s, ClientError %v; want %s, %v", p.Cause(), p.ClientError(), tt.outcome, tt.clientError)
			}
			for _, c := range []struct {
				at     time.Duration
				state  retry.ProbationState
				active bool
			}{
				{0, retry.OnProbation, true},
				{tt.want - time.Nanosecond, retry.OnProbation, true},
				{tt.want, retry.AwaitingProbe, false},
				{tt.want + time.Hour, retry.AwaitingProbe, false},
			} {
				now := t0.Add(c.at)
				if st := p.State(now); st != c.state || p.Active(now) != c.active {
					t.Errorf("at +%s: state %s, active %v; want %s, %v", c.at, st, p.Active(now), c.state, c.active)
				}
			}
		})
	}
}

func TestProbationTimeScale(t *testing.T) {
	var p retry.Probation
	p.Failed(schemas.NotFound, t0, 60)
	if got := p.Until().Sub(t0); got != 5*s {
		t.Fatalf("5m probation at time scale 60 lasts %s, want 5s", got)
	}
}

func TestProbationProbeCycle(t *testing.T) {
	var p retry.Probation
	p.Failed(schemas.SocketError, t0, 0) // 30 s

	// Too early: no probe starts.
	p.ProbeStarted(t0.Add(29 * s))
	if p.Probing() || p.State(t0.Add(29*s)) != retry.OnProbation {
		t.Fatal("a probe started while still on probation")
	}

	probeAt := t0.Add(30 * s)
	p.ProbeStarted(probeAt)
	if !p.Probing() || p.State(probeAt) != retry.ProbeInFlight || p.Active(probeAt) {
		t.Fatalf("after ProbeStarted: probing %v, state %s, active %v", p.Probing(), p.State(probeAt), p.Active(probeAt))
	}
	if !p.ProbeStartedAt().Equal(probeAt) {
		t.Fatalf("ProbeStartedAt = %s, want %s", p.ProbeStartedAt(), probeAt)
	}
	// Nothing else goes out while the probe is in flight, however long it takes.
	if st := p.State(probeAt.Add(time.Hour)); st != retry.ProbeInFlight {
		t.Fatalf("state an hour into the probe = %s, want ProbeInFlight", st)
	}

	// The probe fails: probation again, for the new outcome's duration.
	p.Failed(schemas.Busy, probeAt.Add(s), 0)
	if p.Probing() || p.State(probeAt.Add(s)) != retry.OnProbation || !p.Until().Equal(probeAt.Add(11*s)) || p.Cause() != schemas.Busy {
		t.Fatalf("after a failed probe: probing %v, state %s, until +%s, cause %s", p.Probing(), p.State(probeAt.Add(s)), p.Until().Sub(probeAt), p.Cause())
	}

	// The next probe succeeds: healthy, everything reset.
	p.ProbeStarted(probeAt.Add(11 * s))
	p.Succeeded()
	if p.State(probeAt.Add(11*s)) != retry.Healthy || !p.Until().IsZero() || p.Cause() != 0 || p.ConsecutiveFailures() != 0 || p.Probing() {
		t.Fatalf("after a successful probe: %+v", p)
	}
}

func TestProbationFailedProbeWithoutTableEntry(t *testing.T) {
	// A probe that fails with an outcome that has no table entry, before the
	// consecutive-failures threshold, still re-enters probation: for as long as before.
	var p retry.Probation
	p.Failed(schemas.Forbidden, t0, 0) // 5 m, client error
	probeAt := t0.Add(5 * m)
	p.ProbeStarted(probeAt)
	p.Failed(schemas.GenericError, probeAt, 0)
	if st := p.State(probeAt); st != retry.OnProbation || !p.Until().Equal(probeAt.Add(5*m)) {
		t.Fatalf("state %s until +%s, want OnProbation for 5m", st, p.Until().Sub(probeAt))
	}
	if p.Cause() != schemas.GenericError || p.ClientError() {
		t.Fatalf("cause %s, client error %v; want GenericError, false", p.Cause(), p.ClientError())
	}

	// A GenericError that is not a probe's result does not put a healthy endpoint on
	// probation, nor one awaiting its probe.
	var q retry.Probation
	q.Failed(schemas.Busy, t0, 0)
	q.Failed(schemas.GenericError, t0.Add(time.Minute), 0)
	if st := q.State(t0.Add(time.Minute)); st != retry.AwaitingProbe {
		t.Fatalf("state %s, want AwaitingProbe", st)
	}
}

func TestProbationConsecutiveFailures(t *testing.T) {
	var p retry.Probation
	now := t0
	for i := 1; i < retry.ConsecutiveFailureThreshold; i++ {
		p.Failed(schemas.GenericError, now, 0)
		if st := p.State(now); st != retry.Healthy {
			t.Fatalf("after %d failures: state %s, want Healthy", i, st)
		}
		if p.ConsecutiveFailures() != i {
			t.Fatalf("ConsecutiveFailures = %d, want %d", p.ConsecutiveFailures(), i)
		}
	}
	p.Failed(schemas.GenericError, now, 0)
	if st := p.State(now); st != retry.OnProbation || !p.Until().Equal(now.Add(time.Minute)) {
		t.Fatalf("after 10 failures: state %s until +%s, want OnProbation for 1m", st, p.Until().Sub(now))
	}
	if p.Cause() != schemas.GenericError || p.ClientError() {
		t.Fatalf("cause %s, client error %v", p.Cause(), p.ClientError())
	}

	// Each failed probe doubles the probation, up to 4 h.
	want := []time.Duration{2 * m, 4 * m, 8 * m, 16 * m, 32 * m, 64 * m, 128 * m, 4 * h, 4 * h, 4 * h, 4 * h}
	for i, w := range want {
		now = p.Until()
		p.ProbeStarted(now)
		if !p.Probing() {
			t.Fatalf("probe %d did not start", i+1)
		}
		p.Failed(schemas.GenericError, now, 0)
		if got := p.Until().Sub(now); got != w {
			t.Fatalf("after failed probe %d: probation %s, want %s", i+1, got, w)
		}
	}

	// Success resets everything: it takes 10 new failures to get back on probation, and
	// the duration starts again at 1 m.
	p.Succeeded()
	for range retry.ConsecutiveFailureThreshold - 1 {
		p.Failed(schemas.GenericError, t0, 0)
	}
	if st := p.State(t0); st != retry.Healthy {
		t.Fatalf("9 failures after a success: state %s, want Healthy", st)
	}
	p.Failed(schemas.GenericError, t0, 0)
	if got := p.Until().Sub(t0); got != time.Minute {
		t.Fatalf("probation after reset = %s, want 1m", got)
	}
}

func TestProbationConsecutiveRuleMeetsTable(t *testing.T) {
	// Ten Busy answers in a row: the first nine give 10 s each, the tenth brings the
	// consecutive-failures rule in force and its 1 m is longer, so it wins.
	var p retry.Probation
	now := t0
	for i := 1; i <= retry.ConsecutiveFailureThreshold; i++ {
		p.ProbeStarted(now)
		p.Failed(schemas.Busy, now, 0)
		want := 10 * s
		if i == retry.ConsecutiveFailureThreshold {
			want = time.Minute
		}
		if got := p.Until().Sub(now); got != want {
			t.Fatalf("failure %d: probation %s, want %s", i, got, want)
		}
		now = p.Until()
	}
	// And a table entry longer than the consecutive duration wins over it.
	p.ProbeStarted(now)
	p.Failed(schemas.InvalidDestination, now, 0)
	if got := p.Until().Sub(now); got != 10*m || !p.ClientError() {
		t.Fatalf("InvalidDestination probe failure: %s, client error %v; want 10m, true", got, p.ClientError())
	}
}

func TestProbationLateFailures(t *testing.T) {
	// Batches sent before the probation began can fail during it. They never shorten it;
	// one that would end later extends it and takes over the cause.
	var p retry.Probation
	p.Failed(schemas.NotFound, t0, 0) // until +5m, client error
	p.Failed(schemas.Busy, t0.Add(time.Minute), 0)
	if !p.Until().Equal(t0.Add(5*m)) || p.Cause() != schemas.NotFound || !p.ClientError() {
		t.Fatalf("a shorter late failure changed the probation: until +%s, cause %s", p.Until().Sub(t0), p.Cause())
	}
	p.Failed(schemas.Busy, t0.Add(5*m-5*s), 0)
	if !p.Until().Equal(t0.Add(5*m+5*s)) || p.Cause() != schemas.Busy || p.ClientError() {
		t.Fatalf("a longer late failure did not extend: until +%s, cause %s", p.Until().Sub(t0), p.Cause())
	}
}

func TestProbationIgnoresCanceled(t *testing.T) {
	var p retry.Probation
	for range 2 * retry.ConsecutiveFailureThreshold {
		p.Failed(schemas.Canceled, t0, 0)
		p.Failed(schemas.Delivered, t0, 0)
	}
	if p.State(t0) != retry.Healthy || p.ConsecutiveFailures() != 0 {
		t.Fatalf("Canceled/Delivered counted as failures: state %s, consecutive %d", p.State(t0), p.ConsecutiveFailures())
	}
}

func TestProbationEnd(t *testing.T) {
	var p retry.Probation
	for range retry.ConsecutiveFailureThreshold {
		p.Failed(schemas.Unauthorized, t0, 0)
	}
	if !p.Active(t0) || !p.ClientError() {
		t.Fatal("not on a client-error probation")
	}
	p.End()
	if p.Active(t0) || p.State(t0) != retry.Healthy || p.ClientError() || p.ConsecutiveFailures() != 0 || !p.Until().IsZero() {
		t.Fatalf("after End: %+v", p)
	}
	// One more failure of a kind outside the table does not bring it back.
	p.Failed(schemas.GenericError, t0, 0)
	if p.State(t0) != retry.Healthy {
		t.Fatal("End did not reset the consecutive-failures count")
	}
}

func TestProbationStateString(t *testing.T) {
	for st, want := range map[retry.ProbationState]string{
		retry.Healthy:            "Healthy",
		retry.OnProbation:        "OnProbation",
		retry.AwaitingProbe:      "AwaitingProbe",
		retry.ProbeInFlight:      "ProbeInFlight",
		retry.ProbationState(42): "ProbationState(42)",
	} {
		if got := st.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}

func TestProbationLeavesEventsFaultsAlone(t *testing.T) {
	var p retry.Probation
	for range 2 * retry.ConsecutiveFailureThreshold {
		p.Failed(schemas.BadRequest, t0, 0)
		p.Failed(schemas.PayloadTooLarge, t0, 0)
	}
	if p.State(t0) != retry.Healthy || p.ConsecutiveFailures() != 0 {
		t.Fatalf("400 and 413 counted against the endpoint: state %s, consecutive %d", p.State(t0), p.ConsecutiveFailures())
	}
	// They neither count nor reset: nine failures, a 400, and one more failure make ten.
	for range retry.ConsecutiveFailureThreshold - 1 {
		p.Failed(schemas.GenericError, t0, 0)
	}
	p.Failed(schemas.BadRequest, t0, 0)
	p.Failed(schemas.GenericError, t0, 0)
	if p.State(t0) != retry.OnProbation {
		t.Fatalf("state %s after ten failures around a 400, want OnProbation", p.State(t0))
	}
	// A probe refused for its events' own fault shows the endpoint answering: healthy again.
	at := p.Until()
	p.ProbeStarted(at)
	p.Failed(schemas.BadRequest, at.Add(s), 0)
	if p.State(at.Add(s)) != retry.Healthy || p.ConsecutiveFailures() != 0 || p.Probing() {
		t.Fatalf("after a probe answered 400: state %s, consecutive %d, probing %v; want healthy", p.State(at.Add(s)), p.ConsecutiveFailures(), p.Probing())
	}
}
