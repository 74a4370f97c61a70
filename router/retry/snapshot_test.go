package retry_test

import (
	"testing"
	"time"

	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/schemas"
)

func TestProbationSnapshotRoundTrip(t *testing.T) {
	escalated := func() retry.Probation {
		var p retry.Probation
		for i := range retry.ConsecutiveFailureThreshold {
			p.Failed(schemas.GenericError, t0.Add(time.Duration(i)*s), 0)
		}
		// Two failed probes: the consecutive-failures probation has doubled twice.
		for range 2 {
			p.ProbeStarted(p.Until())
			p.Failed(schemas.GenericError, p.Until(), 0)
		}
		return p
	}
	tests := []struct {
		name string
		p    func() retry.Probation
	}{
		{name: "healthy", p: func() retry.Probation { return retry.Probation{} }},
		{name: "failures below threshold", p: func() retry.Probation {
			var p retry.Probation
			p.Failed(schemas.GenericError, t0, 0)
			p.Failed(schemas.GenericError, t0, 0)
			return p
		}},
		{name: "client error", p: func() retry.Probation {
			var p retry.Probation
			p.Failed(schemas.NotFound, t0, 0)
			return p
		}},
		{name: "escalated", p: escalated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orig := tt.p()
			snap := orig.Snapshot()
			restored := retry.RestoreProbation(snap)
			if got := restored.Snapshot(); got != snap {
				t.Fatalf("restored snapshot = %+v, want %+v", got, snap)
			}
			// Both go on the same way: a probe after the period fails once more.
			at := orig.Until().Add(s)
			for _, p := range []*retry.Probation{&orig, &restored} {
				p.ProbeStarted(at)
				p.Failed(schemas.GenericError, at, 0)
			}
			if a, b := orig.Snapshot(), restored.Snapshot(); a != b {
				t.Fatalf("after one more failure: restored %+v, original %+v", b, a)
			}
		})
	}
}

func TestRestoreProbationProbeInFlight(t *testing.T) {
	var p retry.Probation
	p.Failed(schemas.Busy, t0, 0)
	probeAt := p.Until()
	p.ProbeStarted(probeAt)
	snap := p.Snapshot()
	if !snap.Probing || !snap.ProbeStarted.Equal(probeAt) {
		t.Fatalf("snapshot of a probe in flight = %+v", snap)
	}
	r := retry.RestoreProbation(snap)
	later := probeAt.Add(time.Hour)
	if st := r.State(later); st != retry.AwaitingProbe || r.Probing() || !r.ProbeStartedAt().IsZero() {
		t.Fatalf("restored probe in flight: state %s, probing %v; want AwaitingProbe", st, r.Probing())
	}
	if !r.Until().Equal(p.Until()) || r.Cause() != schemas.Busy {
		t.Fatalf("restored until %s cause %s, want %s %s", r.Until(), r.Cause(), p.Until(), schemas.Busy)
	}
}
