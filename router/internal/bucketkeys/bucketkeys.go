package bucketkeys

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Stored returns the keys of the key-value bucket named bucket matching pattern (a key
// pattern: "sub.t.*", ">") that the bucket's stream holds a message for: every key written
// and not expired or purged, deleted ones included (their markers), in no particular order.
// It reads the stream's info through a handle of its own (js.Stream), since a stream handle
// keeps what Info read, without a lock: the caller's handles may be shared.
func Stored(ctx context.Context, js jetstream.JetStream, bucket, pattern string) ([]string, error) {
	prefix := "$KV." + bucket + "."
	str, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, err
	}
	info, err := str.Info(ctx, jetstream.WithSubjectFilter(prefix+pattern))
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		keys = append(keys, strings.TrimPrefix(subj, prefix))
	}
	return keys, nil
}
