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
	if _, err := r.CreateTopic(ctx, "invoices", router.TopicSpec{Key2: "rotated-key-2-of-invoices"}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := logs.String()
	mu.Unlock()
	if !strings.Contains(got, "level=WARN") || !strings.Contains(got, "topic key2 is not standard base64") || !strings.Contains(got, "topic=invoices") || strings.Count(got, "level=WARN") != 1 {
		t.Errorf("logs:\n%s\nwant one WARN naming key2 of topic invoices", got)
	}
}

// TestTopicKeysThatCannotBeSentAreRefused: a topic key is sent in a header or a query
// parameter, so a key given in a create or update must be 16 to 1024 printable ASCII
// characters without spaces; one that is not is refused naming the key and never showing it,
// and the topic keeps its keys. A key the topic has already — stored by an earlier egrid, or
// declared again by a config file at each start — is not checked.
func TestTopicKeysThatCannotBeSentAreRefused(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	if err := st.PutTopic(ctx, "legacy", []byte(`{"key1":"short","key2":"b3RoZXIta2V5LW9mLWxlZ2FjeQ=="}`)); err != nil {
		t.Fatal(err)
	}
	r, err := router.New(router.Config{}, router.Deps{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	before, err := r.CreateTopic(ctx, "adm-t1", router.TopicSpec{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		spec router.TopicSpec
		want string
	}{
		{"a blank key", router.TopicSpec{Key1: " "}, "key1 is blank"},
		{"a key of tabs", router.TopicSpec{Key2: "\t\t"}, "key2 is blank"},
		{"a key holding a line end", router.TopicSpec{Key1: "secret-part-one\nsecret-part-two"}, "key1 holds a control character (byte 15), which no HTTP header can carry"},
		{"a key holding a space", router.TopicSpec{Key1: "secret-part-one secret-part-two"}, "key1 holds a space (byte 15)"},
		{"a key that is not ASCII", router.TopicSpec{Key1: "secret-part-one-ключ"}, "key1 holds a character that is not ASCII (byte 16)"},
		{"a short key", router.TopicSpec{Key2: "secret-15-chars"}, "key2 has 15 characters; use 16 to 1024 printable ASCII characters"},
		{"a long key", router.TopicSpec{Key1: strings.Repeat("k", 1025)}, "key1 has 1025 characters"},
		{"both keys", router.TopicSpec{Key1: " ", Key2: "x"}, "key2 has 1 characters"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := r.CreateTopic(ctx, "adm-t1", c.spec)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("CreateTopic: %v, want an error saying %q", err, c.want)
			}
			if !strings.Contains(err.Error(), "or leave it out to have one generated") {
				t.Errorf("%v: want it to say what to send", err)
			}
			for _, k := range []string{c.spec.Key1, c.spec.Key2} {
				if strings.TrimSpace(k) != "" && strings.Contains(err.Error(), k) {
					t.Errorf("%v: shows the key", err)
				}
			}
			if _, err := r.CreateTopic(ctx, "adm-t9", c.spec); err == nil {
				t.Errorf("creating a topic with it was taken")
			}
			if now, _ := r.Topic("adm-t1"); now.Key1 != before.Key1 || now.Key2 != before.Key2 {
				t.Errorf("the topic's keys changed")
			}
		})
	}
	if _, err := r.CreateTopic(ctx, "adm-t1", router.TopicSpec{Key1: "0123456789abcdef", Key2: strings.Repeat("k", 1024)}); err != nil {
		t.Errorf("keys of 16 and 1024 characters: %v, want them taken", err)
	}

	if spec, err := r.Topic("legacy"); err != nil || spec.Key1 != "short" {
		t.Fatalf("the stored topic with a short key: %+v %v, want it loaded", spec, err)
	}
	if _, err := r.CreateTopic(ctx, "legacy", router.TopicSpec{Key1: "short", Key2: "bmV3LWtleS10d28tb2YtbGVnYWN5"}); err != nil {
		t.Errorf("declaring the stored short key again with a new key2: %v, want it taken", err)
	}
	if _, err := r.CreateTopic(ctx, "legacy", router.TopicSpec{Key2: "shorter"}); err == nil {
		t.Errorf("a new short key2 for the stored topic was taken")
	}
	if spec, _ := r.Topic("legacy"); spec.Key1 != "short" || spec.Key2 != "bmV3LWtleS10d28tb2YtbGVnYWN5" {
		t.Errorf("the stored topic's keys: %q %q", spec.Key1, spec.Key2)
	}
}
