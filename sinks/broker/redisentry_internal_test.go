package broker

import (
	"maps"
	"testing"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
)

// An entry in watermill-redisstream's wire format reads as its own unmarshaller reads it; an
// entry it refuses becomes a message all the same, keeping what it holds, so that the source
// decides what becomes of it.
func TestRedisMessageReadsEveryEntry(t *testing.T) {
	wm := message.NewMessage("id-1", []byte(`[{"id":"e"}]`))
	wm.Metadata.Set("k", "v")
	values, err := (redisstream.DefaultMarshallerUnmarshaller{}).Marshal("s", wm)
	if err != nil {
		t.Fatal(err)
	}
	wire := map[string]any{} // as go-redis reads it back: strings
	for k, v := range values {
		switch v := v.(type) {
		case []byte:
			wire[k] = string(v)
		default:
			wire[k] = v
		}
	}
	cases := []struct {
		name       string
		values     map[string]any
		uuid, body string
		md         message.Metadata
	}{
		{"watermill", wire, "id-1", `[{"id":"e"}]`, message.Metadata{"k": "v"}},
		{"metadata that does not decode", map[string]any{redisstream.UUIDHeaderKey: "id-2", "payload": "p", "metadata": "\xc1"}, "id-2", "p", message.Metadata{"metadata": "\xc1"}},
		{"payload field and others", map[string]any{redisstream.UUIDHeaderKey: "1-0", "payload": "p", "x": "y"}, "1-0", "p", message.Metadata{"x": "y"}},
		{"only field", map[string]any{redisstream.UUIDHeaderKey: "1-1", "data": "d"}, "1-1", "d", message.Metadata{}},
		{"no fields", map[string]any{redisstream.UUIDHeaderKey: "1-2"}, "1-2", "", nil},
		{"fields but no payload", map[string]any{redisstream.UUIDHeaderKey: "1-3", "a": "1", "b": "2"}, "1-3", "", nil},
		{"no UUID", map[string]any{"payload": "p"}, "", "p", message.Metadata{}},
		{"a field of the reserved key", map[string]any{redisstream.UUIDHeaderKey: "1-4", "payload": "p", UnreadableKey: "x", "k": "v"}, "1-4", "p", message.Metadata{"k": "v"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := redisMessage(c.values)
			if m.UUID != c.uuid || string(m.Payload) != c.body {
				t.Errorf("message %q %q; want %q %q", m.UUID, m.Payload, c.uuid, c.body)
			}
			if c.md == nil { // no payload: the source is told why
				if m.Metadata.Get(UnreadableKey) == "" {
					t.Errorf("metadata %v; want %s saying why there is no payload", m.Metadata, UnreadableKey)
				}
				return
			}
			if !maps.Equal(m.Metadata, c.md) {
				t.Errorf("metadata %v; want %v", m.Metadata, c.md)
			}
		})
	}
}
