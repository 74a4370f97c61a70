package disk_test

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
)

// benchEvent is an event whose Raw is exactly 1 KB.
func benchEvent() *schemas.Event {
	ev := testEvent("bench")
	ev.Raw = []byte(`{"pad":"` + strings.Repeat("x", 1024-len(`{"pad":""}`)) + `"}`)
	return ev
}

// openBench opens a store on the OS file system in b's temp dir, counting the syncs of
// pebble's write-ahead log, and creates topic "t".
func openBench(b *testing.B) (*disk.Store, *atomic.Int64) {
	b.Helper()
	var syncs atomic.Int64
	fs := logFS{vfs.Default, func(op string) error {
		if op == "sync" {
			syncs.Add(1)
		}
		return nil
	}}
	s, err := disk.OpenFS(b.TempDir(), disk.Options{}, fs)
	if err != nil {
		b.Fatalf("Open: %v", err)
	}
	b.Cleanup(func() {
		if err := s.Close(); err != nil {
			b.Errorf("Close: %v", err)
		}
	})
	if err := s.PutTopic(b.Context(), "t", nil); err != nil {
		b.Fatalf("PutTopic: %v", err)
	}
	return s, &syncs
}

// report reports the rate, the events per log sync and the process's CPU time per event
// since cpu0 (cpuTime when the timer started; it includes pebble's background work).
func report(b *testing.B, events int, syncs *atomic.Int64, cpu0 time.Duration) {
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(events), "cpu-µs/event")
	if n := syncs.Load(); n > 0 {
		b.ReportMetric(float64(events)/float64(n), "events/sync")
	}
}

// BenchmarkAppend1 appends one 1 KB event per call from 32×GOMAXPROCS goroutines: the
// publish path at batch size 1, where only group commit (concurrent synced commits sharing one
// log fsync) lifts throughput above the disk's fsync rate (BenchmarkRawFsync).
func BenchmarkAppend1(b *testing.B) {
	s, syncs := openBench(b)
	evs := []*schemas.Event{benchEvent()}
	b.SetParallelism(32)
	b.SetBytes(1024)
	syncs.Store(0)
	b.ResetTimer()
	cpu0 := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Append(b.Context(), "t", publishTime, evs); err != nil {
				b.Error(err)
				return
			}
		}
	})
	report(b, b.N, syncs, cpu0)
}

// BenchmarkAppend1Serial is BenchmarkAppend1 from one goroutine: one fsync per event.
func BenchmarkAppend1Serial(b *testing.B) {
	s, syncs := openBench(b)
	evs := []*schemas.Event{benchEvent()}
	b.SetBytes(1024)
	syncs.Store(0)
	cpu0 := cpuTime()
	for b.Loop() {
		if _, err := s.Append(b.Context(), "t", publishTime, evs); err != nil {
			b.Fatal(err)
		}
	}
	report(b, b.N, syncs, cpu0)
}

// BenchmarkAppend100 appends 100 1 KB events per call from one goroutine: a publish of a
// 100-event array.
func BenchmarkAppend100(b *testing.B) {
	s, syncs := openBench(b)
	evs := make([]*schemas.Event, 100)
	for i := range evs {
		evs[i] = benchEvent()
	}
	b.SetBytes(100 * 1024)
	syncs.Store(0)
	cpu0 := cpuTime()
	for b.Loop() {
		if _, err := s.Append(b.Context(), "t", publishTime, evs); err != nil {
			b.Fatal(err)
		}
	}
	report(b, 100*b.N, syncs, cpu0)
}

