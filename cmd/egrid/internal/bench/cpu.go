package bench

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// The roles CPU is attributed to: every goroutine the bench starts carries a pprof label
// "role" (see [withRole]), and the goroutines they start inherit it.
const (
	// roleLoadgen is the load generator: its requests, its HTTP client and transport.
	roleLoadgen = "loadgen"
	// roleSink is the servers the load ends in: the counting sink and the read+fsync baseline.
	roleSink = "sink"
	// roleForward is the read+fsync+deliver baseline: its server, its log writer and the
	// client that delivers each synced body to the sink, as egrid's router takes, journals
	// and delivers every event in the latency scenario.
	roleForward = "forward"
	// roleRouter is egrid: ingress, store, actors, delivery. It is the label of the scenario's
	// own goroutine, so whatever egrid starts from it is egrid's.
	roleRouter = "router"
	// roleOther is CPU with no role label: the Go runtime's own goroutines (background GC
	// marking, the scavenger), shared by all roles.
	roleOther = "other"
)

// roleLabel is the pprof label key of the roles.
const roleLabel = "role"

// withRole runs f with the goroutine label role; goroutines f starts inherit it.
func withRole(ctx context.Context, role string, f func(context.Context)) {
	pprof.Do(ctx, pprof.Labels(roleLabel, role), f)
}

// goWithRole starts f on a new goroutine labelled role.
func goWithRole(role string, f func()) {
	go withRole(context.Background(), role, func(context.Context) { f() })
}

// CPUUsage is the CPU a measured window cost.
type CPUUsage struct {
	// Process is the process's user+system CPU over the window, from /proc/self/stat.
	Process time.Duration
	// Roles is the window's CPU profile summed by role (loadgen, sink, router, other); nil
	// when the window was not profiled (see Note).
	Roles map[string]time.Duration
	// Note says why Roles is nil.
	Note string
}

// add returns the usage of two windows together. A role split is kept only when both have one.
func (u CPUUsage) add(v CPUUsage) CPUUsage {
	if u.Process == 0 && u.Roles == nil && u.Note == "" { // the zero usage: nothing measured yet
		return v
	}
	sum := CPUUsage{Process: u.Process + v.Process, Note: cmp.Or(u.Note, v.Note)}
	if u.Roles != nil && v.Roles != nil {
		sum.Roles = make(map[string]time.Duration, len(u.Roles))
		for role, d := range u.Roles {
			sum.Roles[role] += d
		}
		for role, d := range v.Roles {
			sum.Roles[role] += d
		}
	}
	return sum
}

// cpuWindow measures one window: the process's CPU time and, when no other CPU profile is
// running, a CPU profile of the window kept in memory.
type cpuWindow struct {
	start    time.Duration
	startErr error
	prof     bytes.Buffer
	profErr  error
}

// startCPU starts measuring a window. With profile false (a whole-run --cpuprofile is
// running) it measures only the process's CPU.
func startCPU(profile bool) *cpuWindow {
	w := &cpuWindow{}
	w.start, w.startErr = processCPU()
	if !profile {
		w.profErr = errors.New("not profiled: --cpuprofile profiles the whole run (split it with go tool pprof -tagfocus role=router)")
		return w
	}
	if err := pprof.StartCPUProfile(&w.prof); err != nil {
		w.profErr = fmt.Errorf("not profiled: %w", err)
	}
	return w
}

// stop ends the window and returns what it cost.
func (w *cpuWindow) stop() CPUUsage {
	var u CPUUsage
	if w.profErr == nil {
		pprof.StopCPUProfile()
	}
	end, err := processCPU()
	if err == nil && w.startErr == nil {
		u.Process = end - w.start
	}
	if w.profErr != nil {
		u.Note = w.profErr.Error()
		return u
	}
	roles, err := profileByLabel(w.prof.Bytes(), roleLabel, roleOther)
	if err != nil {
		u.Note = fmt.Sprintf("reading the window's CPU profile: %v", err)
		return u
	}
	u.Roles = roles
	return u
}

// clockTick is the unit of the CPU times in /proc/<pid>/stat: USER_HZ, 100 on every Linux
// the Go runtime supports (the kernel's ABI fixes it, whatever CONFIG_HZ is).
const clockTick = 10 * time.Millisecond

// processCPU returns the process's user+system CPU time so far.
func processCPU() (time.Duration, error) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, fmt.Errorf("reading the process's CPU time: %w (the CPU rows need Linux's /proc)", err)
	}
	return parseProcStat(string(b))
}

