package retry

import (
	"math"
	"strings"
	"time"
)

// httpDateLayouts are the three HTTP-date forms a recipient must accept (RFC 9110 §5.6.7): the
// preferred IMF-fixdate, the obsolete RFC 850 form and asctime. They are spelled out here
// rather than taken from net/http so this pure package stays free of the HTTP stack.
var httpDateLayouts = [...]string{
	"Mon, 02 Jan 2006 15:04:05 GMT",
	"Monday, 02-Jan-06 15:04:05 GMT",
	"Mon Jan _2 15:04:05 2006",
}

// maxRetryAfterSeconds is the largest delay-seconds value that fits a time.Duration; larger
// values saturate to it.
const maxRetryAfterSeconds = math.MaxInt64 / int64(time.Second)

// ParseRetryAfter interprets a Retry-After header value (RFC 9110 §10.2.3) at now. It accepts
// delay-seconds (a non-negative decimal integer; values too large for a time.Duration
// saturate) and an HTTP date in any of the three HTTP-date forms, which gives the time from
// now until that date, or 0 when the date has passed. Surrounding spaces are ignored. Anything
// else — an empty value, a negative or fractional number, an unparseable date — gives false,
// and the caller ignores the header.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, ok := parseDelaySeconds(v); ok {
		return time.Duration(secs) * time.Second, true
	}
	for _, layout := range httpDateLayouts {
		t, err := time.Parse(layout, v)
		if err != nil {
			continue
		}
		if d := t.Sub(now); d > 0 {
			return d, true
		}
		return 0, true
	}
	return 0, false
}

// parseDelaySeconds parses 1*DIGIT, saturating at maxRetryAfterSeconds.
func parseDelaySeconds(v string) (int64, bool) {
	var n int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n > (maxRetryAfterSeconds-int64(c-'0'))/10 {
			n = maxRetryAfterSeconds
			continue
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}
