package filter

// Limits on a subscription's filter (SPEC.md §3, which settles the conflicting documentation
// versions listed in eventgrid-behaviour.md §11 item 20).
const (
	// MaxAdvancedFilters is the largest number of advanced filters one subscription may have.
	MaxAdvancedFilters = 25
	// MaxFilterValues is the largest number of values across all advanced filters of one
	// subscription. A [lo, hi] range counts as one value.
	MaxFilterValues = 25
	// MaxStringValueLength is the longest string value, in characters (Unicode code points),
	// a StringX operator accepts.
	MaxStringValueLength = 512
)

// Size bounds of a new filter definition, checked by [CheckSize] on create and update. Event
// Grid documents none of them (learn.microsoft.com/azure/event-grid/event-filtering lists
// only the three above), so each is set well above what a definition needs: an Azure user
// never meets them, and a definition stays small (at most about 55 000 characters of filter)
// to store, list and evaluate on every delivery.
const (
	// MaxSubjectFilterLength is the longest subjectBeginsWith or subjectEndsWith, in
	// characters (Unicode code points).
	MaxSubjectFilterLength = 1024
	// MaxIncludedEventTypes is the largest number of entries of includedEventTypes.
	MaxIncludedEventTypes = 100
	// MaxEventTypeLength is the longest entry of includedEventTypes, in characters.
	MaxEventTypeLength = 256
	// MaxKeyLength is the longest key of an advanced filter, in characters: the same bound
	// as a string value.
	MaxKeyLength = 512
)

// Spec is a subscription's filter as ARM writes it (the "filter" object of an event
// subscription, eventgrid-behaviour.md §4.1), with the same JSON and YAML names, so an ARM or
// Bicep definition ports by copy. The zero Spec matches every event. [Compile] checks it.
type Spec struct {
	// IncludedEventTypes lists the event types that pass. Nil or empty means every type, and
	// so does a list containing "All" (the legacy spelling). Compared ignoring case.
	IncludedEventTypes []string `json:"includedEventTypes,omitempty" yaml:"includedEventTypes,omitempty"`
	// SubjectBeginsWith is a literal prefix the subject must have; empty means any subject.
	SubjectBeginsWith string `json:"subjectBeginsWith,omitempty" yaml:"subjectBeginsWith,omitempty"`
	// SubjectEndsWith is a literal suffix the subject must have; empty means any subject.
	SubjectEndsWith string `json:"subjectEndsWith,omitempty" yaml:"subjectEndsWith,omitempty"`
	// IsSubjectCaseSensitive makes the subject prefix and suffix comparisons case-sensitive.
	// False (the default, and what a JSON null gives) ignores case.
	IsSubjectCaseSensitive bool `json:"isSubjectCaseSensitive,omitempty" yaml:"isSubjectCaseSensitive,omitempty"`
	// EnableAdvancedFilteringOnArrays lets advanced filters evaluate array-valued keys
	// element by element; without it an array-valued key matches no operator except
	// IsNotNull.
	EnableAdvancedFilteringOnArrays bool `json:"enableAdvancedFilteringOnArrays,omitempty" yaml:"enableAdvancedFilteringOnArrays,omitempty"`
	// AdvancedFilters are ANDed: an event passes only if it passes every one.
	AdvancedFilters []AdvancedFilter `json:"advancedFilters,omitempty" yaml:"advancedFilters,omitempty"`
}

// AdvancedFilter is one entry of advancedFilters, for example
// {"operatorType": "NumberGreaterThan", "key": "data.n", "value": 5} or
// {"operatorType": "StringIn", "key": "subject", "values": ["a", "b"]}.
//
// Value and Values keep whatever a decoder produced (float64, int, string, bool, []any,
// json.Number, json.RawMessage, or any Go numeric type) until [Compile] checks their types
// against the operator.
type AdvancedFilter struct {
	// OperatorType names the operator, matched ignoring case (see [ParseOperator]).
	OperatorType string `json:"operatorType" yaml:"operatorType"`
	// Key names the envelope field or data path the operator tests (see the package
	// documentation for the keys of each schema).
	Key string `json:"key" yaml:"key"`
	// Value is the operand of a single-value operator: a number for NumberLessThan,
	// NumberGreaterThan, NumberLessThanOrEquals and NumberGreaterThanOrEquals, a bool for
	// BoolEquals.
	Value any `json:"value,omitempty" yaml:"value,omitempty"`
	// Values are the operands of a multi-value operator, ORed: numbers for NumberIn and
	// NumberNotIn, [lo, hi] pairs of numbers for NumberInRange and NumberNotInRange, strings
	// for the StringX operators.
	Values []any `json:"values,omitempty" yaml:"values,omitempty"`
}
