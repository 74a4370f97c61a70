package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas/clip"
)

// defaultMinFreeDisk is the default free-space floor of the store: 256 MiB or 1 % of the
// volume, whichever is smaller, but at least what the store needs to reopen itself
// (defaultFloor).
const defaultMinFreeDisk = "256MiB"

// defaultFloor is the default floor on a volume of total bytes: 256 MiB or 1 % of it,
// whichever is smaller, and at least disk.ReopenFreeBytes (16 MiB), the free space the store
// waits for before it reopens itself after a failed write (a new write-ahead log and
// MANIFEST, and the flush of the log it replays): with a floor under it, publishes went on
// into space the store would need to come back after a full disk (on a 200 MB volume the
// floor was 2 MB). On a volume under 64 MiB it is a quarter of the volume, so the floor stays
// well below its size.
func defaultFloor(total uint64) uint64 {
	return max(min(256<<20, total/100), min(disk.ReopenFreeBytes, total/4))
}

// storeSettings are the resolved settings of the embedded store.
type storeSettings struct {
	// MinFreeDisk is the free-space floor as given: bytes with an optional unit (KiB, MiB,
	// GiB, KB, MB, GB) or a percentage of the volume ("1%"); "0" turns the check off.
	MinFreeDisk string
	// SecretKeyFile holds the key that encrypts topic and subscription definitions at rest.
	SecretKeyFile string
	// LogSync is how the store syncs its write-ahead log: "io_uring" (the default; fdatasync
	// where the kernel gives none) or "fdatasync" ([disk.Options.FdatasyncLog]).
	LogSync string
}

// storeFlags are serve's flags for the embedded store.
func storeFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "secret-key-file", Usage: "file holding a 32-byte key (64 hex digits: openssl rand -hex 32) that encrypts topic and subscription definitions (topic keys, delivery secrets) in the store; mode 600 (env EGRID_SECRET_KEY_FILE)"},
		&cli.StringFlag{Name: "log-sync", Usage: "how the store syncs its write-ahead log: io_uring (default; fdatasync where the kernel gives no io_uring) or fdatasync, in the syncing goroutine (env EGRID_LOG_SYNC)"},
		&cli.StringFlag{Name: "min-free-disk", Usage: "free-space floor of the data directory's volume: below it publishes are refused with 507 Insufficient Storage, before the disk is full; bytes (512MiB, 2GiB) below the volume's size or a percentage (5%), 0 turns it off; default 256MiB or 1% of the volume, whichever is smaller, and at least 16MiB (env EGRID_MIN_FREE_DISK)"},
	}
}

// resolveStore resolves the store settings: flag > environment > file > default.
func resolveStore(c *cli.Context, getenv func(string) string, fs serverConfig) (storeSettings, error) {
	s := storeSettings{MinFreeDisk: fs.MinFreeDisk, SecretKeyFile: fs.SecretKeyFile, LogSync: fs.LogSync}
	from := "server.logSync"
	switch {
	case c.IsSet("log-sync"):
		s.LogSync, from = c.String("log-sync"), "--log-sync"
	case getenv("EGRID_LOG_SYNC") != "":
		s.LogSync, from = getenv("EGRID_LOG_SYNC"), "EGRID_LOG_SYNC"
	}
	switch s.LogSync {
	case "", "io_uring", "fdatasync":
	default:
		return s, fmt.Errorf("%s %q: use io_uring (the default) or fdatasync", from, clip.String(s.LogSync))
	}
	switch {
	case c.IsSet("secret-key-file"):
		s.SecretKeyFile = c.String("secret-key-file")
	case getenv("EGRID_SECRET_KEY_FILE") != "":
		s.SecretKeyFile = getenv("EGRID_SECRET_KEY_FILE")
	}
	switch {
	case c.IsSet("min-free-disk"):
		s.MinFreeDisk = c.String("min-free-disk")
	case getenv("EGRID_MIN_FREE_DISK") != "":
		s.MinFreeDisk = getenv("EGRID_MIN_FREE_DISK")
	}
	if s.MinFreeDisk != "" {
		if _, _, err := parseDiskSize(s.MinFreeDisk); err != nil {
			return s, fmt.Errorf("min free disk %q: %w", clip.String(s.MinFreeDisk), err)
		}
	}
	return s, nil
}

