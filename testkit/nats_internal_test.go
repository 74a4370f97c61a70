package testkit

import (
	"testing"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// A one-server cluster whose server a Kill took away while a Restart waited for it has no
// meta group to wait for: readiness says so instead of reading a running server that is not
// there.
func TestReadinessOfAKilledOnlyServer(t *testing.T) {
	c := &NATSCluster{t: t, servers: []*natsNode{{opts: &natsserver.Options{ServerName: "n0"}}}}
	if got := c.readiness(); got != "" {
		t.Errorf("readiness() = %q, want \"\" (nothing runs, nothing to wait for)", got)
	}
}
