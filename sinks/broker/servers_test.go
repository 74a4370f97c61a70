package broker_test

import (
	"strings"
	"testing"

	"github.com/egridio/egrid/sinks/broker"
)

// A connection URL that does not parse is refused when the config is checked, with a message
// that says what is wrong without the password: it was accepted, and every delivery then
// failed with the parser's error, which quotes the URL whole, into the logs, the attempt
// history (explain, the admin API) and dead-letter records.
func TestServersValidateKeepsPasswordsOut(t *testing.T) {
	const secret = "s3cret-pw"
	tests := []struct {
		name  string
		s     broker.Servers
		field string
	}{
		{name: "nats url", s: broker.Servers{NATS: &broker.NATSServer{URL: "nats://egrid:" + secret + "@ho st:4222"}}, field: "nats.url"},
		{name: "second nats url", s: broker.Servers{NATS: &broker.NATSServer{URL: "nats://127.0.0.1:4222,nats://egrid:" + secret + "@ho st:4222"}}, field: "nats.url"},
		{name: "postgres url", s: broker.Servers{Postgres: &broker.PostgresServer{DSN: "postgres://egrid:" + secret + "@ho st:5432/egrid"}}, field: "postgres.dsn"},
		{name: "postgres key=value", s: broker.Servers{Postgres: &broker.PostgresServer{DSN: "host=127.0.0.1 password " + secret}}, field: "postgres.dsn"},
		{name: "rabbitmq url", s: broker.Servers{RabbitMQ: &broker.RabbitMQServer{URL: "amqp://egrid:" + secret + "@ho st:5672/"}}, field: "rabbitmq.url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.s.Validate()
			if err == nil {
				t.Fatal("Validate accepted a URL that does not parse")
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Errorf("Validate = %q, want it to name %s", err, tt.field)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("Validate = %q: it shows the password", err)
			}
			if _, err := broker.Open(tt.s, nil); err == nil {
				t.Error("Open accepted it")
			}
		})
	}
	ok := broker.Servers{
		NATS:     &broker.NATSServer{URL: "nats://egrid:" + secret + "@127.0.0.1:4222,127.0.0.1:4223"},
		Postgres: &broker.PostgresServer{DSN: "host=127.0.0.1 port=5432 user=egrid password=" + secret + " dbname=egrid sslmode=disable"},
	}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate refused good settings: %v", err)
	}
}