// minFreeBytes returns the floor in bytes for the volume holding dir (or, while dir does not
// exist yet, its nearest existing parent). A floor in bytes at or above the volume's size is
// an error: every publish would be refused with 507, and the store's recovery, which waits
// for free space above the floor, would wait forever.
func (s storeSettings) minFreeBytes(dir string) (uint64, error) {
	v := s.MinFreeDisk
	if v == "" {
		v = defaultMinFreeDisk
	}
	n, percent, err := parseDiskSize(v)
	if err != nil {
		return 0, fmt.Errorf("--min-free-disk %q: %w", clip.String(v), err)
	}
	total, err := volumeBytes(existingDir(dir))
	if errors.Is(err, errors.ErrUnsupported) {
		// The embedded store does not watch free space on this platform either.
		if s.MinFreeDisk != "" && n > 0 {
			return 0, fmt.Errorf("--min-free-disk %q: egrid does not watch the disk's free space on this platform: leave it unset or 0", clip.String(v))
		}
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("--min-free-disk: reading the size of the volume of %s: %w", dir, err)
	}
	switch {
	case percent:
		return total * n / 100, nil
	case s.MinFreeDisk == "":
		return defaultFloor(total), nil
	case n >= total:
		instead := "5%"
		if mib := total / 20 >> 20; mib > 0 {
			instead += fmt.Sprintf(" or %dMiB", mib)
		}
		return 0, fmt.Errorf("--min-free-disk %q: the floor (%d bytes) is not below the size of the volume of %s (%d bytes, %.1f GiB), so every publish would be refused: pass less, such as %s, or 0 to turn the check off",
			clip.String(v), n, dir, total, float64(total)/(1<<30), instead)
	}
	return n, nil
}

// existingDir returns dir, or its nearest parent that exists when dir does not (yet).
func existingDir(dir string) string {
	for d := filepath.Clean(dir); ; {
		if _, err := os.Stat(d); err == nil {
			return d
		}
		parent := filepath.Dir(d)
		if parent == d {
			return dir // the root is missing too: let the caller report the error
		}
		d = parent
	}
}

// parseDiskSize parses "512MiB", "2GB", "1048576" or "5%" (percent is then true and n the
// percentage).
func parseDiskSize(v string) (n uint64, percent bool, err error) {
	v = strings.TrimSpace(v)
	if p, ok := strings.CutSuffix(v, "%"); ok {
		f, err := strconv.ParseUint(strings.TrimSpace(p), 10, 64)
		if err != nil || f > 50 {
			return 0, false, errors.New("use a whole percentage from 0 to 50, such as 5%")
		}
		return f, true, nil
	}
	units := []struct {
		suffix string
		mult   uint64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	mult := uint64(1)
	for _, u := range units {
		if num, ok := strings.CutSuffix(v, u.suffix); ok {
			v, mult = strings.TrimSpace(num), u.mult
			break
		}
	}
	n, err = strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, false, errors.New("use bytes with an optional unit (512MiB, 2GiB, 1GB) or a percentage of the volume (5%)")
	}
	if n > math.MaxUint64/mult { // n*mult would wrap around, to 0 for 16777216TiB
		return 0, false, errors.New("is more than 16 EiB, larger than any volume: use a size below the volume's, such as 512MiB, or a percentage of it (5%)")
	}
	return n * mult, false, nil
}

