package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/testkit"
)

// TestDeadLetterExample runs the example against a real MinIO: the three orders are
// dead-lettered, announced, and delivered by the replay.
func TestDeadLetterExample(t *testing.T) {
	m := testkit.StartMinIO(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out strings.Builder
	sum, err := Run(ctx, Options{MinIO: m.Config(), TimeScale: 100, DeadLetterDelay: time.Second}, &out)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	if sum.Replayed != 3 || sum.Delivered != 3 || !sum.Completed {
		t.Errorf("summary %+v, want the 3 orders replayed and delivered", sum)
	}
	for _, want := range []string{
		"handler: BlobCreated /blobServices/default/containers/orders-deadletters/blobs/FULFILMENT/",
		"dead letter order-2: MaxDeliveryAttemptsExceeded after 3 attempts (last status 500)",
		"webhook received order-",
		"replayed 3, delivered 3, dead-lettered again 0",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
