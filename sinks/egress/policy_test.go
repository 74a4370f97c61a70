package egress_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/egress"
)

// TestCheckURL covers the decision on IP literals, so no name is resolved: built-in ranges,
// v4 and v6, mapped and NAT64 addresses, allow and deny lists and their precedence.
func TestCheckURL(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  egress.Config
		url  string
		want string // the whole error message, or "" for allowed
	}{
		{name: "private v4, the message names the rule and how to lift it", url: "https://10.0.0.5/hook",
			want: `endpoint 10.0.0.5:443 denied by egress rule "private ranges are denied; allow with server.egress.allow: [10.0.0.0/8]"`},
		{name: "http default port", url: "http://192.168.1.7/x",
			want: `endpoint 192.168.1.7:80 denied by egress rule "private ranges are denied; allow with server.egress.allow: [192.168.0.0/16]"`},
		{name: "172.16/12", url: "https://172.31.255.1:8443/",
			want: `endpoint 172.31.255.1:8443 denied by egress rule "private ranges are denied; allow with server.egress.allow: [172.16.0.0/12]"`},
		{name: "just outside 172.16/12", url: "https://172.32.0.1/"},
		{name: "shared address space", url: "https://100.100.100.200/",
			want: `endpoint 100.100.100.200:443 denied by egress rule "private ranges are denied; allow with server.egress.allow: [100.64.0.0/10]"`},
		{name: "public v4", url: "https://8.8.8.8/"},
		{name: "public v6", url: "https://[2001:4860:4860::8888]/"},
		{name: "cloud metadata", url: "http://169.254.169.254/latest/meta-data/",
			want: `endpoint 169.254.169.254:80 denied by egress rule "link-local addresses (169.254.0.0/16, fe80::/10: cloud metadata services, neighbours) are denied; allow with server.egress.allow: [169.254.169.254/32]"`},
		{name: "link-local v6 with zone", url: "http://[fe80::1%25eth0]:9000/",
			want: `endpoint [fe80::1]:9000 denied by egress rule "link-local addresses (169.254.0.0/16, fe80::/10: cloud metadata services, neighbours) are denied; allow with server.egress.allow: [fe80::1/128]"`},
		{name: "unique-local", url: "https://[fd12:3456::1]/",
			want: `endpoint [fd12:3456::1]:443 denied by egress rule "unique-local addresses are denied; allow with server.egress.allow: [fc00::/7]"`},
		{name: "v4-mapped private", url: "https://[::ffff:10.1.2.3]/",
			want: `endpoint [::ffff:10.1.2.3]:443 denied by egress rule "private ranges are denied; allow with server.egress.allow: [10.0.0.0/8]"`},
		{name: "v4-mapped metadata", url: "http://[::ffff:a9fe:a9fe]/", want: "link-local addresses"},
		{name: "NAT64 of the metadata address", url: "http://[64:ff9b::a9fe:a9fe]/", want: "link-local addresses"},
		{name: "unspecified v4", url: "http://0.0.0.0:8080/", want: "unspecified addresses"},
		{name: "unspecified v6", url: "http://[::]:8080/", want: "unspecified addresses"},
		{name: "multicast", url: "http://224.0.0.1/", want: "multicast and broadcast"},
		{name: "broadcast", url: "http://255.255.255.255/", want: "multicast and broadcast"},
		{name: "loopback allowed by the zero config", url: "http://127.0.0.1:9000/"},
		{name: "v6 loopback allowed by the zero config", url: "http://[::1]:9000/"},
		{name: "loopback denied", cfg: egress.Config{DenyLoopback: true}, url: "http://127.0.0.1:9000/",
			want: `endpoint 127.0.0.1:9000 denied by egress rule "loopback is denied; allow with server.egress.allow: [127.0.0.0/8]"`},
		{name: "v6 loopback denied", cfg: egress.Config{DenyLoopback: true}, url: "http://[::1]:9000/",
			want: `endpoint [::1]:9000 denied by egress rule "loopback is denied; allow with server.egress.allow: [::1/128]"`},
		{name: "mapped loopback denied", cfg: egress.Config{DenyLoopback: true}, url: "http://[::ffff:127.0.0.1]:9000/", want: "loopback is denied"},
		{name: "loopback allowed again", cfg: egress.Config{DenyLoopback: true, Allow: []string{"127.0.0.0/8"}}, url: "http://127.0.0.1:9000/"},
		{name: "allow a private range", cfg: egress.Config{Allow: []string{"10.1.0.0/16"}}, url: "https://10.1.2.3/"},
		{name: "allow is as narrow as written", cfg: egress.Config{Allow: []string{"10.1.0.0/16"}}, url: "https://10.2.0.1/", want: "private ranges are denied"},
		{name: "allow a single address", cfg: egress.Config{Allow: []string{"169.254.169.254"}}, url: "http://169.254.169.254/"},
		{name: "allow a ULA range", cfg: egress.Config{Allow: []string{"fd00::/8"}}, url: "https://[fd12::1]/"},
		{name: "allow in mapped form", cfg: egress.Config{Allow: []string{"::ffff:10.0.0.0/104"}}, url: "https://10.200.0.1/"},
		{name: "allow in v4 form covers the mapped address", cfg: egress.Config{Allow: []string{"10.0.0.0/8"}}, url: "https://[::ffff:10.0.0.9]/"},
		{name: "deny a public range", cfg: egress.Config{Deny: []string{"8.8.8.0/24"}}, url: "https://8.8.8.8/",
			want: `endpoint 8.8.8.8:443 denied by egress rule "server.egress.deny: 8.8.8.0/24"`},
		{name: "deny beats allow", cfg: egress.Config{Allow: []string{"10.0.0.0/8"}, Deny: []string{"10.9.0.0/16"}}, url: "https://10.9.1.1/",
			want: `endpoint 10.9.1.1:443 denied by egress rule "server.egress.deny: 10.9.0.0/16"`},
		{name: "deny a host pattern, before any lookup", cfg: egress.Config{Deny: []string{"*.internal"}}, url: "https://hooks.corp.INTERNAL./x",
			want: `endpoint hooks.corp.internal:443 denied by egress rule "server.egress.deny: *.internal"`},
		{name: "deny an exact host", cfg: egress.Config{Deny: []string{"metadata.google.internal"}}, url: "http://Metadata.Google.Internal/",
			want: `endpoint metadata.google.internal:80 denied by egress rule "server.egress.deny: metadata.google.internal"`},
		{name: "not a URL is not the policy's to refuse", url: "::nonsense"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := egress.New(c.cfg, egress.Options{ConfigPath: "server.egress"})
			if err != nil {
				t.Fatal(err)
			}
			err = p.CheckURL(context.Background(), c.url)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("CheckURL(%s) = %v, want allowed", c.url, err)
			case c.want == "":
				return
			case err == nil:
				t.Fatalf("CheckURL(%s) allowed, want %q", c.url, c.want)
			case !strings.Contains(err.Error(), c.want):
				t.Fatalf("CheckURL(%s) = %q, want %q", c.url, err, c.want)
			}
			var de *egress.DeniedError
			if !errors.As(err, &de) || !errors.Is(err, sinks.ErrDestinationDenied) {
				t.Fatalf("error %v is not a *DeniedError wrapping sinks.ErrDestinationDenied", err)
			}
		})
	}
}

