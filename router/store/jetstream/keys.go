package jetstream

import (
	"fmt"
	"strconv"

	"github.com/egridio/egrid/router/internal/natstoken"
)

// The names of the streams, subjects and keys the store uses (topic, subscription and
// dead-letter names escaped into NATS tokens), and the check that a name is given.

// Names. Topic, subscription and dead-letter names are escaped into tokens valid in stream
// names, subjects and keys (natstoken.Escape): letters, digits and '-' stay, every other byte
// becomes '_' and two hex digits. The cluster's leases spell names the same way.
func escape(name string) string { return natstoken.Escape(name) }

// unescape is the name of token tok, or an error wrapping errCorrupt (and so
// store.ErrCorrupt) for a token egrid does not write (natstoken.Unescape), which quotes it.
func unescape(tok string) (string, error) {
	name, err := natstoken.Unescape(tok)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errCorrupt, err)
	}
	return name, nil
}

func (s *Store) streamName(topic string) string { return s.opts.Prefix + "_journal_" + escape(topic) }
func (s *Store) subject(topic string) string    { return s.opts.Prefix + ".journal." + escape(topic) }
func topicKey(topic string) string              { return "topic." + escape(topic) }
func subKey(topic, sub string) string           { return "sub." + escape(topic) + "." + escape(sub) }
func subPattern(topic string) string            { return "sub." + escape(topic) + ".*" }

func (s *Store) parkedSubject(topic, sub string, seq uint64) string {
	return s.opts.Prefix + ".parked." + escape(topic) + "." + escape(sub) + "." + strconv.FormatUint(seq, 10)
}

func checkName(what, name string) error {
	if name == "" {
		return fmt.Errorf("jetstream store: empty %s name", what)
	}
	return nil
}
