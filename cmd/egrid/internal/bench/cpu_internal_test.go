package bench

import (
	"bytes"
	"compress/gzip"
	"math"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

func TestParseProcStat(t *testing.T) {
	// Fields after the command: state ppid pgrp session tty tpgid flags minflt cminflt majflt
	// cmajflt utime stime cutime cstime ...
	const tail = " S 1 2 3 0 -1 4194304 100 0 0 0 250 75 9 9 20 0 12 0"
	for _, tc := range []struct {
		name string
		stat string
		want time.Duration
		err  string
	}{
		{name: "plain", stat: "4242 (egrid)" + tail, want: 3250 * time.Millisecond},
		{name: "command with spaces and parentheses", stat: "4242 (a b) (c))" + tail, want: 3250 * time.Millisecond},
		{name: "no command", stat: "4242 egrid S 1", err: "no command name"},
		{name: "truncated", stat: "4242 (egrid) S 1 2 3", err: "fields after the command name"},
		{name: "not a number", stat: "4242 (egrid) S 1 2 3 0 -1 4194304 100 0 0 0 x 75 9", err: `CPU time "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcStat(tc.stat)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("parseProcStat = %v, %v; want an error saying %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseProcStat = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// profile encodes a gzipped profile.proto with the given sample types (type/unit pairs) and
// samples (values, label key/value pairs), as runtime/pprof writes one.
func profile(t *testing.T, types [][2]string, samples []struct {
	values []int64
	labels [][2]string
}) []byte {
	t.Helper()
	strs := []string{""}
	idx := map[string]uint64{"": 0}
	str := func(s string) uint64 {
		if i, ok := idx[s]; ok {
			return i
		}
		idx[s] = uint64(len(strs))
		strs = append(strs, s)
		return idx[s]
	}
	var msg []byte
	for _, vt := range types {
		var b []byte
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, str(vt[0]))
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, str(vt[1]))
		msg = protowire.AppendTag(msg, 1, protowire.BytesType)
		msg = protowire.AppendBytes(msg, b)
	}
	for _, s := range samples {
		var b, packed []byte
		b = protowire.AppendTag(b, 1, protowire.BytesType) // location ids: ignored
		b = protowire.AppendBytes(b, protowire.AppendVarint(nil, 7))
		for _, v := range s.values {
			packed = protowire.AppendVarint(packed, uint64(v))
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, packed)
		for _, l := range s.labels {
			var lb []byte
			lb = protowire.AppendTag(lb, 1, protowire.VarintType)
			lb = protowire.AppendVarint(lb, str(l[0]))
			lb = protowire.AppendTag(lb, 2, protowire.VarintType)
			lb = protowire.AppendVarint(lb, str(l[1]))
			b = protowire.AppendTag(b, 3, protowire.BytesType)
			b = protowire.AppendBytes(b, lb)
		}
		msg = protowire.AppendTag(msg, 2, protowire.BytesType)
		msg = protowire.AppendBytes(msg, b)
	}
	msg = protowire.AppendTag(msg, 9, protowire.VarintType) // time_nanos: skipped
	msg = protowire.AppendVarint(msg, 12345)
	for _, s := range strs {
		msg = protowire.AppendTag(msg, 6, protowire.BytesType)
		msg = protowire.AppendString(msg, s)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(msg)
	_ = zw.Close()
	return gz.Bytes()
}

func TestProfileByLabel(t *testing.T) {
	cpu := [][2]string{{"samples", "count"}, {"cpu", "nanoseconds"}}
	type s = struct {
		values []int64
		labels [][2]string
	}
	got, err := profileByLabel(profile(t, cpu, []s{
		{values: []int64{1, 10e6}, labels: [][2]string{{"role", "router"}}},
		{values: []int64{2, 20e6}, labels: [][2]string{{"other", "x"}, {"role", "router"}}},
		{values: []int64{1, 10e6}, labels: [][2]string{{"role", "sink"}}},
		{values: []int64{3, 30e6}},                                     // no labels
		{values: []int64{1, 10e6}, labels: [][2]string{{"x", "sink"}}}, // another key
	}), "role", "other")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Duration{"router": 30 * time.Millisecond, "sink": 10 * time.Millisecond, "other": 40 * time.Millisecond}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("got %v, want %v", got, want)
		}
	}

	if _, err := profileByLabel(profile(t, [][2]string{{"alloc_space", "bytes"}}, nil), "role", "other"); err == nil || !strings.Contains(err.Error(), "not a CPU profile") {
		t.Fatalf("a heap profile: err %v, want one saying it is not a CPU profile", err)
	}
	if _, err := profileByLabel([]byte("not gzip"), "role", "other"); err == nil {
		t.Fatal("garbage: no error")
	}
	if _, err := profileByLabel(gzipped([]byte{0x0a, 0xff}), "role", "other"); err == nil {
		t.Fatal("a truncated message: no error")
	}
}

func gzipped(b []byte) []byte {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return gz.Bytes()
}

// TestCPUWindowSplitsByRole profiles a window in which a goroutine labelled loadgen burns CPU
// until the process has used 300 ms more: the window's profile must attribute CPU to loadgen
// and the process reading must cover the burn. (The loop ends by CPU used, not by a clock.)
func TestCPUWindowSplitsByRole(t *testing.T) {
	if _, err := processCPU(); err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	start, _ := processCPU()
	w := startCPU(true)
	if w.profErr != nil {
		t.Skipf("cannot profile the window: %v (is go test -cpuprofile on?)", w.profErr)
	}
	var stop atomic.Bool
	done := make(chan struct{})
	goWithRole(roleLoadgen, func() {
		defer close(done)
		var x uint64
		for i := 0; !stop.Load(); i++ {
			x += uint64(i) * 2654435761
		}
		_ = x
	})
	for {
		now, err := processCPU()
		if err != nil {
			t.Fatal(err)
		}
		if now-start >= 300*time.Millisecond {
			break
		}
		runtime.Gosched()
	}
	stop.Store(true)
	<-done
	u := w.stop()
	if u.Note != "" || u.Roles == nil {
		t.Fatalf("window not profiled: %q", u.Note)
	}
	if u.Process < 300*time.Millisecond {
		t.Errorf("process CPU %v, want at least the 300 ms burnt", u.Process)
	}
	if u.Roles[roleLoadgen] <= 0 {
		t.Errorf("no CPU attributed to %s: %v", roleLoadgen, u.Roles)
	}
	// Without profiling (a whole-run profile is on), only the process is measured.
	u = startCPU(false).stop()
	if u.Roles != nil || !strings.Contains(u.Note, "--cpuprofile") {
		t.Errorf("unprofiled window: roles %v, note %q", u.Roles, u.Note)
	}
}

func TestCPURows(t *testing.T) {
	eg := CPUUsage{Process: 600 * time.Millisecond, Roles: map[string]time.Duration{
		roleRouter: 300 * time.Millisecond, roleSink: 200 * time.Millisecond, roleLoadgen: 50 * time.Millisecond, roleOther: 50 * time.Millisecond}}
	base := CPUUsage{Process: 400 * time.Millisecond, Roles: map[string]time.Duration{
		roleLoadgen: 200 * time.Millisecond, roleSink: 150 * time.Millisecond, roleOther: 50 * time.Millisecond}}
	rows := cpuRows("e2e1", eg, 10000, base, 20000, endToEndCPU)
	if len(rows) != 2 {
		t.Fatalf("got %d rows, want 2", len(rows))
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	proc, prof := rows[0], rows[1]
	// 600 ms / 10 000 events = 60 µs; 400 ms / 20 000 = 20 µs.
	if !near(proc.Value, 60) || !near(proc.Baseline, 20) || !near(proc.Ratio, 3) || proc.Unit != "µs/event" {
		t.Errorf("process row %+v; want 60 against 20 µs/event, ratio 3", proc)
	}
	// egrid's share: 300 ms / 10 000 = 30 µs; the baseline's client: 200 ms / 20 000 = 10 µs.
	if !near(prof.Value, 30) || !near(prof.Baseline, 10) || !near(prof.Ratio, 3) {
		t.Errorf("profile row %+v; want 30 against 10 µs/event, ratio 3", prof)
	}
	for _, want := range []string{"baseline: its client;", "egrid router 30.0, sink 20.0, loadgen 5.0, other 5.0", "baseline loadgen 10.0, sink 7.5, other 2.5"} {
		if !strings.Contains(prof.Note, want) {
			t.Errorf("profile row note %q lacks %q", prof.Note, want)
		}
	}
	// In latency egrid stands in for the read+fsync+deliver server (its own role):
	// 120 ms / 20 000 = 6 µs.
	fwd := CPUUsage{Process: 400 * time.Millisecond, Roles: map[string]time.Duration{
		roleLoadgen: 50 * time.Millisecond, roleForward: 120 * time.Millisecond, roleSink: 150 * time.Millisecond, roleOther: 80 * time.Millisecond}}
	if prof := cpuRows("latency", eg, 10000, fwd, 20000, latencyCPU)[1]; !near(prof.Baseline, 6) || !near(prof.Ratio, 5) || !strings.Contains(prof.Note, "baseline: its read+fsync+deliver server;") {
		t.Errorf("latency's profile row %+v; want 30 against 6 µs/event, ratio 5, against the delivering server", prof)
	}

	// In the publish scenarios the rows count published events, egrid against the server too.
	pub := cpuRows("publish100", eg, 10000, base, 20000, publishCPU)
	if !strings.HasPrefix(pub[0].Metric, "CPU per published event") || !strings.Contains(pub[0].Note, "read+fsync server") || !near(pub[1].Baseline, 7.5) {
		t.Errorf("publish rows %+v; want published events against the read+fsync server (7.5 µs)", pub)
	}
	// Against the read+validate+fsync server the rows name it in their metrics, so they stand
	// beside the read+fsync server's.
	val := cpuRows("publish100", eg, 10000, base, 20000, publishValidatingCPU)
	for i, want := range []string{"CPU per published event, process (/proc), against read+validate+fsync", "CPU per published event, egrid (profile), against read+validate+fsync"} {
		if val[i].Metric != want || val[i].Metric == pub[i].Metric {
			t.Errorf("validating row %d metric %q; want %q, unlike %q", i, val[i].Metric, want, pub[i].Metric)
		}
	}
	if !strings.Contains(val[1].Note, "baseline: its read+validate+fsync server;") {
		t.Errorf("validating profile row note %q; want it to name the read+validate+fsync server", val[1].Note)
	}
	if strings.Contains(rows[0].Metric, "published") || !strings.Contains(rows[0].Note, "client and sink") {
		t.Errorf("e2e1's process row %+v; want delivered events, client and sink", rows[0])
	}

	// An unprofiled window: the process row stands, the profile row says why it is empty.
	rows = cpuRows("latency", CPUUsage{Process: time.Second, Note: "not profiled: x"}, 1000, base, 0, latencyCPU)
	if rows[0].Value != 1000 || rows[0].Baseline != 0 || rows[0].Ratio != 0 {
		t.Errorf("process row %+v; want 1000 µs/event, no baseline (it delivered nothing)", rows[0])
	}
	if rows[1].Value != 0 || rows[1].Note != "not profiled: x" {
		t.Errorf("profile row %+v; want empty with the window's note", rows[1])
	}
}

func TestFormatCPUPerEvent(t *testing.T) {
	if got := formatValue(41.84, "µs/event"); got != "41.8" {
		t.Errorf("formatValue(41.84, µs/event) = %q, want 41.8", got)
	}
}

func TestCPUUsageAdd(t *testing.T) {
	a := CPUUsage{Process: 3 * time.Second, Roles: map[string]time.Duration{"loadgen": time.Second, "sink": 2 * time.Second}}
	b := CPUUsage{Process: time.Second, Roles: map[string]time.Duration{"loadgen": time.Second, "other": 500 * time.Millisecond}}
	sum := CPUUsage{}.add(a).add(b)
	if sum.Process != 4*time.Second {
		t.Errorf("Process = %v, want 4s", sum.Process)
	}
	want := map[string]time.Duration{"loadgen": 2 * time.Second, "sink": 2 * time.Second, "other": 500 * time.Millisecond}
	if len(sum.Roles) != len(want) {
		t.Errorf("Roles = %v, want %v", sum.Roles, want)
	}
	for role, d := range want {
		if sum.Roles[role] != d {
			t.Errorf("Roles[%s] = %v, want %v", role, sum.Roles[role], d)
		}
	}
	if a.Roles["loadgen"] != time.Second {
		t.Errorf("add changed its receiver's roles: %v", a.Roles)
	}
	unprofiled := CPUUsage{Process: time.Second, Note: "not profiled"}
	if got := a.add(unprofiled); got.Roles != nil || got.Note != "not profiled" || got.Process != 4*time.Second {
		t.Errorf("a profiled window plus an unprofiled one = %+v, want no roles, the note and 4s", got)
	}
}
