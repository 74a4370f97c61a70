package filter

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// CheckSize reports every part of s larger than its size bound, at once (joined errors, each
// wrapping [ErrTooLong] or [ErrTooManyEventTypes]; an oversize key is an
// *[AdvancedFilterError]): subjectBeginsWith and subjectEndsWith longer than
// [MaxSubjectFilterLength] characters, more than [MaxIncludedEventTypes] event types or one
// longer than [MaxEventTypeLength], an advanced filter's key longer than [MaxKeyLength].
// Messages give the size and the bound, never the oversize text.
//
// The bounds apply to a definition being created or updated; [Compile] does not check them,
// so a definition stored before they existed still compiles and delivers.
func CheckSize(s Spec) error {
	var errs []error
	tooLong := func(field, what string, n, limit int) {
		errs = append(errs, fmt.Errorf("%s: %w: %d characters, at most %d are allowed; use a shorter %s", field, ErrTooLong, n, limit, what))
	}
	if n := utf8.RuneCountInString(s.SubjectBeginsWith); n > MaxSubjectFilterLength {
		tooLong("subjectBeginsWith", "prefix", n, MaxSubjectFilterLength)
	}
	if n := utf8.RuneCountInString(s.SubjectEndsWith); n > MaxSubjectFilterLength {
		tooLong("subjectEndsWith", "suffix", n, MaxSubjectFilterLength)
	}
	if n := len(s.IncludedEventTypes); n > MaxIncludedEventTypes {
		errs = append(errs, fmt.Errorf("includedEventTypes: %w: %d given, at most %d are allowed; split the subscription in two, or filter on a common prefix of the types with an advanced filter (StringBeginsWith on eventType)",
			ErrTooManyEventTypes, n, MaxIncludedEventTypes))
	}
	for i, t := range s.IncludedEventTypes {
		if n := utf8.RuneCountInString(t); n > MaxEventTypeLength {
			tooLong(fmt.Sprintf("includedEventTypes[%d]", i), "event type", n, MaxEventTypeLength)
		}
	}
	for i, a := range s.AdvancedFilters {
		if n := utf8.RuneCountInString(a.Key); n > MaxKeyLength {
			errs = append(errs, &AdvancedFilterError{Index: i, OperatorType: a.OperatorType, Key: a.Key,
				Err: fmt.Errorf("%w: the key has %d characters, at most %d are allowed; use a shorter path", ErrTooLong, n, MaxKeyLength)})
		}
	}
	return errors.Join(errs...)
}
