package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/egridio/egrid/schemas/clip"
	"github.com/egridio/egrid/sinks"
)

// Config is the egress policy as data (YAML `server.egress` of egrid serve). The zero Config
// is the embedded library's default: link-local, unspecified, multicast, private and
// unique-local addresses are denied, and so are Teredo addresses and local-use NAT64
// addresses outside 64:ff9b:1::/96 (see the package documentation); loopback and public
// addresses are allowed.
type Config struct {
	// Allow lists CIDRs ("10.0.0.0/8", "fd00::/8"), single addresses ("192.168.1.10") and host
	// patterns ("hooks.internal", "*.svc.cluster.local") egrid may connect to even though a
	// built-in rule denies them: private ranges, loopback, link-local. A host pattern matches
	// the endpoint's host name, and allows every address that name resolves to.
	Allow []string `json:"allow,omitempty" yaml:"allow,omitempty"`
	// Deny lists CIDRs, addresses and host patterns egrid must never connect to. Deny beats
	// Allow.
	Deny []string `json:"deny,omitempty" yaml:"deny,omitempty"`
	// DenyLoopback denies loopback addresses (127.0.0.0/8, ::1) unless Allow names them. Off
	// in the zero Config, so embedded routers and their tests reach http://127.0.0.1 servers;
	// egrid serve turns it on unless it runs with --insecure-dev.
	DenyLoopback bool `json:"denyLoopback,omitempty" yaml:"denyLoopback,omitempty"`
}

// Validate reports every entry of Allow and Deny that is not a CIDR, an address or a host
// pattern, at once.
func (c Config) Validate() error {
	var errs []error
	for _, list := range []struct {
		name    string
		entries []string
	}{{"allow", c.Allow}, {"deny", c.Deny}} {
		for i, s := range list.entries {
			if _, err := parseRule(s); err != nil {
				errs = append(errs, fmt.Errorf("egress.%s[%d] %q: %w", list.name, i, clip.String(s), err))
			}
		}
	}
	return errors.Join(errs...)
}

// Options are a [Policy]'s dependencies and presentation.
type Options struct {
	// Resolver resolves host names, both in [Policy.CheckURL] and when [Policy.DialContext]
	// connects; nil means net.DefaultResolver.
	Resolver *net.Resolver
	// ConfigPath is how messages name the Config, so that the advice in an error can be
	// pasted into the right place ("server.egress" for egrid serve); empty means "egress".
	ConfigPath string
}

// Policy decides which addresses egrid may connect to. It is safe for concurrent use;
// only [Policy.DenySelf] changes it, by adding addresses.
type Policy struct {
	allow, deny  []rule
	denyLoopback bool
	path         string
	dialer       net.Dialer // the base dialer; DialContext uses a copy with its own control

	selfMu sync.Mutex // serialises DenySelf
	self   atomic.Pointer[selfSet]
}

// selfSet are egrid's own addresses. It is replaced, never changed.
type selfSet struct {
	addrs []netip.AddrPort // listen or public addresses with a specific IP
	ports []uint16         // listen addresses with an unspecified IP: any local address
	local map[netip.Addr]bool
	hosts []string // "name:port" of public URLs, lower case
}

// New builds a policy. It fails when cfg does not validate.
func New(cfg Config, opts Options) (*Policy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Policy{
		denyLoopback: cfg.DenyLoopback,
		path:         opts.ConfigPath,
		dialer:       net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Resolver: opts.Resolver},
	}
	if p.path == "" {
		p.path = "egress"
	}
	for _, s := range cfg.Allow {
		r, _ := parseRule(s) // validated above
		p.allow = append(p.allow, r)
	}
	for _, s := range cfg.Deny {
		r, _ := parseRule(s)
		p.deny = append(p.deny, r)
	}
	p.self.Store(&selfSet{})
	return p, nil
}

