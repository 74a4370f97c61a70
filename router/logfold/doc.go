// Package logfold keeps a flood of identical log lines from drowning the log: [New] wraps a
// [slog.Handler] so that a message repeated within a window is written once, and the repeats
// are folded into one line at the end of the window that says how many more there were.
//
// The model: records are keyed by level and message — the constant text, not the attributes,
// since a flood (every store write failing, every accept failing) repeats one message with
// changing details. The first [Options.Burst] records of a key open a window of
// [Options.Window] and are written as they come; the rest are counted and dropped. When the
// window ends, a timer writes one record with the same level and message and the attributes
// moreLikeThis=N and within=<window>, through the handler that wrote the first record of the
// window (so with its logger attributes); then the key is forgotten and the next record of it
// opens a new window. Records below [Options.Level] (warning, by default) are never folded:
// info lines are lifecycle events each worth a line, and who turns debug logging on wants
// every line; floods come from failures. Nor are records logged with a context that
// [Options.Unfolded] picks: lines each of which says what no other does (the ids of the events
// a drop lost), whose number their writer bounds. [Handler.Flush] writes the pending summaries
// at once, for a clean shutdown.
//
// The state is one map behind one mutex shared by the handlers derived with WithAttrs and
// WithGroup; the mutex is never held while the wrapped handler writes. logfold imports no
// egrid package.
package logfold