// TestCheckURLEmbeddedIPv4: IPv6 addresses that carry an IPv4 address a tunnel or translator
// would connect to (IPv4-compatible, 6to4, local-use NAT64) are judged by that IPv4 address;
// local-use NAT64 addresses whose IPv4 bits cannot be located, and Teredo addresses, are
// denied unless allowed. IPv6 rules written for the tunnel prefixes still deny.
func TestCheckURLEmbeddedIPv4(t *testing.T) {
	const metadata = `link-local addresses (169.254.0.0/16, fe80::/10: cloud metadata services, neighbours) are denied; allow with server.egress.allow: [169.254.169.254/32]`
	strict := egress.Config{DenyLoopback: true}
	for _, c := range []struct {
		name string
		cfg  egress.Config
		url  string
		want string // the whole error message, or a part of it; "" for allowed
	}{
		{name: "IPv4-compatible loopback", cfg: strict, url: "http://[::127.0.0.1]/",
			want: `endpoint [::7f00:1]:80 denied by egress rule "loopback is denied; allow with server.egress.allow: [127.0.0.0/8]"`},
		{name: "IPv4-compatible private", url: "https://[::10.0.0.1]/", want: "private ranges are denied; allow with server.egress.allow: [10.0.0.0/8]"},
		{name: "IPv4-compatible metadata", url: "http://[::a9fe:a9fe]/", want: metadata},
		{name: "IPv4-compatible public", url: "https://[::8.8.8.8]/"},
		{name: "::1 stays IPv6 loopback", url: "http://[::1]:9000/"},
		{name: "::1 stays IPv6 loopback when denied", cfg: strict, url: "http://[::1]:9000/", want: "loopback is denied; allow with server.egress.allow: [::1/128]"},
		{name: "6to4 loopback", cfg: strict, url: "http://[2002:7f00:1::]/",
			want: `endpoint [2002:7f00:1::]:80 denied by egress rule "loopback is denied; allow with server.egress.allow: [127.0.0.0/8]"`},
		{name: "6to4 loopback, interface id", cfg: strict, url: "http://[2002:7f00:0001::1]/", want: "loopback is denied"},
		{name: "6to4 metadata", url: "http://[2002:a9fe:a9fe::1]/",
			want: `endpoint [2002:a9fe:a9fe::1]:80 denied by egress rule "` + metadata + `"`},
		{name: "6to4 private", url: "https://[2002:c0a8:0101:5::1]/", want: "private ranges are denied; allow with server.egress.allow: [192.168.0.0/16]"},
		{name: "6to4 public", url: "https://[2002:808:808::1]/"},
		{name: "local-use NAT64 /96 loopback", cfg: strict, url: "http://[64:ff9b:1::7f00:1]/", want: "loopback is denied; allow with server.egress.allow: [127.0.0.0/8]"},
		{name: "local-use NAT64 /96 metadata", url: "http://[64:ff9b:1::169.254.169.254]/", want: metadata},
		{name: "local-use NAT64 /96 public", url: "https://[64:ff9b:1::808:808]/"},
		{name: "local-use NAT64 of another prefix length", url: "http://[64:ff9b:1:7f00:0:100::]/",
			want: `endpoint [64:ff9b:1:7f00:0:100::]:80 denied by egress rule "local-use NAT64 addresses (64:ff9b:1::/48) outside 64:ff9b:1::/96 are denied: where they carry the IPv4 address depends on the translator's prefix length; allow with server.egress.allow: [64:ff9b:1::/48]"`},
		{name: "local-use NAT64 of another /96", url: "https://[64:ff9b:1:abcd::808:808]/", want: "local-use NAT64 addresses"},
		{name: "local-use NAT64 allowed", cfg: egress.Config{Allow: []string{"64:ff9b:1::/48"}}, url: "https://[64:ff9b:1:abcd::808:808]/"},
		{name: "allowing local-use NAT64 does not allow what /96 carries", cfg: egress.Config{Allow: []string{"64:ff9b:1::/48"}}, url: "https://[64:ff9b:1::a00:1]/", want: "private ranges are denied"},
		{name: "Teredo", url: "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
			want: `endpoint [2001:0:4136:e378:8000:63bf:3fff:fdd2]:443 denied by egress rule "Teredo addresses (2001::/32) tunnel to IPv4 addresses egrid does not judge and are denied; allow with server.egress.allow: [2001::/32]"`},
		{name: "Teredo allowed", cfg: egress.Config{Allow: []string{"2001::/32"}}, url: "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/"},
		{name: "just outside Teredo", url: "https://[2001:1::1]/"},
		{name: "allow in v4 form covers 6to4", cfg: egress.Config{Allow: []string{"10.0.0.0/8"}}, url: "https://[2002:a00:1::1]/"},
		{name: "deny in v4 form covers every form", cfg: egress.Config{Deny: []string{"8.8.8.0/24"}}, url: "https://[::8.8.8.8]/", want: "server.egress.deny: 8.8.8.0/24"},
		{name: "deny in v4 form covers 6to4", cfg: egress.Config{Deny: []string{"8.8.8.0/24"}}, url: "https://[2002:808:808::1]/", want: "server.egress.deny: 8.8.8.0/24"},
		{name: "deny in v4 form covers local-use NAT64", cfg: egress.Config{Deny: []string{"8.8.8.0/24"}}, url: "https://[64:ff9b:1::808:808]/", want: "server.egress.deny: 8.8.8.0/24"},
		{name: "deny of the 6to4 prefix still denies", cfg: egress.Config{Deny: []string{"2002::/16"}}, url: "https://[2002:808:808::1]/", want: "server.egress.deny: 2002::/16"},
		{name: "deny of the NAT64 prefix still denies", cfg: egress.Config{Deny: []string{"64:ff9b::/96"}}, url: "https://[64:ff9b::808:808]/", want: "server.egress.deny: 64:ff9b::/96"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := egress.New(c.cfg, egress.Options{ConfigPath: "server.egress"})
			if err != nil {
				t.Fatal(err)
			}
			err = p.CheckURL(context.Background(), c.url)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("CheckURL(%s) = %v, want allowed", c.url, err)
			case c.want == "":
				return
			case err == nil:
				t.Fatalf("CheckURL(%s) allowed, want %q", c.url, c.want)
			case !strings.Contains(err.Error(), c.want):
				t.Fatalf("CheckURL(%s) = %q, want %q", c.url, err, c.want)
			}
			if !errors.Is(err, sinks.ErrDestinationDenied) {
				t.Fatalf("error %v does not wrap sinks.ErrDestinationDenied", err)
			}
		})
	}
}

