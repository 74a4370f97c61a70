package sinks_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/egridio/egrid/sinks"
)

// An UnsendableError says what of its batch was sent: nothing, when the sink found the fault
// before sending; the events before the first fault, when the destination refused it only as
// it came to it. It said "nothing was sent" either way.
func TestUnsendableErrorSaysWhatWasSent(t *testing.T) {
	fault := []sinks.EventFault{{Index: 3, Err: errors.New("the message is over the broker's limit")}}
	for _, tc := range []struct {
		sent int
		want string
	}{
		{0, "nothing was sent"},
		{1, "batch event 0 was sent before the destination refused the first of them"},
		{3, "batch events 0 to 2 were sent before the destination refused the first of them"},
	} {
		msg := (&sinks.UnsendableError{Faults: fault, Sent: tc.sent}).Error()
		if !strings.Contains(msg, tc.want) || !strings.Contains(msg, "batch event 3: the message is over the broker's limit") {
			t.Errorf("Sent %d: %q, want it to say %q and name event 3", tc.sent, msg, tc.want)
		}
		if tc.sent > 0 && strings.Contains(msg, "nothing was sent") {
			t.Errorf("Sent %d: %q says nothing was sent", tc.sent, msg)
		}
	}
}
