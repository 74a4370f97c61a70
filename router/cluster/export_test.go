package cluster

// For the black-box tests.
var (
	ListKeys    = listKeys
	StreamKeys  = streamKeys
	UntilLeader = untilLeader
)
