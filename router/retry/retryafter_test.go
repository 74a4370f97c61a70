package retry_test

import (
	"testing"
	"time"

	"github.com/egridio/egrid/router/retry"
)

func TestParseRetryAfter(t *testing.T) {
	tests := []struct {
		name   string
		value  string
		want   time.Duration
		wantOK bool
	}{
		{name: "seconds", value: "120", want: 120 * time.Second, wantOK: true},
		{name: "zero seconds", value: "0", want: 0, wantOK: true},
		{name: "spaces around", value: "  30 ", want: 30 * time.Second, wantOK: true},
		{name: "leading zeros", value: "007", want: 7 * time.Second, wantOK: true},
		{name: "huge seconds saturate", value: "99999999999999999999999", want: time.Duration(1<<63-1) / time.Second * time.Second, wantOK: true},
		{name: "IMF-fixdate", value: "Wed, 01 May 2024 12:02:00 GMT", want: 2 * time.Minute, wantOK: true},
		{name: "RFC 850 date", value: "Wednesday, 01-May-24 12:00:45 GMT", want: 45 * time.Second, wantOK: true},
		{name: "asctime date", value: "Wed May  1 13:00:00 2024", want: time.Hour, wantOK: true},
		{name: "date in the past", value: "Wed, 01 May 2024 11:00:00 GMT", want: 0, wantOK: true},
		{name: "date now", value: "Wed, 01 May 2024 12:00:00 GMT", want: 0, wantOK: true},
		{name: "empty", value: "", wantOK: false},
		{name: "blank", value: "   ", wantOK: false},
		{name: "negative", value: "-5", wantOK: false},
		{name: "plus sign", value: "+5", wantOK: false},
		{name: "fraction", value: "1.5", wantOK: false},
		{name: "unit", value: "10s", wantOK: false},
		{name: "ISO date", value: "2024-05-01T12:02:00Z", wantOK: false},
		{name: "words", value: "later", wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := retry.ParseRetryAfter(tt.value, t0)
			if ok != tt.wantOK || got != tt.want {
				t.Fatalf("ParseRetryAfter(%q) = %s, %v; want %s, %v", tt.value, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}
