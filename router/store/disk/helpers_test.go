package disk_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/egridio/egrid/schemas"
)

var publishTime = time.Date(2026, 11, 22, 8, 0, 0, 5, time.UTC)

// testEvent returns an event of about 1 KB with every field set.
func testEvent(id string) *schemas.Event {
	return &schemas.Event{
		ID:          id,
		Type:        "Contoso.Items.ItemReceived",
		Subject:     "/items/" + id,
		Time:        "2026-11-22T08:00:00Z",
		DataVersion: "1.0",
		Source:      "/topics/bench",
		Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		Raw:         fmt.Appendf(nil, `{"id":%q,"eventType":"Contoso.Items.ItemReceived","data":{"pad":%q}}`, id, strings.Repeat("x", 900)),
	}
}
