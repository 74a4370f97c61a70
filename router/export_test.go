package router

// Trimming constants, for the black-box tests of journal trimming.
const (
	TrimStep    = trimStep
	TrimIdleMax = trimIdleMax
)
