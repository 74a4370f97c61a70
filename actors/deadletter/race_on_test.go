//go:build race

package deadletter_test

const raceEnabled = true
