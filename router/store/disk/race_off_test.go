//go:build !race

package disk_test

const raceEnabled = false