// BenchmarkRawFsync writes 1 KB and fsyncs a plain file in the same kind of temp dir: the
// disk's own ceiling for one durable event per sync, measured in the same run.
func BenchmarkRawFsync(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "raw"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := []byte(strings.Repeat("x", 1024))
	b.SetBytes(1024)
	cpu0 := cpuTime()
	for b.Loop() {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/event")
}

// BenchmarkRawJournal100 appends 100 1 KB records per round to a plain file, each framed
// with its length and CRC-32C as a journal of segment files would, and fdatasyncs: the floor
// of a synced 100-event append without pebble (no memtable, no flushes, no compactions),
// beside BenchmarkAppend100 in the same run (README "Benchmarks").
func BenchmarkRawJournal100(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "raw"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	ev := benchEvent()
	table := crc32.MakeTable(crc32.Castagnoli)
	var buf []byte
	b.SetBytes(100 * 1024)
	cpu0 := cpuTime()
	for b.Loop() {
		buf = buf[:0]
		for range 100 {
			buf = binary.LittleEndian.AppendUint32(buf, uint32(len(ev.Raw)))
			buf = binary.LittleEndian.AppendUint32(buf, crc32.Checksum(ev.Raw, table))
			buf = append(buf, ev.Raw...)
		}
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := datasync(f); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(100*b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(100*b.N), "cpu-µs/event")
}

// manyTopics is how many topics BenchmarkAppendTopics and BenchmarkRawJournalTopics publish
// to at once, one goroutine each.
const manyTopics = 64

// BenchmarkAppendTopics appends one 1 KB event per call to each of manyTopics topics at once,
// one goroutine per topic: pebble puts every topic's appends into its one log, so concurrent
// appends to different topics share an fsync as those to one topic do. Beside
// BenchmarkRawJournalTopics it is the price of a journal of segment files per topic (README
// "Durability").
func BenchmarkAppendTopics(b *testing.B) {
	s, syncs := openBench(b)
	for i := range manyTopics {
		if err := s.PutTopic(b.Context(), fmt.Sprint("t", i), nil); err != nil {
			b.Fatal(err)
		}
	}
	evs := []*schemas.Event{benchEvent()}
	var next atomic.Int64
	b.SetParallelism(manyTopics / runtimeProcs())
	b.SetBytes(1024)
	syncs.Store(0)
	b.ResetTimer()
	cpu0 := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		topic := fmt.Sprint("t", (next.Add(1)-1)%manyTopics)
		for pb.Next() {
			if _, err := s.Append(b.Context(), topic, publishTime, evs); err != nil {
				b.Error(err)
				return
			}
		}
	})
	report(b, b.N, syncs, cpu0)
}

// BenchmarkRawJournalTopics is BenchmarkAppendTopics on a file per topic, each record framed
// with its length and CRC-32C as in BenchmarkRawJournal100 and each append fdatasynced on its
// own file, as a journal of segment files per topic would: one sync per topic and append.
func BenchmarkRawJournalTopics(b *testing.B) {
	dir := b.TempDir()
	files := make([]*os.File, manyTopics)
	for i := range files {
		f, err := os.Create(filepath.Join(dir, fmt.Sprint("t", i)))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		files[i] = f
	}
	ev := benchEvent()
	table := crc32.MakeTable(crc32.Castagnoli)
	var next atomic.Int64
	b.SetParallelism(manyTopics / runtimeProcs())
	b.SetBytes(1024)
	b.ResetTimer()
	cpu0 := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		f := files[(next.Add(1)-1)%manyTopics]
		var buf []byte
		for pb.Next() {
			buf = binary.LittleEndian.AppendUint32(buf[:0], uint32(len(ev.Raw)))
			buf = binary.LittleEndian.AppendUint32(buf, crc32.Checksum(ev.Raw, table))
			buf = append(buf, ev.Raw...)
			if _, err := f.Write(buf); err != nil {
				b.Error(err)
				return
			}
			if err := datasync(f); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/event")
}

// runtimeProcs is GOMAXPROCS, at least 1.
func runtimeProcs() int { return max(1, runtime.GOMAXPROCS(0)) }

// BenchmarkCursors asks for the cursors of a topic with 500 subscriptions (the default limit
// per topic): the price of one look by the router's trimmer, which makes one every 1024
// appended events per topic and on an idle timer.
func BenchmarkCursors(b *testing.B) {
	s, _ := openBench(b)
	for i := range 500 {
		if err := s.PutSubscription(b.Context(), "t", fmt.Sprint("sub-", i), nil); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		c, err := s.Cursors(b.Context(), "t")
		if err != nil || len(c) != 500 {
			b.Fatalf("Cursors: %d, %v", len(c), err)
		}
	}
}