// parseProcStat returns utime+stime of a /proc/<pid>/stat line (proc(5): fields 14 and 15,
// in clock ticks). The second field, the command name in parentheses, may hold spaces and
// parentheses itself, so the fields are counted from its last ')'.
func parseProcStat(stat string) (time.Duration, error) {
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, fmt.Errorf("parsing /proc/self/stat: no command name in %.40q", stat)
	}
	// After ")": field 3 (state) is fields[0], so field n is fields[n-3].
	fields := strings.Fields(stat[end+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("parsing /proc/self/stat: %d fields after the command name, want at least 13", len(fields))
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("parsing /proc/self/stat: CPU time %q is not a tick count", f)
		}
		ticks += n
	}
	return time.Duration(ticks) * clockTick, nil
}

// profileByLabel sums the CPU time of a gzipped pprof CPU profile (profile.proto, as
// runtime/pprof writes it) by the value of the string label key; samples without it count
// under unlabeled.
//
// It decodes only what it needs (sample types, samples, their labels, the string table) with
// protowire, which the module already has, rather than adding a profile library.
func profileByLabel(gz []byte, key, unlabeled string) (map[string]time.Duration, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, err
	}
	type label struct{ key, str int64 }
	type sample struct {
		values []int64
		labels []label
	}
	type valueType struct{ typ, unit int64 }
	var (
		types   []valueType
		samples []sample
		strs    []string
	)
	err = eachField(raw, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType: // sample_type
			var vt valueType
			err := eachField(v, func(num protowire.Number, _ protowire.Type, _ []byte, n uint64) error {
				switch num {
				case 1:
					vt.typ = int64(n)
				case 2:
					vt.unit = int64(n)
				}
				return nil
			})
			types = append(types, vt)
			return err
		case num == 2 && typ == protowire.BytesType: // sample
			var s sample
			err := eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
				switch {
				case num == 2 && typ == protowire.BytesType: // packed values
					for len(v) > 0 {
						x, l := protowire.ConsumeVarint(v)
						if l < 0 {
							return protowire.ParseError(l)
						}
						s.values = append(s.values, int64(x))
						v = v[l:]
					}
				case num == 2 && typ == protowire.VarintType:
					s.values = append(s.values, int64(n))
				case num == 3 && typ == protowire.BytesType: // label
					var l label
					err := eachField(v, func(num protowire.Number, _ protowire.Type, _ []byte, n uint64) error {
						switch num {
						case 1:
							l.key = int64(n)
						case 2:
							l.str = int64(n)
						}
						return nil
					})
					if err != nil {
						return err
					}
					s.labels = append(s.labels, l)
				}
				return nil
			})
			samples = append(samples, s)
			return err
		case num == 6 && typ == protowire.BytesType: // string_table
			strs = append(strs, string(v))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	str := func(i int64) string {
		if i < 0 || i >= int64(len(strs)) {
			return ""
		}
		return strs[i]
	}
	idx := -1
	for i, t := range types {
		if str(t.unit) == "nanoseconds" {
			idx = i
		}
	}
	if idx < 0 {
		return nil, errors.New("the profile has no CPU time in nanoseconds: not a CPU profile")
	}
	out := map[string]time.Duration{}
	for _, s := range samples {
		if idx >= len(s.values) {
			continue
		}
		role := unlabeled
		for _, l := range s.labels {
			if str(l.key) == key && str(l.str) != "" {
				role = str(l.str)
			}
		}
		out[role] += time.Duration(s.values[idx])
	}
	return out, nil
}

// eachField calls f for every field of the protobuf message b: v is the payload of a
// length-delimited field, n the value of a varint or fixed one.
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error) error {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return protowire.ParseError(l)
		}
		b = b[l:]
		var v []byte
		var n uint64
		switch typ {
		case protowire.VarintType:
			n, l = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			v, l = protowire.ConsumeBytes(b)
		case protowire.Fixed64Type:
			n, l = protowire.ConsumeFixed64(b)
		case protowire.Fixed32Type:
			var x uint32
			x, l = protowire.ConsumeFixed32(b)
			n = uint64(x)
		default:
			l = protowire.ConsumeFieldValue(num, typ, b)
		}
		if l < 0 {
			return protowire.ParseError(l)
		}
		b = b[l:]
		if err := f(num, typ, v, n); err != nil {
			return err
		}
	}
	return nil
}

