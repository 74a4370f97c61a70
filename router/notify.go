package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/sinks"
)

// BlobCreatedEventType is the type of the dead-letter notifications.
const BlobCreatedEventType = "Microsoft.Storage.BlobCreated"

// BlobCreatedData is the data of a Microsoft.Storage.BlobCreated notification
// (eventgrid-behaviour.md §7.4).
type BlobCreatedData struct {
	API             string `json:"api"`
	ClientRequestID string `json:"clientRequestId"`
	RequestID       string `json:"requestId"`
	ETag            string `json:"eTag"`
	ContentType     string `json:"contentType"`
	ContentLength   int64  `json:"contentLength"`
	BlobType        string `json:"blobType"`
	URL             string `json:"url"`
	Sequencer       string `json:"sequencer"`
}

// BlobCreatedSubject is the subject of the notification for an object: Azure Storage's
// /blobServices/default/containers/<bucket>/blobs/<key>, so subjectBeginsWith filters work as
// on Azure.
func BlobCreatedSubject(bucket, key string) string {
	return "/blobServices/default/containers/" + bucket + "/blobs/" + key
}

// blobCreatedEvent builds the notification of a written object. It is pure: the caller passes
// the id, the time and the sequencer.
func blobCreatedEvent(id string, info sinks.ObjectInfo, now time.Time, seq uint64) json.RawMessage {
	ev := struct {
		ID          string          `json:"id"`
		Subject     string          `json:"subject"`
		EventType   string          `json:"eventType"`
		EventTime   string          `json:"eventTime"`
		Data        BlobCreatedData `json:"data"`
		DataVersion string          `json:"dataVersion"`
	}{
		ID: id, Subject: BlobCreatedSubject(info.Bucket, info.Key), EventType: BlobCreatedEventType,
		EventTime: now.UTC().Format(time.RFC3339Nano), DataVersion: "",
		Data: BlobCreatedData{
			API: "PutBlob", ClientRequestID: id, RequestID: id, ETag: info.ETag, ContentType: info.ContentType,
			ContentLength: info.Size, BlobType: "BlockBlob", URL: info.URL,
			// Opaque and string-comparable, growing with each object, like Azure's.
			Sequencer: fmt.Sprintf("%032x%016x", now.UnixNano(), seq),
		},
	}
	raw, err := json.Marshal(ev)
	if err != nil {
		panic(err) // plain strings and numbers
	}
	return raw
}

// notifyBlobCreated publishes the BlobCreated notification of a written object to the system
// topic through the normal publish path. The dead-letter actor calls it off its mailbox.
func (r *Router) notifyBlobCreated(ctx context.Context, o *deadletter.Object) {
	d := r.dead
	ev := blobCreatedEvent(uuid.NewString(), o.Info, r.deps.Now(), d.seq.Add(1))
	err := r.Publish(ctx, d.cfg.SystemTopic, ev)
	switch {
	case errors.Is(err, ErrClosed):
		r.log.Info("dead-letter notification not published: the router is closing", "key", o.Info.Key)
	case err != nil:
		r.log.Warn("dead-letter notification not published", logattr.Topic, d.cfg.SystemTopic, "key", o.Info.Key, "err", err)
	}
}
