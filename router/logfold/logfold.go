package logfold

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Options configure a [Handler]. Zero values take the defaults.
type Options struct {
	// Window is how long a key's repeats are folded after its first record (default 1 s).
	Window time.Duration
	// Burst is how many records of a key each window writes before it folds (default 1).
	Burst int
	// Level is the lowest level folded; records below it always pass (default slog.LevelWarn:
	// an info line is a lifecycle event worth its own line — a topic created, an event
	// dropped — and debug lines were asked for; floods come from failures).
	Level slog.Leveler
	// MaxKeys bounds the keys folded at once; records of further keys pass unfolded (default
	// 10 000), so the state stays bounded when messages are not constant.
	MaxKeys int
	// Unfolded, when set, picks the records never folded by the context they are logged
	// with: lines each of which says what no other does, whose number their writer bounds
	// (egrid serve passes logattr.IsUnfolded).
	Unfolded func(ctx context.Context) bool
}

// Handler is a [slog.Handler] that folds repeated records (see the package doc). It is safe
// for concurrent use.
type Handler struct {
	inner slog.Handler
	st    *state
}

type state struct {
	opts Options
	mu   sync.Mutex
	keys map[key]*window
}

type key struct {
	level slog.Level
	msg   string
}

// window is the fold of one key in progress.
type window struct {
	written, folded int
	first           slog.Handler // the handler of the window's first record, for the summary
	timer           *time.Timer
}

// New returns a Handler that writes to inner.
func New(inner slog.Handler, opts Options) *Handler {
	if opts.Window <= 0 {
		opts.Window = time.Second
	}
	if opts.Burst <= 0 {
		opts.Burst = 1
	}
	if opts.Level == nil {
		opts.Level = slog.LevelWarn
	}
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = 10000
	}
	return &Handler{inner: inner, st: &state{opts: opts, keys: map[key]*window{}}}
}

// Enabled reports whether the wrapped handler handles records of level.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.inner.Enabled(ctx, level)
}

// Handle writes r, or counts it when it repeats a key whose window has written its burst.
// A record whose context [Options.Unfolded] accepts is written as it comes.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < h.st.opts.Level.Level() || h.st.opts.Unfolded != nil && h.st.opts.Unfolded(ctx) {
		return h.inner.Handle(ctx, r)
	}
	k := key{r.Level, r.Message}
	st := h.st
	st.mu.Lock()
	w, ok := st.keys[k]
	switch {
	case !ok && len(st.keys) >= st.opts.MaxKeys:
		// Too many distinct messages to track: write it as it is.
	case !ok:
		w = &window{written: 1, first: h.inner}
		st.keys[k] = w
		w.timer = time.AfterFunc(st.opts.Window, func() { st.close(k, w) })
	case w.written < st.opts.Burst:
		w.written++
	default:
		w.folded++
		st.mu.Unlock()
		return nil
	}
	st.mu.Unlock()
	return h.inner.Handle(ctx, r)
}

// close ends w, the window of k, and writes its summary when it folded records.
func (st *state) close(k key, w *window) {
	st.mu.Lock()
	if st.keys[k] != w {
		st.mu.Unlock()
		return // flushed already
	}
	delete(st.keys, k)
	folded := w.folded
	st.mu.Unlock()
	st.summarise(k, w.first, folded)
}

func (st *state) summarise(k key, h slog.Handler, folded int) {
	if folded == 0 {
		return
	}
	r := slog.NewRecord(time.Now(), k.level, k.msg, 0)
	r.AddAttrs(slog.Int("moreLikeThis", folded), slog.Duration("within", st.opts.Window))
	_ = h.Handle(context.Background(), r)
}

// Flush ends every window now, writing the summaries of those that folded records. Later
// records open new windows. Call it before the process exits.
func (h *Handler) Flush() {
	st := h.st
	st.mu.Lock()
	type pending struct {
		k key
		w *window
	}
	var ps []pending
	for k, w := range st.keys {
		w.timer.Stop()
		ps = append(ps, pending{k, w})
	}
	clear(st.keys)
	st.mu.Unlock()
	for _, p := range ps {
		st.summarise(p.k, p.w.first, p.w.folded)
	}
}

// WithAttrs returns a Handler writing to the wrapped handler's WithAttrs, sharing h's folds.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Handler{inner: h.inner.WithAttrs(attrs), st: h.st}
}

// WithGroup returns a Handler writing to the wrapped handler's WithGroup, sharing h's folds.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{inner: h.inner.WithGroup(name), st: h.st}
}
