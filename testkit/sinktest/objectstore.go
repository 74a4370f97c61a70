package sinktest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/sinks"
)

// ObjectStore runs the [sinks.ObjectStore] conformance suite. newStore returns a store that
// creates buckets on first write; bucket returns a bucket name no other subtest uses (the
// suite may share one store between subtests).
func ObjectStore(t *testing.T, newStore func(t *testing.T) sinks.ObjectStore, bucket func(t *testing.T) string) {
	ctx := context.Background()

	t.Run("PutThenGet", func(t *testing.T) {
		s, b := newStore(t), bucket(t)
		body := []byte(`[{"id":"1"}]`)
		before := time.Now().Add(-time.Minute)
		info, err := s.Put(ctx, b, "SUB-1/2026/1/2/3/a.json", body, sinks.PutOptions{ContentType: "application/json"})
		if err != nil {
			t.Fatalf("Put: %v", err)
		}
		if info.Bucket != b || info.Key != "SUB-1/2026/1/2/3/a.json" || info.Size != int64(len(body)) || info.ETag == "" || info.URL == "" {
			t.Errorf("Put described the object as %+v", info)
		}
		if info.LastModified.Before(before) {
			t.Errorf("LastModified %v is before the Put", info.LastModified)
		}
		got, ginfo, err := s.Get(ctx, b, "SUB-1/2026/1/2/3/a.json", 0)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if !bytes.Equal(got, body) {
			t.Errorf("Get = %q, want %q", got, body)
		}
		if ginfo.ETag != info.ETag || ginfo.Size != info.Size || ginfo.ContentType != "application/json" {
			t.Errorf("Get described the object as %+v, Put as %+v", ginfo, info)
		}
	})

	t.Run("PutDoesNotRetainBody", func(t *testing.T) {
		s, b := newStore(t), bucket(t)
		body := []byte("original")
		if _, err := s.Put(ctx, b, "k", body, sinks.PutOptions{ContentType: "text/plain"}); err != nil {
			t.Fatal(err)
		}
		copy(body, "mutated!")
		got, _, err := s.Get(ctx, b, "k", 0)
		if err != nil || string(got) != "original" {
			t.Errorf("Get after the caller reused its buffer = %q, %v; want original", got, err)
		}
	})

	t.Run("PutReplaces", func(t *testing.T) {
		s, b := newStore(t), bucket(t)
		if _, err := s.Put(ctx, b, "k.json", []byte("[1]"), sinks.PutOptions{ContentType: "application/json"}); err != nil {
			t.Fatal(err)
		}
		second, err := s.Put(ctx, b, "k.json", []byte("[1,2]"), sinks.PutOptions{ContentType: "application/json"})
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := s.Get(ctx, b, "k.json", 0)
		if err != nil || string(got) != "[1,2]" {
			t.Errorf("Get after a second Put = %q, %v; want [1,2]", got, err)
		}
		list, err := s.List(ctx, b, sinks.ListQuery{Prefix: ""})
		if err != nil || len(list) != 1 || list[0].Size != second.Size {
			t.Errorf("List after replacing = %+v, %v; want the one object", list, err)
		}
	})

	t.Run("ListByPrefixInKeyOrder", func(t *testing.T) {
		s, b := newStore(t), bucket(t)
		keys := []string{"SUB/2026/1/10/0/c.json", "SUB/2026/1/2/23/a.json", "SUB-2/2026/1/1/0/x.json", "SUB/2026/1/2/3/b.json", "NS/orders/sub/2026/1/1/0/y.json"}
		for i, k := range keys {
			if _, err := s.Put(ctx, b, k, bytes.Repeat([]byte("x"), i+1), sinks.PutOptions{ContentType: "application/json"}); err != nil {
				t.Fatal(err)
			}
		}
		list, err := s.List(ctx, b, sinks.ListQuery{Prefix: "SUB/"})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"SUB/2026/1/10/0/c.json", "SUB/2026/1/2/23/a.json", "SUB/2026/1/2/3/b.json"}
		if len(list) != len(want) {
			t.Fatalf("List(SUB/) = %v, want %v", keysOf(list), want)
		}
		sizes := map[string]int64{"SUB/2026/1/10/0/c.json": 1, "SUB/2026/1/2/23/a.json": 2, "SUB/2026/1/2/3/b.json": 4}
		for i, o := range list {
			if o.Key != want[i] || o.Bucket != b || o.Size != sizes[o.Key] || o.LastModified.IsZero() {
				t.Errorf("List(SUB/)[%d] = %+v, want key %s of %d bytes", i, o, want[i], sizes[want[i]])
			}
		}
		all, err := s.List(ctx, b, sinks.ListQuery{Prefix: ""})
		if err != nil || len(all) != len(keys) {
			t.Errorf("List(\"\") = %v, %v; want all %d objects", keysOf(all), err, len(keys))
		}
		none, err := s.List(ctx, b, sinks.ListQuery{Prefix: "NOPE/"})
		if err != nil || len(none) != 0 {
			t.Errorf("List(NOPE/) = %v, %v; want nothing and no error", keysOf(none), err)
		}
	})

	// List answers a page at a time: at most Max objects after StartAfter, in key order, and a
	// short page is the last; ListAll pages through them all.
	t.Run("ListPages", func(t *testing.T) {
		s, b := newStore(t), bucket(t)
		var want []string
		for i := range 7 {
			k := fmt.Sprintf("P/%02d.json", i)
			want = append(want, k)
			if _, err := s.Put(ctx, b, k, []byte("[]"), sinks.PutOptions{ContentType: "application/json"}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Put(ctx, b, "Q/00.json", []byte("[]"), sinks.PutOptions{ContentType: "application/json"}); err != nil {
			t.Fatal(err)
		}
		var got []string
		q := sinks.ListQuery{Prefix: "P/", Max: 3}
		for pages := 0; ; pages++ {
			if pages == 4 {
				t.Fatalf("more than 3 pages of 3 for 7 objects: %v", got)
			}
			page, err := s.List(ctx, b, q)
			if err != nil || len(page) > 3 {
				t.Fatalf("List(%+v) = %v, %v; want at most 3 objects", q, keysOf(page), err)
			}
			got = append(got, keysOf(page)...)
			if len(page) < 3 {
				break
			}
			q.StartAfter = page[len(page)-1].Key
		}
		if !slices.Equal(got, want) {
			t.Errorf("pages of 3 = %v, want %v", got, want)
		}
		got = got[:0]
		for o, err := range sinks.ListAll(ctx, s, b, sinks.ListQuery{Prefix: "P/", StartAfter: "P/04.json", Max: 2}) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, o.Key)
		}
		if !slices.Equal(got, want[5:]) {
			t.Errorf("ListAll after P/04.json = %v, want %v", got, want[5:])
		}
	})

	// Metadata comes back from Get and from List (the stores egrid ships list it; the contract
	// lets a server that lists none leave it out), by lower-case name, and a second Put
	// replaces it.
	t.Run("Metadata", func(t *testing.T) {
		s, b := newStore(t), bucket(t)
		meta := map[string]string{"egrid-topic": "Orders-1"}
		if _, err := s.Put(ctx, b, "m/a.json", []byte("[1]"), sinks.PutOptions{ContentType: "application/json", Metadata: meta}); err != nil {
			t.Fatal(err)
		}
		meta["egrid-topic"] = "changed after Put"
		if _, err := s.Put(ctx, b, "m/b.json", []byte("[2]"), sinks.PutOptions{ContentType: "application/json"}); err != nil {
			t.Fatal(err)
		}
		_, info, err := s.Get(ctx, b, "m/a.json", 0)
		if err != nil || len(info.Metadata) != 1 || info.Metadata["egrid-topic"] != "Orders-1" {
			t.Errorf("Get described the object with metadata %v, %v; want just egrid-topic: Orders-1", info.Metadata, err)
		}
		list, err := s.List(ctx, b, sinks.ListQuery{Prefix: "m/"})
		if err != nil || len(list) != 2 {
			t.Fatalf("List = %v, %v; want 2 objects", keysOf(list), err)
		}
		if len(list[0].Metadata) != 1 || list[0].Metadata["egrid-topic"] != "Orders-1" {
			t.Errorf("List described %s with metadata %v, want just egrid-topic: Orders-1", list[0].Key, list[0].Metadata)
		}
		if len(list[1].Metadata) != 0 {
			t.Errorf("List described %s, put without metadata, with %v", list[1].Key, list[1].Metadata)
		}
		if _, err := s.Put(ctx, b, "m/a.json", []byte("[3]"), sinks.PutOptions{ContentType: "application/json"}); err != nil {
			t.Fatal(err)
		}
		if _, info, err := s.Get(ctx, b, "m/a.json", 0); err != nil || len(info.Metadata) != 0 {
			t.Errorf("after a Put without metadata, Get described the object with %v, %v; want none", info.Metadata, err)
		}
	})

	// Get with a limit reads an object of up to limit bytes, and refuses a larger one naming it.
	t.Run("GetLimit", func(t *testing.T) {
		s, b := newStore(t), bucket(t)
		body := bytes.Repeat([]byte("x"), 100)
		if _, err := s.Put(ctx, b, "big.json", body, sinks.PutOptions{ContentType: "application/json"}); err != nil {
			t.Fatal(err)
		}
		for _, limit := range []int64{0, 100, 1000} {
			if got, _, err := s.Get(ctx, b, "big.json", limit); err != nil || !bytes.Equal(got, body) {
				t.Errorf("Get with limit %d of a 100-byte object: %d bytes, %v; want all of it", limit, len(got), err)
			}
		}
		got, _, err := s.Get(ctx, b, "big.json", 99)
		if !errors.Is(err, sinks.ErrObjectTooLarge) || got != nil {
			t.Fatalf("Get with limit 99 of a 100-byte object: %d bytes, %v; want ErrObjectTooLarge", len(got), err)
		}
		if msg := err.Error(); !strings.Contains(msg, "big.json") || !strings.Contains(msg, "100") {
			t.Errorf("the refusal %q does not name the object and its size", msg)
		}
	})

	t.Run("MissingObject", func(t *testing.T) {
		s, b := newStore(t), bucket(t)
		if _, err := s.Put(ctx, b, "there", []byte("x"), sinks.PutOptions{ContentType: "text/plain"}); err != nil {
			t.Fatal(err)
		}
		_, _, err := s.Get(ctx, b, "not-there", 0)
		if !errors.Is(err, sinks.ErrObjectNotFound) {
			t.Errorf("Get of a missing key: %v, want ErrObjectNotFound", err)
		}
	})

	t.Run("MissingBucket", func(t *testing.T) {
		s, b := newStore(t), bucket(t)
		if _, err := s.List(ctx, b, sinks.ListQuery{Prefix: ""}); !errors.Is(err, sinks.ErrBucketNotFound) {
			t.Errorf("List of a missing bucket: %v, want ErrBucketNotFound", err)
		}
		if _, _, err := s.Get(ctx, b, "k", 0); !errors.Is(err, sinks.ErrBucketNotFound) {
			t.Errorf("Get from a missing bucket: %v, want ErrBucketNotFound", err)
		}
	})

	t.Run("CancelledContext", func(t *testing.T) {
		s, b := newStore(t), bucket(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.Put(cctx, b, "k", []byte("x"), sinks.PutOptions{ContentType: "text/plain"}); !errors.Is(err, context.Canceled) {
			t.Errorf("Put with a cancelled context: %v, want context.Canceled", err)
		}
		if _, err := s.List(cctx, b, sinks.ListQuery{Prefix: ""}); !errors.Is(err, context.Canceled) {
			t.Errorf("List with a cancelled context: %v, want context.Canceled", err)
		}
		if _, _, err := s.Get(cctx, b, "k", 0); !errors.Is(err, context.Canceled) {
			t.Errorf("Get with a cancelled context: %v, want context.Canceled", err)
		}
		if _, _, err := s.Get(ctx, b, "k", 0); err == nil {
			t.Errorf("a Put with a cancelled context stored the object")
		}
	})

	t.Run("ConcurrentPuts", func(t *testing.T) {
		s, b := newStore(t), bucket(t)
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for i := range 16 {
			wg.Go(func() {
				if _, err := s.Put(ctx, b, fmt.Sprintf("P/%02d.json", i), []byte(fmt.Sprintf("[%d]", i)), sinks.PutOptions{ContentType: "application/json"}); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("concurrent Put: %v", err)
		}
		list, err := s.List(ctx, b, sinks.ListQuery{Prefix: "P/"})
		if err != nil || len(list) != 16 {
			t.Fatalf("List after 16 concurrent Puts = %d objects, %v", len(list), err)
		}
		for i, o := range list {
			got, _, err := s.Get(ctx, b, o.Key, 0)
			if err != nil || string(got) != fmt.Sprintf("[%d]", i) {
				t.Errorf("%s = %q, %v", o.Key, got, err)
			}
		}
	})
}

func keysOf(list []sinks.ObjectInfo) []string {
	out := make([]string, len(list))
	for i, o := range list {
		out[i] = o.Key
	}
	return out
}