// DenySelf adds one of egrid's own addresses, "host:port", which every check denies whatever
// Allow says: its listen address (an unspecified host such as "0.0.0.0" or "" stands for every
// address of this machine) or the host and port of its public URL. An address with port 0 or
// none is ignored (call it again once the listener has its port).
func (p *Policy) DenySelf(hostport string) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return
	}
	pn, err := netip.ParseAddrPort(net.JoinHostPort("0.0.0.0", port))
	if err != nil || pn.Port() == 0 {
		return
	}
	p.selfMu.Lock()
	defer p.selfMu.Unlock()
	cur := p.self.Load()
	next := &selfSet{
		addrs: append([]netip.AddrPort(nil), cur.addrs...),
		ports: append([]uint16(nil), cur.ports...),
		hosts: append([]string(nil), cur.hosts...),
		local: cur.local,
	}
	ip, err := netip.ParseAddr(host)
	switch {
	case host == "" || err == nil && ip.IsUnspecified():
		next.ports = append(next.ports, pn.Port())
		if next.local == nil {
			next.local = localAddrs()
		}
	case err == nil:
		next.addrs = append(next.addrs, netip.AddrPortFrom(canonical(ip), pn.Port()))
	default:
		next.hosts = append(next.hosts, normalHost(host)+":"+port)
	}
	p.self.Store(next)
}

// localAddrs returns the addresses of this machine's interfaces (best effort).
func localAddrs() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out[canonical(ip)] = true
			}
		}
	}
	return out
}

// DeniedError is a destination the policy refused. It wraps [sinks.ErrDestinationDenied].
type DeniedError struct {
	// Host is the endpoint's host as in its URL; empty when only the address is known.
	Host string
	// Addr is the address refused; its IP is invalid when the host name itself was refused.
	Addr netip.AddrPort
	// Port is the destination port (Addr's, or the URL's when Addr is invalid).
	Port uint16
	// Rule names the rule that refused it and, for a built-in one, how to allow it.
	Rule string
}

// Error names the endpoint and the rule, e.g. endpoint 10.0.0.5:443 denied by egress rule
// "private ranges are denied; allow with server.egress.allow: [10.0.0.0/8]".
func (e *DeniedError) Error() string {
	var where string
	switch {
	case !e.Addr.IsValid():
		where = net.JoinHostPort(e.Host, fmt.Sprint(e.Port))
	case e.Host == "" || isIPLiteral(e.Host):
		where = e.Addr.String()
	default:
		where = fmt.Sprintf("%s (%s)", net.JoinHostPort(e.Host, fmt.Sprint(e.Port)), e.Addr.Addr())
	}
	return fmt.Sprintf("endpoint %s denied by egress rule %q", where, e.Rule)
}

// Unwrap returns [sinks.ErrDestinationDenied].
func (e *DeniedError) Unwrap() error { return sinks.ErrDestinationDenied }

// CheckURL checks a webhook endpoint URL before any connection to it: an IP literal as it is,
// a host name by the host patterns and then every address it resolves to (one denied address
// is enough). It returns nil or a *[DeniedError]. A URL that does not parse, or a name that
// does not resolve, is not the policy's to refuse: it returns nil, and URL validation or the
// connection reports the problem.
func (p *Policy) CheckURL(ctx context.Context, rawURL string) error {
	host, port, err := p.checkURL(rawURL)
	if err != nil || host == "" {
		return err
	}
	ips, err := p.dialer.Resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	for _, ip := range ips {
		if de := p.check(host, netip.AddrPortFrom(ip.WithZone(""), port)); de != nil {
			return de
		}
	}
	return nil
}

// CheckURLNoLookup is [Policy.CheckURL] without the lookup: it judges an IP literal, and a
// host name by the host patterns and egrid's own names only. For callers whose connections are
// made by someone else (an in-memory transport, a client with its own dialer), where a lookup
// would mean nothing.
func (p *Policy) CheckURLNoLookup(rawURL string) error {
	_, _, err := p.checkURL(rawURL)
	return err
}

// checkURL judges what can be judged without a lookup. It returns the host name and port
// still to resolve and check, or an empty host when the URL is an IP literal (decided) or
// does not parse (not the policy's to refuse).
func (p *Policy) checkURL(rawURL string) (string, uint16, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Hostname() == "" {
		return "", 0, nil
	}
	port := defaultPort(u)
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if de := p.check("", netip.AddrPortFrom(ip.WithZone(""), port)); de != nil {
			return "", 0, de
		}
		return "", 0, nil
	}
	host = normalHost(host)
	if de := p.checkName(host, port); de != nil {
		return "", 0, de
	}
	return host, port, nil
}

