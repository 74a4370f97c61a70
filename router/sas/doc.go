// Package sas implements Event Grid's publisher credentials (SPEC §1.1, eventgrid-behaviour.md
// §1.2): access-key comparison and shared access signature (SAS) tokens.
//
// The model: each topic has two keys (key1, key2), random bytes in standard base64
// ([NewKey]). A publisher proves it holds one either by sending the key itself (compared with
// [KeyMatches]) or by sending a SAS token signed with it ([Sign], checked by [Verify]). A
// token is
//
//	r=<enc resource>&e=<enc expiry>&s=<enc signature>
//
// where enc is form-style URL encoding and the signature is the base64 HMAC-SHA256 of the
// text "r=<enc resource>&e=<enc expiry>", keyed with the base64-decoded topic key — the
// algorithm of the official C# and Python samples and SDKs (the page's prose, plain SHA-256
// over resource and epoch, is wrong; eventgrid-behaviour.md §11 item 19).
//
// Verification computes the HMAC over the r and e fields exactly as they appear in the token,
// so every client's encoding works: lower- or upper-case hex, '+' or %20 for a space. The
// expiry is accepted in each form the official clients produce: ISO 8601 / RFC 3339 with a 'T'
// or a space, with or without fractional seconds and zone (Python's isoformat and str of a
// datetime; no zone means UTC), the en-US DateTime form "6/15/2017 6:20:15 PM" of the C#
// sample, with or without unpadded minutes and seconds (Java) and a trailing offset such as
// "+00:00" (.NET's DateTimeOffset), and Unix epoch seconds. A token is valid while now is
// before its expiry; there is no allowance for clock skew.
//
// The resource is an URL, compared by path only: the host is not compared, so a token signed
// for the URL a publisher uses keeps working behind a proxy or port mapping that changes the
// host (which also means a token for one egrid server works on another that shares the key).
// Its query string (the SDKs append ?api-version=...) is ignored, and a resource without a
// scheme ("host/topics/orders") is read as host and path. The path is a prefix,
// matched case-insensitively at a segment boundary: "/topics/orders" covers
// "/topics/orders/api/events" and "/topics/orders:publish" but not "/topics/orders2"; an
// empty path or "/" covers every topic.
//
// sas is pure: it imports no other egrid package, does no I/O, and never reads the clock —
// [Verify] takes now. [NewKey] is the only function that reads crypto/rand.
package sas
