// Package egress is the egress policy of webhook destinations: which addresses egrid may
// connect to when it delivers events or runs a validation handshake (SPEC §9).
//
// The model: a [Policy] is built once from a [Config] (data: allowed and denied CIDRs and host
// patterns) and answers one question, "may egrid connect to this host at this address and
// port?", with nil or a *[DeniedError] that names the rule that said no. It is asked twice:
//
//   - at create and update time, by [Policy.CheckURL], before any connection is made: an IP
//     literal is checked as it is, a host name against the host patterns and then every
//     address it resolves to. A denied endpoint is refused before any packet leaves, so the
//     endpoint field cannot be used to tell refused ports from filtered ones.
//   - at every connection, by [Policy.DialContext], on the address the dialer is about to
//     connect to, after DNS resolution (in the dialer's ControlContext). A name that resolved
//     to an allowed address at create time and to a denied one later (DNS rebinding) is
//     refused then.
//
// The decision, in order:
//
//  1. egrid's own addresses ([Policy.DenySelf]: the listen address, its public URL) are always
//     denied: a webhook must not be able to call egrid's admin API.
//  2. Config.Deny: a matching CIDR or host pattern denies.
//  3. Config.Allow: a matching CIDR or host pattern allows. A host pattern allows whatever the
//     name resolves to (the operator trusts that name's DNS); step 1 and 2 still apply.
//  4. Built-in ranges: unspecified (0.0.0.0, ::), link-local (169.254.0.0/16, which holds the
//     cloud metadata service, and fe80::/10), multicast and broadcast are denied; private
//     ranges (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10) and unique-local
//     addresses (fc00::/7) are denied unless allowed in step 3; loopback (127.0.0.0/8, ::1) is
//     denied only with Config.DenyLoopback.
//  5. Anything else (public addresses) is allowed.
//
// IPv6 addresses that carry an IPv4 address a tunnel or translator connects to are judged by
// that IPv4 address: IPv4-mapped (::ffff:10.0.0.1), IPv4-compatible (::10.0.0.1, not :: or
// ::1), NAT64 in the well-known prefix (64:ff9b::/96) and in the /96 at the start of the
// local-use prefix (64:ff9b:1::/96), and 6to4 (2002::/16). Where the rest of the local-use
// prefix 64:ff9b:1::/48 carries the IPv4 address depends on the translator's prefix length,
// and Teredo (2001::/32) carries two, so both are denied unless Config.Allow names them. A
// Deny CIDR matches an address as written as well as the IPv4 address it carries.
//
// Decisions where Event Grid is silent (Azure cannot reach private networks at all):
//   - Loopback is allowed by the zero Config, so a Go program that embeds the router and its
//     tests can deliver to http://127.0.0.1 servers; `egrid serve` sets DenyLoopback unless it
//     runs with --insecure-dev or server.egress.allow names a loopback range.
//   - Through an HTTP proxy (HTTPS_PROXY), egrid connects to the proxy: the connection check
//     applies to the proxy's address, and the destination's resolved address is the proxy's
//     to police. The URL's own host is still checked at create time.
//
// A denial wraps [sinks.ErrDestinationDenied], which a sink classifies as InvalidDestination.
//
// egress imports only sinks from egrid.
package egress
