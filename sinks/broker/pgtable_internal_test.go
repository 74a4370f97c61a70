package broker

import (
	"fmt"
	"testing"

	"github.com/lib/pq"

	"github.com/egridio/egrid/schemas"
)

// A table that could not be created is never the fault of the rows being published: a unique
// violation (23505) or "already exists" (42P07) is another creation's at the same moment, and
// is retried (Busy); the others keep their code's outcome.
func TestPostgresTableCreationFailureIsNoRowsFault(t *testing.T) {
	tests := []struct {
		code string
		want schemas.Outcome
	}{
		{code: "23505", want: schemas.Busy},
		{code: "42P07", want: schemas.Busy},
		{code: "22001", want: schemas.Busy},
		{code: "42501", want: schemas.Forbidden},
		{code: "08006", want: schemas.SocketError},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			err := fmt.Errorf("publishing: %w", &pgTableError{topic: "orders", err: &pq.Error{Code: pq.ErrorCode(tt.code)}})
			if pgRowRefusal(err) {
				t.Errorf("pgRowRefusal(%v) = true, want false: the rows were not inserted yet", err)
			}
			if got := classify(err, nil); got != tt.want {
				t.Errorf("classify(%v) = %s, want %s", err, got, tt.want)
			}
		})
	}
}
