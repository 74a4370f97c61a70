package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/egridio/egrid/cmd/egrid/internal/bench"
	"github.com/egridio/egrid/schemas/clip"
)

func benchCommand(e env) *cli.Command {
	names := bench.Names()
	var list strings.Builder
	tw := tabwriter.NewWriter(&list, 0, 0, 2, ' ', 0)
	for _, s := range bench.Scenarios {
		fmt.Fprintf(tw, "\n  %s\t%s", s.Name, s.Description)
		if s.Target != "" {
			fmt.Fprintf(tw, " (target %s)", s.Target)
		}
	}
	fmt.Fprintf(tw, "\n\nWith --cluster (cluster mode: three in-process NATS servers, JetStream R3, three egrid nodes; baseline raw JetStream R3 publishes of the same events):")
	for _, s := range bench.ClusterScenarios {
		fmt.Fprintf(tw, "\n  %s\t%s", s.Name, s.Description)
	}
	_ = tw.Flush() // a strings.Builder does not fail
	return &cli.Command{
		Name:  "bench",
		Usage: "measure egrid against this machine's own limits, side by side, in one run",
		Description: `Starts, in this process and on 127.0.0.1 only, a sink that counts and answers 200,
an egrid router on the embedded store in a temporary directory, and a load generator. Each
scenario also measures its baseline in the same run — the same load generator posting the same
bodies straight to the sink, or into a minimal server that only reads and syncs them to disk —
because shared machines drift and only same-run ratios mean something.

Scenarios:` + list.String(),
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "scenario", Usage: "scenarios to run (default all of the table chosen): " + strings.Join(names, ", ") + "; with --cluster " + strings.Join(bench.ClusterNames(), ", ")},
			&cli.BoolFlag{Name: "cluster", Usage: "run the cluster-mode scenarios instead: three in-process NATS servers (JetStream R3) and three egrid nodes, against raw JetStream publishes"},
			&cli.DurationFlag{Name: "duration", Usage: "load phase of each measurement", Value: 5 * time.Second},
			&cli.IntFlag{Name: "concurrency", Usage: "load generator connections", Value: 64},
			&cli.IntFlag{Name: "rate", Usage: "events/s of the latency scenario", Value: 5000},
			&cli.IntFlag{Name: "idle-subscriptions", Usage: "subscriptions of the idle scenario", Value: 10000},
			&cli.IntFlag{Name: "restart-parked", Usage: "events parked for retry in the restart scenario's store", Value: 1_000_000},
			&cli.StringFlag{Name: "dir", Usage: "directory for the stores (default: a temporary directory)"},
			&cli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile of the whole run to this file (go tool pprof; samples carry a role label: router, loadgen, sink)"},
			&cli.StringFlag{Name: "trace", Usage: "write an execution trace of the whole run to this file (go tool trace; -pprof=sched shows where goroutines waited for a core); tracing costs the run about a tenth of its speed"},
			&cli.StringFlag{Name: "log-sync", Value: "io_uring", Usage: "how egrid's stores sync their write-ahead logs: io_uring (the default of egrid serve; fdatasync where the kernel gives no io_uring) or fdatasync, in pebble's own goroutine"},
			&cli.StringFlag{Name: "memprofile", Usage: "write a heap profile to this file at the end of the idle scenario, while its subscriptions live (go tool pprof -sample_index=inuse_space); samples every 4 KB allocated, which adds to the memory it reports"},
			outputFlag(),
		},
		Action: func(c *cli.Context) error {
			scen, table := c.StringSlice("scenario"), names
			if c.Bool("cluster") {
				table = bench.ClusterNames()
			}
			if len(scen) == 0 {
				scen = table
			}
			for _, s := range scen {
				if !slices.Contains(table, s) {
					if _, ok := bench.Lookup(s); ok {
						return cli.Exit(fmt.Sprintf("scenario %q is not in the table chosen: the cluster scenarios (%s) run with --cluster, the others without", clip.String(s), strings.Join(bench.ClusterNames(), ", ")), 2)
					}
					return cli.Exit(fmt.Sprintf("unknown scenario %q: use %s", clip.String(s), strings.Join(table, ", ")), 2)
				}
			}
			for _, f := range []string{"concurrency", "rate", "idle-subscriptions", "restart-parked"} {
				if c.Int(f) <= 0 {
					return cli.Exit(fmt.Sprintf("--%s %d: use a positive number", f, c.Int(f)), 2)
				}
			}
			opt := bench.Options{
				Progress: e.Stderr, Duration: c.Duration("duration"), Concurrency: c.Int("concurrency"),
				Rate: c.Int("rate"), IdleSubscriptions: c.Int("idle-subscriptions"),
				RestartParked: c.Int("restart-parked"), Dir: c.String("dir"), MemProfile: c.String("memprofile"),
			}
			switch c.String("log-sync") {
			case "io_uring":
			case "fdatasync":
				opt.FdatasyncLog = true
			default:
				return fmt.Errorf("--log-sync %q: use io_uring or fdatasync", clip.String(c.String("log-sync")))
			}
			if opt.MemProfile != "" {
				runtime.MemProfileRate = 4096
			}
			if opt.Dir == "" {
				dir, err := os.MkdirTemp("", "egrid-bench-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				opt.Dir = dir
			}
			if path := c.String("cpuprofile"); path != "" {
				f, err := os.Create(path)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
				opt.WholeRunProfile = true
			}
			if path := c.String("trace"); path != "" {
				f, err := os.Create(path)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := trace.Start(f); err != nil {
					return err
				}
				defer trace.Stop()
			}
			results, err := bench.NewRunner(opt).Run(c.Context, scen)
			if err != nil {
				return err
			}
			if c.String("output") == "json" {
				return printJSON(e.Stdout, results)
			}
			return bench.WriteTable(e.Stdout, results)
		},
	}
}