// openStore opens the embedded store in the data directory, creating it private (0700). The
// damage the store finds is counted in m (metrics.StoreCorruptionCount).
func openStore(s serveSettings, log *slog.Logger, m *metrics.Set) (*disk.Store, error) {
	if err := os.MkdirAll(s.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the data directory: %w", err)
	}
	minFree, err := s.Store.minFreeBytes(s.DataDir)
	if err != nil {
		return nil, err
	}
	if s.Store.MinFreeDisk != "" && minFree > 0 && minFree < disk.ReopenFreeBytes {
		// Taken, not refused: the default on a volume under 64 MiB is below it too. But the
		// operator is told once, where the floor is set, what a failed store waits for.
		log.Warn(fmt.Sprintf("the free-space floor (--min-free-disk) of %.1f MiB is below the %.1f MiB the store needs free to reopen itself after a write fails on a full disk: publishes are taken down to the floor, but once a write has failed the store refuses writes until %.1f MiB is free (GET /admin/health says how much is free); pass --min-free-disk 16MiB or more to keep that room",
			float64(minFree)/(1<<20), float64(disk.ReopenFreeBytes)/(1<<20), float64(disk.ReopenFreeBytes)/(1<<20)),
			"dir", s.DataDir, "minFreeBytes", minFree, "reopenFreeBytes", disk.ReopenFreeBytes)
	}
	var key []byte
	if s.Store.SecretKeyFile != "" {
		if key, err = disk.ReadSecretKey(s.Store.SecretKeyFile); err != nil {
			return nil, fmt.Errorf("--secret-key-file: %w", err)
		}
	}
	return disk.Open(s.DataDir, disk.Options{
		Logger: log, MinFreeBytes: minFree, PrivateDir: true, SecretKey: key, FdatasyncLog: s.Store.LogSync == "fdatasync",
		OnCorruption: func(kind string) { m.Add(metrics.Key{Name: metrics.StoreCorruptionCount, Dim: kind}, 1) },
	})
}

// storeOpenError is the error of a store in dir that did not open (err), with what to do for
// the causes known: another process holding it (for `egrid store check`, check says how to
// check it anyway), a path through a file, a read-only file system, permissions that keep
// egrid out. Other errors say what to do themselves (a data directory open to others says to
// chmod it, damage to restore a backup).
func storeOpenError(doing, dir string, err error, check bool) error {
	msg := fmt.Sprintf("%s the store in %s: %v", doing, dir, err)
	switch file, isFile := fileOnPath(dir); {
	case errors.Is(err, disk.ErrLocked) && check:
		msg += fmt.Sprintf("; another process holds the store in %s, a running egrid serve most likely: stop the server first, or check a copy of the directory", dir)
	case errors.Is(err, disk.ErrLocked):
		msg += fmt.Sprintf("; another process holds the store in %s (an egrid serve or egrid store check): stop it, or give this server a different --data-dir", dir)
	case errors.Is(err, syscall.ENOTDIR) && isFile:
		msg += fmt.Sprintf("; %s is a file, not a directory: give --data-dir a directory, or a path egrid can create one at", file)
	case errors.Is(err, syscall.EROFS) && !check:
		msg += fmt.Sprintf("; the file system holding %s is mounted read-only, and egrid serve writes the store: mount it read-write, or give --data-dir a directory on a writable file system (egrid store check reads a store on a read-only mount)", dir)
	case errors.Is(err, fs.ErrPermission):
		msg += fmt.Sprintf("; egrid needs to read, write and enter %s and the files in it (mode 700, owned by the user egrid runs as), and to enter its parent directories: chown or chmod it, or give --data-dir a directory it may use", dir)
	}
	return errors.New(msg)
}

// fileOnPath returns the first path of dir or its parents that exists and is not a
// directory.
func fileOnPath(dir string) (string, bool) {
	var parents []string
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		parents = append(parents, p)
		if filepath.Dir(p) == p {
			break
		}
	}
	for i := len(parents) - 1; i >= 0; i-- {
		info, err := os.Stat(parents[i])
		if err != nil {
			return "", false
		}
		if !info.IsDir() {
			return parents[i], true
		}
	}
	return "", false
}
