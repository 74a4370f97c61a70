package sinks

import "errors"

// ErrDestinationDenied is wrapped by the error of a connection that egrid's egress policy
// (sinks/egress) refused: the destination's address is one egrid must not connect to. A sink
// classifies it as schemas.InvalidDestination — nothing sent to that address can ever get
// through while the policy stands, so retrying is pointless (the namespace profile never
// retries it; every profile puts the endpoint on a 10-minute client-error probation).
var ErrDestinationDenied = errors.New("destination denied by the egress policy")