// defaultPort is the URL's port, or its scheme's.
func defaultPort(u *url.URL) uint16 {
	if ap, err := netip.ParseAddrPort(net.JoinHostPort("0.0.0.0", u.Port())); err == nil && ap.Port() != 0 {
		return ap.Port()
	}
	if strings.EqualFold(u.Scheme, "http") {
		return 80
	}
	return 443
}

// DialContext connects like net.Dialer.DialContext (30 s connect timeout, 30 s keep-alive,
// the policy's resolver), refusing a denied address: the host name is checked against the
// host patterns before resolution, and each address the dialer is about to connect to after
// it, so a name that resolves somewhere else than it did at create time gains nothing. A
// refusal is a *[DeniedError] (possibly inside a *net.OpError); nothing is sent. It has the
// signature of http.Transport.DialContext.
func (p *Policy) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	name := ""
	if !isIPLiteral(host) {
		name = normalHost(host)
		pn, _ := netip.ParseAddrPort(net.JoinHostPort("0.0.0.0", port))
		if de := p.checkName(name, pn.Port()); de != nil {
			return nil, &net.OpError{Op: "dial", Net: network, Err: de}
		}
	}
	d := p.dialer
	d.ControlContext = func(_ context.Context, _, resolved string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(resolved)
		if err != nil {
			return fmt.Errorf("egress: cannot parse the address %q being dialled: %w", resolved, err)
		}
		if de := p.check(name, netip.AddrPortFrom(ap.Addr().WithZone(""), ap.Port())); de != nil {
			return de
		}
		return nil
	}
	return d.DialContext(ctx, network, address)
}

// checkName applies the rules that judge a host name alone: egrid's own public host names
// and the Deny host patterns.
func (p *Policy) checkName(host string, port uint16) *DeniedError {
	self := p.self.Load()
	hp := fmt.Sprintf("%s:%d", host, port)
	for _, h := range self.hosts {
		if h == hp {
			return &DeniedError{Host: host, Port: port, Rule: fmt.Sprintf("egrid's own address %s is always denied (a webhook must not reach egrid's own API)", hp)}
		}
	}
	for _, r := range p.deny {
		if r.matchesName(host) {
			return &DeniedError{Host: host, Port: port, Rule: p.path + ".deny: " + r.text}
		}
	}
	return nil
}

// check decides on one address; host is the name it was resolved from ("" for an IP literal).
func (p *Policy) check(host string, ap netip.AddrPort) *DeniedError {
	ip := canonical(ap.Addr())
	port := ap.Port()
	deny := func(rule string) *DeniedError {
		return &DeniedError{Host: host, Addr: netip.AddrPortFrom(ap.Addr(), port), Port: port, Rule: rule}
	}
	self := p.self.Load()
	for _, s := range self.addrs {
		if s.Port() == port && (s.Addr() == ip || s.Addr().IsUnspecified()) {
			return deny(fmt.Sprintf("egrid's own address %s is always denied (a webhook must not reach egrid's own API)", s))
		}
	}
	for _, sp := range self.ports {
		if sp == port && (ip.IsLoopback() || ip.IsUnspecified() || self.local[ip]) {
			return deny(fmt.Sprintf("egrid's own address %s is always denied (egrid listens on every address at port %d; a webhook must not reach egrid's own API)", netip.AddrPortFrom(ip, port), port))
		}
	}
	if host != "" {
		if de := p.checkName(host, port); de != nil {
			de.Addr = netip.AddrPortFrom(ap.Addr(), port)
			return de
		}
	}
	// A Deny CIDR matches the IPv4 address an address carries or the address as written, so
	// that "2002::/16" or "64:ff9b::/96" still denies what canonical maps to IPv4.
	written := ap.Addr().WithZone("").Unmap()
	for _, r := range p.deny {
		if r.matchesAddr(ip) || r.matchesAddr(written) {
			return deny(p.path + ".deny: " + r.text)
		}
	}
	for _, r := range p.allow {
		if r.matchesAddr(ip) || host != "" && r.matchesName(host) {
			return nil
		}
	}
	if b, ok := builtin(ip, p.denyLoopback); ok {
		if b.allowable == "" {
			return deny(b.why)
		}
		return deny(fmt.Sprintf("%s; allow with %s.allow: [%s]", b.why, p.path, b.allowable))
	}
	return nil
}

