package main

import (
	"fmt"
	"log/slog"

	"github.com/urfave/cli/v2"

	"github.com/egridio/egrid/router/store/disk"
)

// storeCommand is `egrid store check`: verify a store offline.
func storeCommand(e env) *cli.Command {
	return &cli.Command{
		Name:  "store",
		Usage: "inspect the embedded store",
		Subcommands: []*cli.Command{{
			Name:  "check",
			Usage: "verify a store offline: marker files, write-ahead logs, every journal entry, subscription state and dead letter",
			Description: `Reads the store in --data-dir without writing to it (stop the server first, or run it on a
copy) and reports the damage found: what is lost and how to recover. Exit status 0 when
the store is sound, 1 when it is damaged, 2 when it cannot be read.`,
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "data-dir", Usage: "directory of the store (env EGRID_DATA_DIR)", Value: defaultDataDir},
				&cli.StringFlag{Name: "secret-key-file", Usage: "the key the definitions were written with, if any (env EGRID_SECRET_KEY_FILE)"},
			},
			Action: func(c *cli.Context) error { return storeCheck(c, e) },
		}},
	}
}

func storeCheck(c *cli.Context, e env) error {
	dir := c.String("data-dir")
	if !c.IsSet("data-dir") && e.Getenv("EGRID_DATA_DIR") != "" {
		dir = e.Getenv("EGRID_DATA_DIR")
	}
	keyFile := c.String("secret-key-file")
	if keyFile == "" {
		keyFile = e.Getenv("EGRID_SECRET_KEY_FILE")
	}
	var key []byte
	if keyFile != "" {
		var err error
		if key, err = disk.ReadSecretKey(keyFile); err != nil {
			return cli.Exit(fmt.Sprintf("--secret-key-file: %v", err), 2)
		}
	}
	log := slog.New(slog.NewTextHandler(e.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r, err := disk.Check(c.Context, dir, key, log)
	if err != nil {
		return cli.Exit(storeOpenError("checking", dir, err, true).Error(), 2)
	}
	fmt.Fprintf(e.Stdout, "%s: %d topics, %d subscriptions, %d journal entries, %d parked events, %d delivery histories, %d dead letters\n",
		dir, r.Topics, r.Subscriptions, r.JournalEntries, r.ParkedEvents, r.Histories, r.DeadLetters)
	if len(r.Problems) == 0 {
		fmt.Fprintln(e.Stdout, "no damage found")
		return nil
	}
	for _, p := range r.Problems {
		fmt.Fprintf(e.Stdout, "DAMAGE: %v\n", p)
	}
	return cli.Exit(fmt.Sprintf("%d problems found in %s", len(r.Problems), dir), 1)
}