// TestDenySelf: egrid's own addresses are denied whatever Allow says, by address and port.
func TestDenySelf(t *testing.T) {
	p, err := egress.New(egress.Config{Allow: []string{"127.0.0.0/8", "::1/128", "*.example.com"}}, egress.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p.DenySelf("127.0.0.1:0") // a listener without its port yet: ignored
	p.DenySelf("127.0.0.1:8080")
	p.DenySelf(":9090")
	p.DenySelf("egrid.example.com:443")
	ctx := context.Background()
	for _, c := range []struct {
		url  string
		deny bool
	}{
		{"http://127.0.0.1:8080/admin/topics", true},
		{"http://[::ffff:127.0.0.1]:8080/", true},
		{"http://[::127.0.0.1]:8080/", true},       // IPv4-compatible
		{"http://[2002:7f00:1::]:8080/", true},     // 6to4
		{"http://[64:ff9b:1::7f00:1]:8080/", true}, // local-use NAT64
		{"http://[2002:7f00:5::1]:9090/", true},    // 6to4 of a loopback address, every address listening
		{"http://127.0.0.1:8081/", false},
		{"http://127.0.0.1:9090/", true}, // listening on every address
		{"http://[::1]:9090/", true},
		{"http://127.0.0.5:9090/", true},
		{"http://127.0.0.1:9091/", false},
		{"https://EGRID.example.com/topics/x", true}, // by name, before any lookup
	} {
		err := p.CheckURL(ctx, c.url)
		if c.deny != (err != nil) {
			t.Errorf("CheckURL(%s) = %v, want denied %v", c.url, err, c.deny)
		}
		if err != nil && !strings.Contains(err.Error(), "egrid's own address") {
			t.Errorf("CheckURL(%s) = %v, want the own-address rule", c.url, err)
		}
	}
}

// TestConfigValidate reports every bad entry at once, naming its list and index.
func TestConfigValidate(t *testing.T) {
	err := egress.Config{
		Allow: []string{"10.0.0.0/8", "10.0.0.0/33", "hooks.internal", "*"},
		Deny:  []string{"a b", "-x.example", "*.svc.cluster.local", "fd00::/8", "::1"},
	}.Validate()
	if err == nil {
		t.Fatal("Validate accepted bad entries")
	}
	msg := err.Error()
	for _, want := range []string{`egress.allow[1] "10.0.0.0/33": is not a valid CIDR`, `egress.allow[3] "*"`, `egress.deny[0] "a b"`, `egress.deny[1] "-x.example"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("Validate() = %q, want it to contain %q", msg, want)
		}
	}
	if n := strings.Count(msg, "\n") + 1; n != 4 {
		t.Errorf("Validate() reported %d problems, want 4:\n%s", n, msg)
	}
	if _, err := egress.New(egress.Config{Deny: []string{"nope/1"}}, egress.Options{}); err == nil {
		t.Error("New accepted an invalid config")
	}
}
