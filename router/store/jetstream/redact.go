package jetstream

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// RedactURLs returns urls — one NATS server URL, or several separated by commas as
// nats.Connect takes them — without their user information (user:password@ or token@), so
// they can be logged and put in error messages: `nats://egrid:secret@n1:4222` becomes
// `nats://n1:4222`. Everything between the scheme and a URL's last '@' goes (a NATS URL has no
// path that could hold one), whether or not the URL parses: a password with an unescaped '/',
// '#' or '@' is not printed either, nor the user information of a URL without a scheme
// (user:password@host:4222).
func RedactURLs(urls string) string {
	parts := strings.Split(urls, ",")
	for i, u := range parts {
		scheme, rest, ok := strings.Cut(u, "://")
		if !ok {
			scheme, rest = "", u
		}
		at := strings.LastIndex(rest, "@")
		if at < 0 {
			continue
		}
		if parts[i] = rest[at+1:]; ok {
			parts[i] = scheme + "://" + parts[i]
		}
	}
	return strings.Join(parts, ",")
}

// RedactError returns err as nats.Connect gave it, unless a server URL did not parse: the
// *url.Error then holds the URL as given, credentials included, and the parser's detail can
// quote part of a password (`invalid port ":pa" after host`), so it is replaced by an error
// naming the URL as [RedactURLs] prints it.
func RedactError(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	return fmt.Errorf("%s is not a valid URL: use nats://host:4222, with any of : / ? # @ %% in the user name or password percent-encoded", RedactURLs(ue.URL))
}