// builtinRule is a built-in denial: why, and the Allow entry that lifts it ("" when none
// sensibly can).
type builtinRule struct{ why, allowable string }

var (
	private4 = []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("172.16.0.0/12"),
		netip.MustParsePrefix("192.168.0.0/16"),
		netip.MustParsePrefix("100.64.0.0/10"), // shared address space (RFC 6598): carrier NAT, overlay networks
	}
	uniqueLocal   = netip.MustParsePrefix("fc00::/7")
	siteLocal     = netip.MustParsePrefix("fec0::/10") // deprecated, still private
	thisNetwork   = netip.MustParsePrefix("0.0.0.0/8")
	broadcast     = netip.MustParseAddr("255.255.255.255")
	loopback4     = netip.MustParsePrefix("127.0.0.0/8")
	nat64         = netip.MustParsePrefix("64:ff9b::/96")   // well-known NAT64 prefix (RFC 6052)
	nat64Local    = netip.MustParsePrefix("64:ff9b:1::/48") // local-use NAT64 prefix (RFC 8215)
	nat64Local96  = netip.MustParsePrefix("64:ff9b:1::/96")
	v4Compatible  = netip.MustParsePrefix("::/96")
	sixToFour     = netip.MustParsePrefix("2002::/16")
	teredo        = netip.MustParsePrefix("2001::/32")
	v6Unspecified = netip.IPv6Unspecified()
	v6Loopback    = netip.IPv6Loopback()
	linkLocalWhy  = "link-local addresses (169.254.0.0/16, fe80::/10: cloud metadata services, neighbours) are denied"
)

// builtin returns the built-in rule that denies ip (already canonical), if any.
func builtin(ip netip.Addr, denyLoopback bool) (builtinRule, bool) {
	switch {
	case ip.IsUnspecified() || thisNetwork.Contains(ip):
		return builtinRule{why: "unspecified addresses (0.0.0.0/8, ::) reach this machine and are denied; use the endpoint's real address"}, true
	case ip.IsLinkLocalUnicast():
		return builtinRule{why: linkLocalWhy, allowable: netip.PrefixFrom(ip, ip.BitLen()).String()}, true
	case ip.IsMulticast() || ip == broadcast:
		return builtinRule{why: "multicast and broadcast addresses are denied"}, true
	case ip.IsLoopback():
		if !denyLoopback {
			return builtinRule{}, false
		}
		allow := "::1/128"
		if ip.Is4() {
			allow = loopback4.String()
		}
		return builtinRule{why: "loopback is denied", allowable: allow}, true
	case uniqueLocal.Contains(ip):
		return builtinRule{why: "unique-local addresses are denied", allowable: uniqueLocal.String()}, true
	case siteLocal.Contains(ip):
		return builtinRule{why: "site-local addresses are denied", allowable: siteLocal.String()}, true
	case nat64Local.Contains(ip): // outside 64:ff9b:1::/96, which canonical has mapped
		return builtinRule{why: "local-use NAT64 addresses (64:ff9b:1::/48) outside 64:ff9b:1::/96 are denied: where they carry the IPv4 address depends on the translator's prefix length", allowable: nat64Local.String()}, true
	case teredo.Contains(ip):
		return builtinRule{why: "Teredo addresses (2001::/32) tunnel to IPv4 addresses egrid does not judge and are denied", allowable: teredo.String()}, true
	}
	for _, pr := range private4 {
		if pr.Contains(ip) {
			return builtinRule{why: "private ranges are denied", allowable: pr.String()}, true
		}
	}
	return builtinRule{}, false
}

