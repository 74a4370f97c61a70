package actors

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

type ctxKey struct{}

// An attempt's context behaves as context.WithTimeout(incarnation, timeout) ended by its
// cancel function: done at the deadline with DeadlineExceeded, its derived contexts with it;
// the incarnation's values; and Cause is its own error, not the incarnation's.
func TestAttemptContextEndsAtItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inc, cancel := context.WithCancelCause(context.WithValue(context.Background(), ctxKey{}, "v"))
		defer cancel(nil)
		k := newAttemptClock(inc, context.WithoutCancel(inc))
		defer k.close()
		start := time.Now()
		c := k.begin(30 * time.Second)
		if dl, ok := c.Deadline(); !ok || !dl.Equal(start.Add(30*time.Second)) {
			t.Fatalf("Deadline() = %v, %v; want %v, true", dl, ok, start.Add(30*time.Second))
		}
		if got := c.Value(ctxKey{}); got != "v" {
			t.Fatalf("Value = %v, want the incarnation's v", got)
		}
		child, stopChild := context.WithCancel(c)
		defer stopChild()
		if c.Err() != nil || child.Err() != nil {
			t.Fatalf("done before the deadline: %v, %v", c.Err(), child.Err())
		}
		<-child.Done()
		if d := time.Since(start); d != 30*time.Second {
			t.Fatalf("ended after %v, want 30s", d)
		}
		if !errors.Is(c.Err(), context.DeadlineExceeded) || !errors.Is(child.Err(), context.DeadlineExceeded) {
			t.Fatalf("Err() = %v, child %v; want DeadlineExceeded", c.Err(), child.Err())
		}
		if got := context.Cause(c); !errors.Is(got, context.DeadlineExceeded) {
			t.Fatalf("Cause = %v, want DeadlineExceeded", got)
		}
		k.finish(c)
		if !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Fatalf("Err() after finish = %v, want it unchanged", c.Err())
		}
	})
}

// finish ends the attempt's context and everything derived from it, as cancel does, and the
// next attempt on the same goroutine starts afresh with its own full timeout: the timer that
// ran for the first one does not end it early.
func TestAttemptContextFinishAndReuse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inc, cancel := context.WithCancel(context.Background())
		defer cancel()
		k := newAttemptClock(inc, context.WithoutCancel(inc))
		defer k.close()

		c1 := k.begin(10 * time.Second)
		child, stopChild := context.WithCancel(c1)
		defer stopChild()
		ran := make(chan struct{})
		context.AfterFunc(c1, func() { close(ran) })
		kept := context.AfterFunc(c1, func() { t.Error("a stopped AfterFunc ran") })
		if !kept() {
			t.Fatal("stop reported the function as run already")
		}
		<-time.After(9 * time.Second) // virtual time
		k.finish(c1)
		<-ran
		if !errors.Is(c1.Err(), context.Canceled) || !errors.Is(child.Err(), context.Canceled) {
			t.Fatalf("after finish: Err() = %v, child %v; want Canceled", c1.Err(), child.Err())
		}

		c2 := k.begin(10 * time.Second)
		<-time.After(9 * time.Second) // past the first attempt's deadline
		k.timer.Stop()                // as if the second attempt's setting came before...
		k.expire()                    // ...a late firing of the first attempt's timer
		if c2.Err() != nil {
			t.Fatalf("the second attempt ended at %v: %v", 9*time.Second, c2.Err())
		}
		<-time.After(time.Second)
		synctest.Wait()
		if !errors.Is(c2.Err(), context.DeadlineExceeded) {
			t.Fatalf("the second attempt at its own deadline: Err() = %v, want DeadlineExceeded", c2.Err())
		}
		k.finish(c2)
		if n := len(c2.afters); n != 0 {
			t.Fatalf("%d AfterFunc registrations left after the end", n)
		}
	})
}

// The end of the incarnation ends the attempt in flight with Canceled, and an attempt begun
// after it starts done.
func TestAttemptContextEndsWithTheIncarnation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inc, cancel := context.WithCancel(context.Background())
		k := newAttemptClock(inc, context.WithoutCancel(inc))
		defer k.close()
		c1 := k.begin(time.Minute)
		child, stopChild := context.WithTimeout(c1, time.Hour)
		defer stopChild()
		cancel()
		<-child.Done()
		if !errors.Is(c1.Err(), context.Canceled) || !errors.Is(child.Err(), context.Canceled) {
			t.Fatalf("Err() = %v, child %v; want Canceled", c1.Err(), child.Err())
		}
		k.finish(c1)
		c2 := k.begin(time.Minute)
		select {
		case <-c2.Done():
		default:
			t.Fatal("an attempt begun after the incarnation ended is not done")
		}
		// A context derived from a done attempt context is done at once.
		late, stopLate := context.WithCancel(c2)
		defer stopLate()
		<-late.Done()
		k.finish(c2)
	})
}

// Contexts derived from attempt contexts and cancelled before the attempt ends unregister:
// a goroutine's attempts do not accumulate them.
func TestAttemptContextDerivedContextsUnregister(t *testing.T) {
	inc, cancel := context.WithCancel(context.Background())
	defer cancel()
	k := newAttemptClock(inc, context.WithoutCancel(inc))
	defer k.close()
	c := k.begin(time.Minute)
	for range 100 {
		_, stop := context.WithCancel(c)
		stop()
	}
	c.mu.Lock()
	n := len(c.afters)
	c.mu.Unlock()
	k.finish(c)
	if n != 0 {
		t.Fatalf("%d registrations left by 100 cancelled derived contexts", n)
	}
}

// BenchmarkAttemptContext is one attempt's context as a sink call over net/http uses it (the
// transport derives a cancel context of its own per request), with the attempts of 16
// goroutines sharing one incarnation: the attempt clock against context.WithTimeout.
func BenchmarkAttemptContext(b *testing.B) {
	const timeout = 30 * time.Second
	for _, tc := range []struct {
		name string
		run  func(b *testing.B, inc context.Context)
	}{
		{"WithTimeout", func(b *testing.B, inc context.Context) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					ctx, cancel := context.WithTimeout(inc, timeout)
					child, stop := context.WithCancelCause(ctx)
					_ = child.Done() // net/http selects on it
					stop(nil)
					cancel()
				}
			})
		}},
		{"clock", func(b *testing.B, inc context.Context) {
			vals := context.WithoutCancel(inc)
			b.RunParallel(func(pb *testing.PB) {
				k := newAttemptClock(inc, vals)
				defer k.close()
				for pb.Next() {
					ctx := k.begin(timeout)
					child, stop := context.WithCancelCause(ctx)
					_ = child.Done() // net/http selects on it
					stop(nil)
					k.finish(ctx)
				}
			})
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			inc, cancel := context.WithCancel(context.Background())
			defer cancel()
			b.SetParallelism(8) // 16 goroutines on this 2-core machine: the default MaxInFlight
			b.ReportAllocs()
			tc.run(b, inc)
		})
	}
}
