package store

import (
	"errors"
	"time"
)

// ErrInsufficientStorage is returned (wrapped, with what to do) by an Append refused because
// the disk holding the store is below its free-space floor, and is matched by [ErrDiskFull].
// The router answers 507 Insufficient Storage; nothing of the request was accepted.
var ErrInsufficientStorage = errors.New("store: not enough free disk space")

// ErrUnavailable is wrapped by the errors of writes a store refuses because it cannot write
// to its storage now (a failed disk write; the disk store recovers by itself). Callers answer
// 503 and retry later, or 507 when the error also matches [ErrInsufficientStorage] (a write
// that failed on a full disk: [ErrDiskFull]).
var ErrUnavailable = errors.New("store: unavailable")

// ErrDiskFull is wrapped by the errors of writes a store refuses after a write to disk failed
// because the disk was full (no space left, or the quota of egrid's user used up). It
// matches both [ErrUnavailable] (the store refuses writes until it has recovered) and
// [ErrInsufficientStorage] (the router answers 507: the operator frees disk space).
var ErrDiskFull error = diskFullError{}

// diskFullError is [ErrDiskFull]: a comparable value whose message does not repeat the
// messages of the sentinels it matches.
type diskFullError struct{}

func (diskFullError) Error() string { return "the disk holding the store is full" }

func (diskFullError) Unwrap() []error { return []error{ErrInsufficientStorage, ErrUnavailable} }

// HealthState says whether a store takes writes.
type HealthState int

// Health states, from best to worst.
const (
	// Healthy: every call works.
	Healthy HealthState = iota
	// LowSpace: the disk is below the store's free-space floor; Appends are refused with
	// [ErrInsufficientStorage], everything else works.
	LowSpace
	// Failed: a write to disk failed. Appends and definition changes are refused (with
	// [ErrDiskFull] when the disk was full, else with [ErrUnavailable]); reads
	// work, so stored events are still delivered, and subscription state writes are kept in
	// memory until the store is back. A store that can recover (the disk store reopens
	// itself from its write-ahead log once the disk has room) goes back to Healthy by itself.
	// A store on a server (the JetStream store) is Failed while it is not connected to it:
	// every call is refused until it has reconnected by itself.
	Failed
)

// String returns "healthy", "low-space" or "failed".
func (s HealthState) String() string {
	switch s {
	case Healthy:
		return "healthy"
	case LowSpace:
		return "low-space"
	case Failed:
		return "failed"
	default:
		return "unknown"
	}
}

// MarshalText encodes the state as its String, for JSON.
func (s HealthState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Health is a snapshot of a store's health, for status APIs and readiness probes.
type Health struct {
	State HealthState `json:"state"`
	// Reason says what is wrong and what to do, empty when Healthy.
	Reason string `json:"reason,omitempty"`
	// Since is when State was entered (zero when Healthy since the start).
	Since time.Time `json:"since,omitzero"`
	// FreeBytes is the free space on the store's file system at the latest check (0 when
	// unknown or not applicable); MinFreeBytes is the floor below which Appends are refused
	// (0: none).
	FreeBytes    uint64 `json:"freeBytes,omitempty"`
	MinFreeBytes uint64 `json:"minFreeBytes,omitempty"`
	// Recoveries counts the times the store reopened itself after a failed write.
	Recoveries int `json:"recoveries,omitempty"`
	// Corruptions counts the pieces of damage the store found (each logged as an ERROR
	// saying what was lost and how to recover).
	Corruptions int `json:"corruptions,omitempty"`
}

// HealthReporter is implemented by stores that can report their health (the disk and
// JetStream stores). A store without it is taken to be always Healthy.
type HealthReporter interface {
	// Health returns the store's current health. It does no I/O beyond a file-system
	// statistics call and is safe for concurrent use.
	Health() Health
}
