package webhook

import (
	"crypto/tls"
	"net/http"
)

// Classify exposes classify to the black-box table test.
var Classify = classify

// TrustTLS gives the net/http Transport of a client [NewClient] made the TLS configuration
// cfg, so a test can reach an httptest TLS server (which also serves HTTP/2) with it.
func TrustTLS(c *http.Client, cfg *tls.Config) {
	c.Transport.(*transport).TLSClientConfig = cfg
}
