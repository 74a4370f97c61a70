package main

import (
	"strings"
	"testing"
)

// --any-api-version (router.Config.AnyAPIVersion, an extension) is off unless the flag, then
// EGRID_ANY_API_VERSION, then server.anyApiVersion turns it on.
func TestResolveAnyAPIVersion(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		file serverConfig
		want bool
	}{
		{name: "default: off, as Azure", want: false},
		{name: "flag", args: []string{"--any-api-version"}, want: true},
		{name: "environment", env: map[string]string{"EGRID_ANY_API_VERSION": "true"}, want: true},
		{name: "config file", file: serverConfig{AnyAPIVersion: true}, want: true},
		{name: "flag over file", args: []string{"--any-api-version=false"}, file: serverConfig{AnyAPIVersion: true}, want: false},
		{name: "environment over file", env: map[string]string{"EGRID_ANY_API_VERSION": "false"}, file: serverConfig{AnyAPIVersion: true}, want: false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := resolveServe(t, c.args, c.env, c.file)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.routerConfig().AnyAPIVersion; got != c.want {
				t.Errorf("router.Config.AnyAPIVersion %v, want %v", got, c.want)
			}
		})
	}
	_, err := resolveServe(t, nil, map[string]string{"EGRID_ANY_API_VERSION": "maybe"}, serverConfig{})
	if err == nil || !strings.Contains(err.Error(), `EGRID_ANY_API_VERSION="maybe": use true or false`) {
		t.Errorf("EGRID_ANY_API_VERSION=maybe: %v; want it refused, saying what to use", err)
	}
}
