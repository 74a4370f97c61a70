package schemas_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/egridio/egrid/schemas"
)

// A CloudEvent's distributed-tracing extension is forwarded in the traceparent and tracestate
// headers only when its traceparent is a W3C Trace Context one (version-traceid-parentid-flags,
// lower-case hex, neither id all zeros), and the tracestate with it when that is a valid list,
// bounded to 512 bytes. Before, any traceparent ("garbage") was forwarded as it was, and the
// tracestate never.
func TestTraceContextHeaders(t *testing.T) {
	const valid = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	long := make([]string, 20)
	for i := range long {
		long[i] = fmt.Sprintf("k%02d=%s", i, strings.Repeat("v", 40)) // 44 bytes each
	}
	for _, c := range []struct {
		name                  string
		traceparent, ts       string
		wantParent, wantState string
	}{
		{name: "valid, with tracestate", traceparent: valid, ts: "congo=t61rcWkgMzE, rojo=00f067aa0ba902b7", wantParent: valid, wantState: "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"},
		{name: "valid, no tracestate", traceparent: valid, wantParent: valid},
		{name: "multi-tenant keys, empty members", traceparent: valid, ts: " ,fw529a3039@dt=0,,a/b_c-d*e=x y ", wantParent: valid, wantState: "fw529a3039@dt=0,a/b_c-d*e=x y"},
		{name: "a later version with more fields", traceparent: "cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-what-comes", wantParent: "cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-what-comes"},
		{name: "garbage", traceparent: "garbage", ts: "congo=t61rcWkgMzE"},
		{name: "upper-case hex", traceparent: strings.ToUpper(valid), ts: "congo=t61rcWkgMzE"},
		{name: "all-zero trace id", traceparent: "00-00000000000000000000000000000000-b7ad6b7169203331-01"},
		{name: "all-zero parent id", traceparent: "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01"},
		{name: "version ff", traceparent: "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		{name: "version 00 with more", traceparent: valid + "-01"},
		{name: "a later version, no dash after the flags", traceparent: "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01x"},
		{name: "short", traceparent: valid[:54]},
		{name: "bad separators", traceparent: strings.ReplaceAll(valid, "-", "_")},
		{name: "non-hex flags", traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0g"},
		{name: "tracestate with a bad key", traceparent: valid, ts: "Congo=1", wantParent: valid},
		{name: "tracestate with a key twice", traceparent: valid, ts: "a=1,a=2", wantParent: valid},
		{name: "tracestate member without =", traceparent: valid, ts: "a=1,b", wantParent: valid},
		{name: "tracestate value ending in a space", traceparent: valid, ts: "a=1 ,b=2", wantParent: valid, wantState: "a=1,b=2"},
		{name: "tracestate value with a control character", traceparent: valid, ts: "a=1\u0001", wantParent: valid},
		{name: "tracestate of 33 members", traceparent: valid, ts: tracestateMembers(33), wantParent: valid},
		{name: "tracestate of 32 members", traceparent: valid, ts: tracestateMembers(32), wantParent: valid, wantState: tracestateMembers(32)},
		{name: "tracestate over 512 bytes: truncated from the end", traceparent: valid, ts: strings.Join(long, ","), wantParent: valid, wantState: strings.Join(long[:11], ",")},
		{name: "tracestate over 512 bytes: long members first", traceparent: valid, ts: "big=" + strings.Repeat("x", 200) + "," + strings.Join(long[:11], ","), wantParent: valid, wantState: strings.Join(long[:11], ",")},
	} {
		t.Run(c.name, func(t *testing.T) {
			raw := `{"specversion":"1.0","id":"c1","source":"/s","type":"t","traceparent":` + quote(c.traceparent)
			if c.ts != "" {
				raw += `,"tracestate":` + quote(c.ts)
			}
			raw += `,"data":{"tracestate":"not=this"}}`
			ev := &schemas.Event{ID: "c1", SpecVersion: "1.0", Traceparent: c.traceparent, Raw: []byte(raw)}
			hs, err := schemas.DeliveryHeaders{Schema: schemas.CloudEvents, Subscription: "s", ContentType: schemas.ContentTypeCloudEvent, Event: ev}.Append(nil)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, h := range hs {
				got[h.Name] = h.Value
			}
			if got[schemas.HeaderTraceparent] != c.wantParent || got[schemas.HeaderTracestate] != c.wantState {
				t.Errorf("traceparent %q, tracestate %q; want %q, %q", got[schemas.HeaderTraceparent], got[schemas.HeaderTracestate], c.wantParent, c.wantState)
			}
			if len(got[schemas.HeaderTracestate]) > schemas.MaxTracestateBytes {
				t.Errorf("tracestate of %d bytes, over %d", len(got[schemas.HeaderTracestate]), schemas.MaxTracestateBytes)
			}
		})
	}
}

func tracestateMembers(n int) string {
	ms := make([]string, n)
	for i := range ms {
		ms[i] = fmt.Sprintf("k%d=v", i)
	}
	return strings.Join(ms, ",")
}

func quote(s string) string { return fmt.Sprintf("%q", s) }
