package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Scenario is one row of the bench: what it measures and how.
type Scenario struct {
	// Name is what --scenario selects ("publish100").
	Name string
	// Description says what the scenario measures, for the command's help.
	Description string
	// Target is the goal the scenario's headline row is held to ("" when it has none); it is
	// copied into that row's [Result.Target].
	Target string
	// Run measures the scenario with r and returns its rows.
	Run func(ctx context.Context, r *Runner, s Scenario) ([]Result, error)
}

// Scenarios is the bench, in the order `egrid bench` runs it by default.
var Scenarios = []Scenario{
	{Name: "publish100", Description: "durable publish, 100 × 1 KB per request",
		Target: "≥ 100000 events/s and ≥ 0.8 × read+validate+fsync", Run: publish(100, 100000)},
	{Name: "publish1", Description: "durable publish, single-event requests", Run: publish(1, 0)},
	{Name: "e2e1", Description: "publish to delivery, batching off",
		Target: "≥ 0.7 × raw client→sink", Run: endToEnd(0)},
	{Name: "e2e100", Description: "publish to delivery, maxEventsPerBatch 100",
		Target: "≥ 100000 events/s", Run: endToEnd(100)},
	{Name: "latency", Description: "publish→delivery p50/p99/p999 at a fixed rate, and the durable ack against a server that journals and delivers",
		Target: "p99 ≤ 8 ms; ack p50, p99 ≤ 1.5 × read+fsync+deliver", Run: latency},
	{Name: "ack", Description: "publish→durable ack p50/p99 at the latency pace, no subscription",
		Target: "p99 ≤ 1.5 × baseline", Run: ack},
	{Name: "fanout", Description: "100 filtered subscriptions", Run: fanout},
	{Name: "idle", Description: "memory per idle subscription", Target: "≤ 4 KB", Run: idle},
	{Name: "restart", Description: "restart with parked events across 1 000 subscriptions (--restart-parked)",
		Target: "≤ 10 s", Run: restart},
	{Name: "isolation", Description: "half of 100 endpoints failing",
		Target: "≥ 0.9 × all healthy", Run: isolation},
	{Name: "pull", Description: "queue subscription: receive+acknowledge, 8 consumers × 100, against the publish rate", Run: pull},
}

// Names returns the names of [Scenarios], in order.
func Names() []string {
	names := make([]string, len(Scenarios))
	for i, s := range Scenarios {
		names[i] = s.Name
	}
	return names
}

// Lookup returns the scenario called name, from [Scenarios] or [ClusterScenarios].
func Lookup(name string) (Scenario, bool) {
	for _, s := range slices.Concat(Scenarios, ClusterScenarios) {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// Result is one row of the bench's report (`egrid bench -o json` prints them as they are).
type Result struct {
	// Scenario is the name of the scenario that measured the row.
	Scenario string `json:"scenario"`
	// Metric says what was measured ("durable publish").
	Metric string `json:"metric"`
	// Value is the measurement, in Unit.
	Value float64 `json:"value"`
	// Unit is Value's unit: events/s, requests/s, ms, µs/event (CPU time per event), bytes or bytes/event.
	Unit string `json:"unit"`
	// Baseline is the same measurement of the baseline in the same run (0: none).
	Baseline float64 `json:"baseline,omitempty"`
	// Ratio is Value / Baseline (0 without a baseline).
	Ratio float64 `json:"ratio,omitempty"`
	// Target is the goal the row is held to ("" when it has none).
	Target string `json:"target,omitempty"`
	// Met says whether Value reached Target (nil without a target).
	Met *bool `json:"met,omitempty"`
	// Note qualifies the row ("only 9000 of 10000 delivered within the bound").
	Note string `json:"note,omitempty"`
}

// Options are the knobs of a run; zero values are not defaults, the CLI sets every field.
type Options struct {
	// Progress receives a line per measurement while it runs (the CLI's stderr).
	Progress io.Writer
	// Duration is the load phase of each measurement.
	Duration time.Duration
	// Concurrency is the number of load generator connections.
	Concurrency int
	// Rate is the events/s of the latency scenario.
	Rate int
	// IdleSubscriptions is the number of subscriptions of the idle scenario.
	IdleSubscriptions int
	// MemProfile, when set, is the file the idle scenario writes a heap profile to while its
	// subscriptions live.
	MemProfile string
	// RestartParked is the number of events parked for retry in the restart scenario's
	// store, spread over its 1 000 subscriptions.
	RestartParked int
	// Dir holds the stores; it must exist.
	Dir string
	// WholeRunProfile says a CPU profile of the whole run is being taken (--cpuprofile): the
	// delivery scenarios then cannot profile their windows, and their CPU rows split by role
	// are left empty with a note (the run's profile carries the same role labels).
	WholeRunProfile bool
	// FdatasyncLog has egrid's stores sync their write-ahead logs with fdatasync instead of
	// through io_uring (--log-sync fdatasync; [disk.Options.FdatasyncLog]).
	FdatasyncLog bool
}

// Runner runs scenarios with one set of [Options]; each router it starts gets a fresh store
// under Options.Dir. It is not safe for concurrent use.
type Runner struct {
	opt  Options
	runs int // stores created so far
}

// NewRunner returns a runner for opt.
func NewRunner(opt Options) *Runner {
	if opt.Progress == nil {
		opt.Progress = io.Discard
	}
	return &Runner{opt: opt}
}

// Run runs the named scenarios in order and returns their rows. It stops at the first
// scenario that fails, returning the rows so far, and runs nothing more once ctx ends.
func (r *Runner) Run(ctx context.Context, names []string) ([]Result, error) {
	var all []Result
	for _, name := range names {
		s, ok := Lookup(name)
		if !ok {
			return all, fmt.Errorf("unknown scenario %q: use %s", name, strings.Join(slices.Concat(Names(), ClusterNames()), ", "))
		}
		if ctx.Err() != nil {
			break
		}
		fmt.Fprintf(r.opt.Progress, "== %s\n", s.Name)
		// Each scenario starts on a settled machine: nothing the one before wrote is still
		// being written back to the disk its fsyncs wait for, and its garbage is collected.
		settle()
		var res []Result
		var err error
		// Everything the scenario starts is egrid's unless it says otherwise (the load
		// generator and the sinks label their goroutines themselves).
		withRole(ctx, roleRouter, func(ctx context.Context) { res, err = s.Run(ctx, r, s) })
		if err != nil {
			return all, fmt.Errorf("scenario %s: %w", s.Name, err)
		}
		all = append(all, res...)
	}
	return all, nil
}

// WriteTable prints rs as an aligned table, one row per result; a note follows its row in
// parentheses.
func WriteTable(w io.Writer, rs []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tMETRIC\tVALUE\tUNIT\tBASELINE\tRATIO\tTARGET\tMET")
	for _, r := range rs {
		base, ratio, met := "", "", ""
		if r.Baseline != 0 {
			base = formatValue(r.Baseline, r.Unit)
			ratio = fmt.Sprintf("%.2f", r.Ratio)
		}
		if r.Met != nil {
			met = "yes"
			if !*r.Met {
				met = "NO"
			}
		}
		if r.Note != "" {
			met += "  (" + r.Note + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Scenario, r.Metric, formatValue(r.Value, r.Unit), r.Unit, base, ratio, r.Target, met)
	}
	return tw.Flush()
}

// formatValue prints milliseconds with two decimals, CPU per event with one and everything
// else as a whole number.
func formatValue(v float64, unit string) string {
	switch unit {
	case "ms":
		return fmt.Sprintf("%.2f", v)
	case "µs/event":
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}
