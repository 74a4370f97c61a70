package disk_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/schemas"
)

var publishTime = time.Date(2026, 11, 22, 8, 0, 0, 5, time.UTC)

// testEvent returns an event of about 1 KB with every field set.
func testEvent(id string) *schemas.Event {
	return &schemas.Event{
		ID:          id,
		Type:        "Contoso.Items.ItemReceived",
		Subject:     "/items/" + id,
		Time:        "2026-11-22T08:00:00Z",
		DataVersion: "1.0",
		Source:      "/topics/bench",
		Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		Raw:         fmt.Appendf(nil, `{"id":%q,"eventType":"Contoso.Items.ItemReceived","data":{"pad":%q}}`, id, strings.Repeat("x", 900)),
	}
}

// logFS is a file system whose write-ahead log files, created or recycled, call hook with
// "write" or "sync" before every write and sync; an error from hook is returned instead.
// (pebble's errorfs does not see recycled log files.)
type logFS struct {
	vfs.FS
	hook func(op string) error
}

func (fs logFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return logFile{f, fs.hook}, nil
}

func (fs logFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	return fs.wrap(name, f, err)
}

func (fs logFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	return fs.wrap(newname, f, err)
}

type logFile struct {
	vfs.File
	hook func(op string) error
}

func (f logFile) Write(p []byte) (int, error) {
	if err := f.hook("write"); err != nil {
		return 0, err
	}
	return f.File.Write(p)
}

func (f logFile) Sync() error {
	if err := f.hook("sync"); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f logFile) SyncData() error {
	if err := f.hook("sync"); err != nil {
		return err
	}
	return f.File.SyncData()
}

func (f logFile) SyncTo(length int64) (bool, error) {
	if err := f.hook("sync"); err != nil {
		return false, err
	}
	return f.File.SyncTo(length)
}
