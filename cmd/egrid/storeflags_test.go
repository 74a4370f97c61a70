package main

import "testing"

func TestParseDiskSize(t *testing.T) {
	tests := []struct {
		in      string
		n       uint64
		percent bool
		bad     bool
	}{
		{in: "0", n: 0},
		{in: "1048576", n: 1 << 20},
		{in: "512MiB", n: 512 << 20},
		{in: "2 GiB", n: 2 << 30},
		{in: "1GB", n: 1e9},
		{in: "5%", n: 5, percent: true},
		{in: "60%", bad: true},
		{in: "lots", bad: true},
		{in: "-1MiB", bad: true},
	}
	for _, tc := range tests {
		n, percent, err := parseDiskSize(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("parseDiskSize(%q) = %d, %v; want an error", tc.in, n, percent)
			}
			continue
		}
		if err != nil || n != tc.n || percent != tc.percent {
			t.Errorf("parseDiskSize(%q) = %d, %v, %v; want %d, %v", tc.in, n, percent, err, tc.n, tc.percent)
		}
	}
}
