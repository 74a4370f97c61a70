package router_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/sas"
	"github.com/egridio/egrid/router/store"
)

// A topic key that is not standard base64 is taken (aeg-sas-key works with it), but no SAS
// token can be made with it, so creating the topic warns, naming the key and the remedy; a
// base64 key and a generated one do not.
func TestTopicKeyThatCannotSignWarns(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var logs bytes.Buffer
	r, err := router.New(router.Config{}, router.Deps{Store: store.NewMemory(),
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	good, err := sas.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{Key1: good}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	quiet := logs.String()
	mu.Unlock()
	if quiet != "" {
		t.Errorf("a base64 key and a generated one logged:\n%s", quiet)
	}
	if _, err := r.CreateTopic(ctx, "invoices", router.TopicSpec{Key2: "rotated-key-2"}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := logs.String()
	mu.Unlock()
	if !strings.Contains(got, "level=WARN") || !strings.Contains(got, "topic key2 is not standard base64") || !strings.Contains(got, "topic=invoices") || strings.Count(got, "level=WARN") != 1 {
		t.Errorf("logs:\n%s\nwant one WARN naming key2 of topic invoices", got)
	}
}
