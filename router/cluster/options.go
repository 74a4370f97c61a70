package cluster

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Defaults of [Options].
const (
	// DefaultPrefix is the default [Options.Prefix], the JetStream store's default too.
	DefaultPrefix = "EGRID"
	// DefaultLeaseTTL is the default [Options.LeaseTTL]: a dead node's subscriptions resume
	// elsewhere within about this long plus one placement round.
	DefaultLeaseTTL = 5 * time.Second
)

// Options configures a [Node]. The zero value takes the defaults, with a node name made of
// the host name and the process id.
type Options struct {
	// NodeName names this node among the others; it must be unique in the cluster. Letters,
	// digits, '-' and '_' only. Default: the host name and the process id, "host-1234".
	NodeName string `json:"nodeName,omitempty" yaml:"nodeName,omitempty"`
	// Prefix starts the names of the cluster's buckets and subjects; it must be the JetStream
	// store's prefix (jetstream.Options.Prefix). Default "EGRID".
	Prefix string `json:"prefix,omitempty" yaml:"prefix,omitempty"`
	// LeaseTTL is how long a subscription's lease and a node's membership last without
	// renewal: a node that stops renewing (dead, or cut off from NATS) loses its
	// subscriptions to the others after it. The owner renews every LeaseTTL/5 and stops its
	// actors once 3/5 of LeaseTTL passed without a renewal, well before another node may take
	// over. Default 5 s; at least 1 s.
	LeaseTTL time.Duration `json:"leaseTtl,omitempty" yaml:"leaseTtl,omitempty"`
	// Replicas is the JetStream replication of the cluster's buckets when Join creates them,
	// as the store's (jetstream.Options.Replicas): 1, or 3 in production, so that losing a NATS
	// server loses no lease. Default 1.
	Replicas int `json:"replicas,omitempty" yaml:"replicas,omitempty"`
}

// WithDefaults returns o with every zero field set to its default.
func (o Options) WithDefaults() Options {
	if o.NodeName == "" {
		o.NodeName = DefaultNodeName()
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	return o
}

// Validate reports every problem of the options at once.
func (o Options) Validate() error {
	var errs []error
	if o.NodeName != "" && !isToken(o.NodeName) {
		errs = append(errs, fmt.Errorf("cluster node name %q: use only letters, digits, '-' and '_' (it names a NATS subject and a key)", o.NodeName))
	}
	if o.Prefix != "" && !isToken(o.Prefix) {
		errs = append(errs, fmt.Errorf("cluster prefix %q: use only letters, digits, '-' and '_', the same as the JetStream store's", o.Prefix))
	}
	if o.LeaseTTL != 0 && o.LeaseTTL < time.Second {
		errs = append(errs, fmt.Errorf("cluster lease TTL %v: use at least 1s (JetStream expires keys at second granularity)", o.LeaseTTL))
	}
	if o.Replicas < 0 || o.Replicas > 5 {
		errs = append(errs, fmt.Errorf("cluster replicas %d: JetStream keeps 1 to 5 replicas (3 in production)", o.Replicas))
	}
	return errors.Join(errs...)
}

// DefaultNodeName is the host name (up to its first dot, with characters NATS subjects do
// not take replaced by '-') and the process id: unique on a host, readable in logs.
func DefaultNodeName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "egrid"
	}
	host, _, _ = strings.Cut(host, ".")
	b := []byte(host)
	for i, c := range b {
		if !isTokenByte(c) {
			b[i] = '-'
		}
	}
	return string(b) + "-" + strconv.Itoa(os.Getpid())
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenByte(s[i]) {
			return false
		}
	}
	return true
}

func isTokenByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}