// canonical drops the zone and returns, for an IPv6 address that carries an IPv4 address a
// host, tunnel or translator would connect to instead, that IPv4 address, so that both checks
// (create time and connect time) judge such an address as the IPv4 address it reaches:
//
//   - IPv4-mapped, ::ffff:0:0/96 (::ffff:10.0.0.1): the last 32 bits.
//   - IPv4-compatible (deprecated, RFC 4291 §2.5.5.1), ::/96 except :: and ::1, which keep
//     their IPv6 meaning (::127.0.0.1): the last 32 bits.
//   - NAT64 well-known prefix, 64:ff9b::/96 (RFC 6052): the last 32 bits.
//   - NAT64 local-use prefix 64:ff9b:1::/48 (RFC 8215), only its /96 sub-prefix
//     64:ff9b:1::/96: the last 32 bits. Where the other addresses of the /48 carry the IPv4
//     address depends on the translator's prefix length (RFC 6052 §2.2: for a /48 it is split
//     around the u octet), which egrid cannot know; [builtin] denies them unless allowed. Read
//     with any shorter prefix length, an address of 64:ff9b:1::/96 carries an address in
//     0.0.0.0/8, which is no valid destination (RFC 1122).
//   - 6to4, 2002::/16 (RFC 3056): bits 16 to 47, the IPv4 address of the 6to4 router the
//     packet is encapsulated to.
//
// Teredo (2001::/32) carries two IPv4 addresses (the server's and the obfuscated client's);
// it is not mapped, and [builtin] denies it unless allowed.
func canonical(ip netip.Addr) netip.Addr {
	ip = ip.WithZone("").Unmap()
	if !ip.Is6() {
		return ip
	}
	b := ip.As16()
	switch {
	case nat64.Contains(ip), nat64Local96.Contains(ip),
		v4Compatible.Contains(ip) && ip != v6Unspecified && ip != v6Loopback:
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	case sixToFour.Contains(ip):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})
	}
	return ip
}

func isIPLiteral(host string) bool {
	_, err := netip.ParseAddr(host)
	return err == nil
}

// normalHost lower-cases a host name and drops a trailing dot.
func normalHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// rule is one Allow or Deny entry.
type rule struct {
	text   string       // as configured, for messages
	prefix netip.Prefix // a CIDR or a single address; invalid for a host pattern
	name   string       // an exact host name, or the suffix ".example.com" of "*.example.com"
	wild   bool
}

func parseRule(s string) (rule, error) {
	r := rule{text: s}
	t := strings.TrimSpace(s)
	if strings.Contains(t, "/") {
		pr, err := netip.ParsePrefix(t)
		if err != nil {
			return r, errors.New("is not a valid CIDR; use e.g. 10.0.0.0/8 or fd00::/8")
		}
		if a := pr.Addr(); a.Is4In6() && pr.Bits() >= 96 {
			pr = netip.PrefixFrom(a.Unmap(), pr.Bits()-96)
		}
		r.prefix = pr.Masked()
		return r, nil
	}
	if ip, err := netip.ParseAddr(t); err == nil {
		ip = canonical(ip)
		r.prefix = netip.PrefixFrom(ip, ip.BitLen())
		return r, nil
	}
	name := normalHost(t)
	if strings.HasPrefix(name, "*.") {
		r.wild, name = true, name[1:]
	}
	check := strings.TrimPrefix(name, ".")
	if check == "" || strings.Contains(check, "..") || strings.HasPrefix(check, "-") {
		return r, errors.New("is not a CIDR, an IP address or a host pattern; use e.g. 10.0.0.0/8, 192.168.1.10, hooks.internal or *.svc.cluster.local")
	}
	for _, c := range check {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return r, errors.New("is not a CIDR, an IP address or a host pattern (a name, optionally starting with *.); use e.g. 10.0.0.0/8, 192.168.1.10, hooks.internal or *.svc.cluster.local")
		}
	}
	r.name = name
	return r, nil
}

func (r rule) matchesAddr(ip netip.Addr) bool { return r.prefix.IsValid() && r.prefix.Contains(ip) }

func (r rule) matchesName(host string) bool {
	switch {
	case r.name == "":
		return false
	case r.wild:
		return strings.HasSuffix(host, r.name)
	}
	return host == r.name
}