// cpuRows reports the CPU per event of a scenario as two rows: the process's CPU (/proc) per
// event of egrid's window against the baseline window's, and, from the windows' profiles,
// egrid's own share (role router) per event against the part of the baseline egrid stands in
// for (c.role): its client (role loadgen: what posts the events to the sink when egrid is not
// there) in the end-to-end scenarios, its read+fsync+deliver server (role forward) in
// latency, its read+fsync server (role sink) in the publish scenarios. The second row's note
// lists every role. events and baseEvents are what each window delivered or, in the publish
// scenarios, had acknowledged.
func cpuRows(scenario string, eg CPUUsage, events int64, base CPUUsage, baseEvents int64, c cpuComparison) []Result {
	per := func(d time.Duration, n int64) float64 {
		if n <= 0 {
			return 0
		}
		return float64(d.Nanoseconds()) / 1e3 / float64(n)
	}
	against := ""
	if c.against != "" {
		against = ", against " + c.against
	}
	proc := Result{Scenario: scenario, Metric: "CPU per " + c.event + " event, process (/proc)" + against, Unit: "µs/event",
		Value: per(eg.Process, events), Baseline: per(base.Process, baseEvents), Note: c.processNote}
	prof := Result{Scenario: scenario, Metric: "CPU per " + c.event + " event, egrid (profile)" + against, Unit: "µs/event",
		Value: per(eg.Roles[roleRouter], events), Baseline: per(base.Roles[c.role], baseEvents)}
	for _, r := range []*Result{&proc, &prof} {
		if r.Baseline > 0 {
			r.Ratio = r.Value / r.Baseline
		}
	}
	switch {
	case eg.Roles == nil:
		prof.Note = eg.Note
	case base.Roles == nil:
		prof.Note = "baseline " + base.Note
	default:
		prof.Note = "baseline: " + c.name + "; egrid " + roleSplit(eg.Roles, events) + "; baseline " + roleSplit(base.Roles, baseEvents)
	}
	return []Result{proc, prof}
}

// cpuComparison says what a scenario's CPU rows compare: the events counted (delivered or
// published), what the process row holds on each side, and the role of the baseline whose
// CPU egrid's share is held against, with its name in the row's note; against names the
// baseline in the rows' metrics where a scenario has two.
type cpuComparison struct{ event, processNote, role, name, against string }

var (
	// endToEndCPU: egrid's router stands in for the baseline's client, which posts each event
	// straight to the sink.
	endToEndCPU = cpuComparison{"delivered", "egrid, load generator and sink together; baseline: client and sink", roleLoadgen, "its client", ""}
	// latencyCPU: egrid's router takes the publishes, journals and delivers them, as the
	// read+fsync+deliver server does.
	latencyCPU = cpuComparison{"delivered", "egrid, load generator and sink together; baseline: load generator, read+fsync+deliver server and sink", roleForward, "its read+fsync+deliver server", ""}
	// publishCPU: egrid's router takes and journals the publishes, as the read+fsync server does.
	publishCPU = cpuComparison{"published", "egrid and load generator together; baseline: load generator and read+fsync server", roleSink, "its read+fsync server", ""}
	// publishValidatingCPU: the same against the read+validate+fsync server.
	publishValidatingCPU = cpuComparison{"published", "egrid and load generator together; baseline: load generator and read+validate+fsync server", roleSink, "its read+validate+fsync server", "read+validate+fsync"}
)

// roleSplit prints µs per event by role, largest first ("router 21.3, sink 9.1, ...").
func roleSplit(roles map[string]time.Duration, events int64) string {
	names := make([]string, 0, len(roles))
	for name := range roles {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool {
		if roles[names[i]] != roles[names[j]] {
			return roles[names[i]] > roles[names[j]]
		}
		return names[i] < names[j]
	})
	parts := make([]string, len(names))
	for i, name := range names {
		us := 0.0
		if events > 0 {
			us = float64(roles[name].Nanoseconds()) / 1e3 / float64(events)
		}
		parts[i] = fmt.Sprintf("%s %.1f", name, us)
	}
	return strings.Join(parts, ", ")
}

// startCPU starts measuring a window of the run (see [cpuWindow]).
func (b *Runner) startCPU() *cpuWindow { return startCPU(!b.opt.WholeRunProfile) }
