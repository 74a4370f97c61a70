package schemas_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/egridio/egrid/schemas"
)

func TestErrorMessages(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"event field", &schemas.ValidationError{Index: 3, Field: "id", Reason: "is required"}, `event 3: field "id": is required`},
		{"event without field", &schemas.ValidationError{Index: 0, Reason: "must be a JSON object, got number"}, `event 0: must be a JSON object, got number`},
		{"request", &schemas.ValidationError{Index: -1, Reason: "body is not valid JSON: unexpected end of input at offset 7"}, `request: body is not valid JSON: unexpected end of input at offset 7`},
		{"request field", &schemas.ValidationError{Index: -1, Field: "Content-Type", Reason: "is wrong"}, `request: field "Content-Type": is wrong`},
		{"request too large", &schemas.TooLargeError{Index: -1, Size: 1048577, Limit: 1048576}, `request: body is 1048577 bytes, over the limit of 1048576 bytes per request: split the events into smaller requests`},
		{"event too large", &schemas.TooLargeError{Index: 2, Size: 1048577, Limit: 1048576}, `event 2: 1048577 bytes, over the limit of 1048576 bytes per event: make the event smaller, for example by sending a reference to large data`},
		{"too many events", &schemas.TooManyEventsError{Count: 5001, Limit: 5000}, `request: 5001 events, over the limit of 5000 events per request: split the events into several requests`},
		{"mapping", &schemas.MappingError{Field: "id", Reason: "defaultValue is not allowed"}, `inputSchemaMapping.id: defaultValue is not allowed`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestValidationErrors(t *testing.T) {
	a := &schemas.ValidationError{Index: 0, Field: "id", Reason: "is required"}
	b := &schemas.ValidationError{Index: 1, Field: "subject", Reason: "is required"}
	c := &schemas.ValidationError{Index: -1, Reason: "x"}
	tests := []struct {
		name string
		err  error
		want []*schemas.ValidationError
	}{
		{"nil", nil, nil},
		{"single", a, []*schemas.ValidationError{a}},
		{"joined", errors.Join(a, b), []*schemas.ValidationError{a, b}},
		{"wrapped join", fmt.Errorf("publishing: %w", errors.Join(a, errors.Join(b, c))), []*schemas.ValidationError{a, b, c}},
		{"other error", errors.New("boom"), nil},
		{"too large is not a validation error", &schemas.TooLargeError{Index: -1}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := schemas.ValidationErrors(tt.err)
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("error %d = %v, want %v", i, got[i], tt.want[i])
				}
			}
		})
	}
}
