package actors

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/schemas"
)

// storedProbation is the form a subscription's probation state takes in the store
// ([store.Update.Probation]), JSON so that it reads in a dump of the store. Cause is the
// outcome's number (schemas.Outcome's wire values are fixed) and durations are nanoseconds.
type storedProbation struct {
	Version      int       `json:"v"`
	Cause        uint8     `json:"cause,omitempty"`
	Until        time.Time `json:"until,omitzero"`
	Base         int64     `json:"base,omitempty"`
	Consecutive  int       `json:"consecutive,omitempty"`
	Escalated    bool      `json:"escalated,omitempty"`
	Doublings    int       `json:"doublings,omitempty"`
	Probing      bool      `json:"probing,omitempty"`
	ProbeStarted time.Time `json:"probeStarted,omitzero"`
}

const storedProbationVersion = 1

// encodeProbation returns the stored form of snap: an empty non-nil slice, which clears the
// stored state, for a healthy endpoint with no failures counted.
func encodeProbation(snap retry.ProbationSnapshot) []byte {
	if snap == (retry.ProbationSnapshot{}) {
		return []byte{}
	}
	b, err := json.Marshal(storedProbation{
		Version: storedProbationVersion, Cause: uint8(snap.Cause), Until: snap.Until,
		Base: int64(snap.Base), Consecutive: snap.ConsecutiveFailures, Escalated: snap.Escalated,
		Doublings: snap.Doublings, Probing: snap.Probing, ProbeStarted: snap.ProbeStarted,
	})
	if err != nil {
		panic(fmt.Errorf("encoding probation state: %w", err)) // plain data: cannot fail
	}
	return b
}

// decodeProbation reads what encodeProbation wrote.
func decodeProbation(b []byte) (retry.ProbationSnapshot, error) {
	var sp storedProbation
	if err := json.Unmarshal(b, &sp); err != nil {
		return retry.ProbationSnapshot{}, fmt.Errorf("decoding probation state: %w", err)
	}
	if sp.Version != storedProbationVersion {
		return retry.ProbationSnapshot{}, fmt.Errorf("decoding probation state: unknown version %d (this build reads %d)", sp.Version, storedProbationVersion)
	}
	return retry.ProbationSnapshot{
		Cause: schemas.Outcome(sp.Cause), Until: sp.Until, Base: time.Duration(sp.Base),
		ConsecutiveFailures: sp.Consecutive, Escalated: sp.Escalated, Doublings: sp.Doublings,
		Probing: sp.Probing, ProbeStarted: sp.ProbeStarted,
	}, nil
}
