package router

import (
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/actors/deadletter"
)

// keysFrom's listings take exactly the keys named from its time's hour on, across the ends of
// days, months and years, whose keys do not sort by time.
func TestKeysFromTakesTheHoursFromItsTime(t *testing.T) {
	for _, from := range []time.Time{
		time.Date(2024, 9, 30, 22, 30, 0, 0, time.UTC),  // October sorts before September
		time.Date(2024, 12, 31, 23, 0, 0, 0, time.UTC),  // the year's last hour
		time.Date(2024, 2, 9, 0, 15, 0, 0, time.UTC),    // the 10th sorts before the 9th
		time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),     // a year's first hour
		time.Date(2024, 11, 19, 9, 59, 59, 0, time.UTC), // hour 10 sorts before hour 9
	} {
		lists := keysFrom("SUB", from)
		if len(lists) > 66 {
			t.Errorf("from %v: %d listings, want at most 66", from, len(lists))
		}
		for h := from.Add(-60 * 24 * time.Hour); h.Before(from.Add(400 * 24 * time.Hour)); h = h.Add(time.Hour) {
			key := deadletter.Key("SUB", h, "0e0c1b2a")
			listed := 0
			for _, q := range lists {
				if strings.HasPrefix(key, q.Prefix) && key > q.StartAfter {
					listed++
				}
			}
			if want := !h.Before(from.Truncate(time.Hour)); (listed == 1) != want || listed > 1 {
				t.Fatalf("from %v: the key %s is listed %d times; want %v", from, key, listed, want)
			}
		}
	}
}
