package main

import (
	"strings"
	"testing"
)

// --log-sync takes io_uring or fdatasync from the flag, EGRID_LOG_SYNC or server.logSync, in
// that order, and anything else is refused naming the setting it came from.
func TestLogSyncIsCheckedWhereItIsGiven(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		file    serverConfig
		setting string // named by the error; "" when the value is accepted
		want    string
	}{
		{name: "default", want: ""},
		{name: "flag", args: []string{"--log-sync", "fdatasync"}, want: "fdatasync"},
		{name: "env", env: map[string]string{"EGRID_LOG_SYNC": "io_uring"}, want: "io_uring"},
		{name: "file", file: serverConfig{LogSync: "fdatasync"}, want: "fdatasync"},
		{name: "flag over file", args: []string{"--log-sync", "io_uring"}, file: serverConfig{LogSync: "fdatasync"}, want: "io_uring"},
		{name: "flag bad", args: []string{"--log-sync", "fsync"}, setting: "--log-sync"},
		{name: "env bad", env: map[string]string{"EGRID_LOG_SYNC": "uring"}, setting: "EGRID_LOG_SYNC"},
		{name: "file bad", file: serverConfig{LogSync: "O_DSYNC"}, setting: "server.logSync"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := resolveServe(t, tc.args, tc.env, tc.file)
			if tc.setting == "" {
				if err != nil || s.Store.LogSync != tc.want {
					t.Fatalf("log sync %q, %v; want %q", s.Store.LogSync, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("log sync %q accepted; want an error naming %s", s.Store.LogSync, tc.setting)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.setting+" ") || !strings.Contains(msg, "use io_uring (the default) or fdatasync") {
				t.Fatalf("error %q; want it to name %s and say what to use", msg, tc.setting)
			}
		})
	}
}
