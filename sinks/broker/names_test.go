package broker_test

import (
	"strings"
	"testing"

	"github.com/egridio/egrid/sinks/broker"
)

// ValidateName counts bytes, and says so: it counted bytes and spoke of characters, so a
// RabbitMQ queue of 128 'é' (256 bytes) was refused as "256 characters long; use at most 255".
// Its messages repeat at most the first bytes of a name: a 1 MB subject was quoted whole.
func TestValidateName(t *testing.T) {
	tests := []struct {
		name    string
		kind    broker.Kind
		value   string
		wantErr []string // substrings of the message; nil: valid
	}{
		{name: "ASCII at the bound", kind: broker.RabbitMQ, value: strings.Repeat("q", broker.MaxNameBytes)},
		{name: "ASCII over the bound", kind: broker.RabbitMQ, value: strings.Repeat("q", broker.MaxNameBytes+1), wantErr: []string{"is 256 bytes long; use at most 255 bytes"}},
		{name: "127 two-byte letters fit", kind: broker.RabbitMQ, value: strings.Repeat("é", 127)},
		{name: "128 two-byte letters are 256 bytes", kind: broker.RabbitMQ, value: strings.Repeat("é", 128), wantErr: []string{"is 256 bytes long; use at most 255 bytes"}},
		{name: "a 1 MB NATS subject with a wildcard is named shortened", kind: broker.NATSJetStream, value: strings.Repeat("a", 1<<20) + ".*", wantErr: []string{`"` + strings.Repeat("a", 128) + `..." is not a NATS subject`}},
		{name: "a 1 MB PostgreSQL topic with a space is named shortened", kind: broker.PostgreSQL, value: strings.Repeat("a", 1<<20) + " ", wantErr: []string{`"` + strings.Repeat("a", 128) + `..." cannot name a PostgreSQL topic`}},
		{name: "empty", kind: broker.RedisStream, value: " ", wantErr: []string{"is empty; name the stream"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.kind.ValidateName(tt.value)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("ValidateName(%d bytes) = %v; want it valid", len(tt.value), err)
				}
				return
			}
			if err == nil {
				t.Fatalf("ValidateName(%d bytes) = nil; want an error", len(tt.value))
			}
			if len(err.Error()) > 1000 {
				t.Errorf("the message is %d bytes; it repeats the name", len(err.Error()))
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("ValidateName = %.300s; want it to say %.300s", err, w)
				}
			}
		})
	}
}

// A PostgreSQL topic names the table "watermill_<topic>", which PostgreSQL cuts at 63 bytes:
// a longer topic is refused, saying the limit, since two of them sharing their first 53 bytes
// wrote to one table. A source reads the topic's offsets table too, "watermill_offsets_<topic>":
// the topic it reads takes at most 45 bytes.
func TestPostgresTopicFitsATableName(t *testing.T) {
	fits := strings.Repeat("t", broker.PostgresMaxTopicBytes)
	if broker.PostgresMaxTopicBytes != 53 || broker.PostgresMaxSourceTopicBytes != 45 {
		t.Fatalf("limits %d and %d, want 53 and 45", broker.PostgresMaxTopicBytes, broker.PostgresMaxSourceTopicBytes)
	}
	if err := broker.PostgreSQL.ValidateName(fits); err != nil {
		t.Errorf("ValidateName(%d bytes) = %v, want it valid", len(fits), err)
	}
	err := broker.PostgreSQL.ValidateName(fits + "x")
	if err == nil || !strings.Contains(err.Error(), "54 bytes") || !strings.Contains(err.Error(), "at most 53") || !strings.Contains(err.Error(), "63-byte") {
		t.Errorf("ValidateName(54 bytes) = %v, want it refused, saying the limit", err)
	}
	if err := broker.RabbitMQ.ValidateName(fits + "x"); err != nil {
		t.Errorf("a RabbitMQ queue of 54 bytes: %v", err)
	}
	src := strings.Repeat("s", broker.PostgresMaxSourceTopicBytes)
	if err := broker.PostgreSQL.ValidateSourceName(src); err != nil {
		t.Errorf("ValidateSourceName(%d bytes) = %v, want it valid", len(src), err)
	}
	if err := broker.PostgreSQL.ValidateSourceName(src + "x"); err == nil || !strings.Contains(err.Error(), "at most 45") {
		t.Errorf("ValidateSourceName(46 bytes) = %v, want it refused, saying the limit", err)
	}
	if err := broker.RedisStream.ValidateSourceName(src + "x"); err != nil {
		t.Errorf("a Redis stream of 46 bytes: %v", err)
	}
}
