package retry

// FieldError reports one setting of a [Policy] or [Profile] that is out of range. Validate
// methods join every FieldError they find with errors.Join, so a caller sees all problems at
// once; errors.As finds the first.
type FieldError struct {
	// Field is the setting's name, using Event Grid's names where it has one
	// ("maxDeliveryAttempts", "eventTimeToLive").
	Field string
	// Reason says what is wrong and what is allowed, e.g. "is 31: must be between 1 and 30".
	Reason string
}

// Error returns "<field> <reason>".
func (e *FieldError) Error() string { return e.Field + " " + e.Reason }
