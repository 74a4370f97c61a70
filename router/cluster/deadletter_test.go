package cluster_test

import (
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/schemas"
)

// Dead letters of a subscription deleted, or whose topic was deleted, after its events were
// dead-lettered but before their records were written are still written, once each, to the
// destination the records carry, as a router of its own writes them: no node runs the
// subscription any more, so the node holding the cluster's duty adopts them. Before, every
// node left them in the outbox for good.
func TestDeadLettersOfADeletedSubscriptionAreWritten(t *testing.T) {
	c := newCluster(t)
	c.rec.fail = func(_, id string) bool { return true }
	a, b := c.start("a"), c.start("b")
	ctx := t.Context()
	topicIDs := map[string]string{}
	for _, topic := range []string{"orders", "gone"} {
		if _, err := a.r.CreateTopic(ctx, topic, router.TopicSpec{}); err != nil {
			t.Fatalf("CreateTopic %s: %v", topic, err)
		}
		topicIDs[topic] = a.r.TopicID(topic)
		spec := router.SubscriptionSpec{Destination: router.SinkDestination("hook")}
		spec.RetryPolicy.MaxDeliveryAttempts = 1
		spec.DeadLetterDestination = &router.DeadLetterDestination{EndpointType: "StorageBlob"}
		spec.DeadLetterDestination.Properties.BlobContainerName = "dl-" + topic
		if err := a.r.CreateSubscription(ctx, topic, "billing", spec); err != nil {
			t.Fatalf("CreateSubscription %s/billing: %v", topic, err)
		}
		eventually(t, 30*time.Second, topic+"/billing placed", func() bool { return len(runners(topic, "billing", a, b)) == 1 })
		if err := publish(t, a.r, topic, "dl-"+topic); err != nil {
			t.Fatalf("Publish to %s: %v", topic, err)
		}
	}
	eventually(t, 30*time.Second, "both dead letters in the outbox", func() bool {
		recs, err := b.st.DeadLetters(ctx)
		return err == nil && len(recs) == 2
	})
	// Deleted well within the dead-letter delay (4 s here): the records are still unwritten.
	if err := b.r.DeleteSubscription(ctx, "orders", "billing"); err != nil {
		t.Fatalf("DeleteSubscription: %v", err)
	}
	if err := b.r.DeleteTopic(ctx, "gone"); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	if n := len(c.objects.Objects("dl-orders")) + len(c.objects.Objects("dl-gone")); n > 0 {
		t.Logf("%d dead-letter objects written before the deletes returned: the test checks less than it says", n)
	}

	eventually(t, 30*time.Second, "the outbox empty", func() bool {
		recs, err := b.st.DeadLetters(ctx)
		return err == nil && len(recs) == 0
	})
	for _, topic := range []string{"orders", "gone"} {
		bucket := "dl-" + topic
		if objs := c.objects.Objects(bucket); len(objs) != 1 {
			t.Errorf("%d dead-letter objects in %s, want 1: %+v", len(objs), bucket, objs)
		}
		recs := c.objects.Records(t, bucket, "", schemas.EventGrid, topicIDs[topic])
		if len(recs) != 1 || recs[0].Event.ID != "dl-"+topic {
			t.Errorf("dead-letter records in %s: %+v, want dl-%s once", bucket, recs, topic)
		}
	}
}
