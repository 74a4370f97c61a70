package filter_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/egridio/egrid/router/filter"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/schemas/clip"
)

// TestCheckSizeLeavesCompileAlone checks the split of the two: CheckSize refuses what is over
// a bound, naming it without repeating it, and Compile still compiles it, so a definition
// stored before the bounds existed loads.
func TestCheckSizeLeavesCompileAlone(t *testing.T) {
	at := filter.Spec{
		SubjectBeginsWith:  strings.Repeat("p", filter.MaxSubjectFilterLength),
		SubjectEndsWith:    strings.Repeat("s", filter.MaxSubjectFilterLength),
		IncludedEventTypes: append(make([]string, filter.MaxIncludedEventTypes-1), strings.Repeat("t", filter.MaxEventTypeLength)),
		AdvancedFilters:    []filter.AdvancedFilter{{OperatorType: "IsNotNull", Key: "data." + strings.Repeat("k", filter.MaxKeyLength-5)}},
	}
	for i := range at.IncludedEventTypes[:filter.MaxIncludedEventTypes-1] {
		at.IncludedEventTypes[i] = "T"
	}
	if err := filter.CheckSize(at); err != nil {
		t.Fatalf("CheckSize at every bound: %v", err)
	}
	over := at
	over.SubjectBeginsWith += "p"
	over.IncludedEventTypes = append(over.IncludedEventTypes, "U")
	over.AdvancedFilters = []filter.AdvancedFilter{{OperatorType: "IsNotNull", Key: "data." + strings.Repeat("k", 100_000)}}
	err := filter.CheckSize(over)
	if !errors.Is(err, filter.ErrTooLong) || !errors.Is(err, filter.ErrTooManyEventTypes) {
		t.Fatalf("CheckSize over the bounds: %v; want ErrTooLong and ErrTooManyEventTypes", err)
	}
	var afe *filter.AdvancedFilterError
	if !errors.As(err, &afe) || afe.Index != 0 {
		t.Errorf("the oversize key is not reported as advancedFilters[0]: %v", err)
	}
	if len(err.Error()) > 1000 {
		t.Errorf("the error is %d bytes; it repeats the oversize text", len(err.Error()))
	}
	if _, err := filter.Compile(over, schemas.EventGrid); err != nil {
		t.Errorf("Compile of an oversize filter: %v; want it compiled (stored definitions must load)", err)
	}
}

// An invalid key is named in its error cut to clip.Default bytes: a message repeated the whole
// key, however long.
func TestInvalidKeyErrorIsShort(t *testing.T) {
	_, err := filter.Compile(filter.Spec{AdvancedFilters: []filter.AdvancedFilter{{OperatorType: "IsNotNull", Key: strings.Repeat("k", 100_000)}}}, schemas.EventGrid)
	if !errors.Is(err, filter.ErrInvalidKey) || len(err.Error()) > 1000 || !strings.Contains(err.Error(), strings.Repeat("k", clip.Default)+clip.Marker) {
		t.Errorf("Compile of a 100 000-character invalid key: %d bytes of error; want ErrInvalidKey naming the key cut to %d bytes", len(err.Error()), clip.Default)
	}
}
