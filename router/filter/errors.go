package filter

import (
	"errors"
	"fmt"

	"github.com/egridio/egrid/schemas/clip"
)

// Sentinels for the problems [Compile] reports; test with errors.Is. Each reported error
// wraps exactly one of them.
var (
	// ErrUnknownOperator means operatorType is missing or names no operator.
	ErrUnknownOperator = errors.New("unknown operatorType")
	// ErrMissingValue means the operator needs "value" or "values" and has none.
	ErrMissingValue = errors.New("missing value")
	// ErrInvalidValue means a value has the wrong type for the operator, is given in "value"
	// where the operator takes "values" (or the reverse), is not finite, or is a range whose
	// low end is above its high end.
	ErrInvalidValue = errors.New("invalid value")
	// ErrValueTooLong means a string value is longer than [MaxStringValueLength] characters.
	ErrValueTooLong = errors.New("string value too long")
	// ErrInvalidKey means the key is empty, has an empty segment, or names no field of the
	// topic's input schema.
	ErrInvalidKey = errors.New("invalid key")
	// ErrTooManyFilters means there are more than [MaxAdvancedFilters] advanced filters.
	ErrTooManyFilters = errors.New("too many advanced filters")
	// ErrTooManyValues means there are more than [MaxFilterValues] values across all advanced
	// filters.
	ErrTooManyValues = errors.New("too many filter values")
	// ErrInvalidEventType means an entry of includedEventTypes is empty.
	ErrInvalidEventType = errors.New("invalid event type")
	// ErrTooLong means a subject filter, an event type or an advanced filter's key is longer
	// than its bound ([MaxSubjectFilterLength], [MaxEventTypeLength], [MaxKeyLength]);
	// [CheckSize] reports it.
	ErrTooLong = errors.New("too long")
	// ErrTooManyEventTypes means includedEventTypes has more than [MaxIncludedEventTypes]
	// entries; [CheckSize] reports it.
	ErrTooManyEventTypes = errors.New("too many event types")
)

// AdvancedFilterError is a problem with one advanced filter. Its message names the filter
// the way a user finds it in their definition:
//
//	advancedFilters[3] (NumberIn on "data.n"): invalid value: values[1] must be a number, got string "5"
type AdvancedFilterError struct {
	// Index is the filter's position in advancedFilters, from 0.
	Index int
	// OperatorType is the operator as written (its ARM name when it was recognised).
	OperatorType string
	// Key is the filter's key as written.
	Key string
	// Err says what is wrong; it wraps one of the package's sentinels.
	Err error
}

// Error returns `advancedFilters[i] (Operator on "key"): problem`.
func (e *AdvancedFilterError) Error() string {
	op := e.OperatorType
	if op == "" {
		op = "?"
	}
	return fmt.Sprintf("advancedFilters[%d] (%s on %q): %v", e.Index, clip.String(op), clip.String(e.Key), e.Err)
}

// Unwrap returns the problem, so errors.Is finds the sentinel.
func (e *AdvancedFilterError) Unwrap() error { return e.Err }
