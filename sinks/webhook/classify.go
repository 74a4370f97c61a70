package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

// classify names the outcome of an attempt that got no HTTP response (SPEC §2.1). err is the
// client's error; parent is the caller's ctx.Err() when the attempt ended, nil while the
// caller's ctx is live. The order of the cases matters: a cancelled caller wins over
// whatever the cancellation caused; an address the egress policy denies is InvalidDestination
// (it can never be reached while the policy stands); a certificate for another name is a destination that can
// never work, not a passing TLS failure; a failed lookup is ResolutionError even when the
// lookup timed out.
func classify(err, parent error) schemas.Outcome {
	if parent != nil {
		if errors.Is(parent, context.DeadlineExceeded) {
			return schemas.TimedOut
		}
		return schemas.Canceled
	}
	var (
		hostnameErr x509.HostnameError
		dnsErr      *net.DNSError
		addrErr     *net.AddrError
		invalidAddr net.InvalidAddrError
		unknownNet  net.UnknownNetworkError
		timeoutErr  interface{ Timeout() bool }
		verifyErr   *tls.CertificateVerificationError
		authority   x509.UnknownAuthorityError
		certInvalid x509.CertificateInvalidError
		recordErr   tls.RecordHeaderError
		alertErr    tls.AlertError
		echErr      *tls.ECHRejectionError
		opErr       *net.OpError
	)
	switch {
	case errors.Is(err, sinks.ErrDestinationDenied): // the egress policy refused the address
		return schemas.InvalidDestination
	case errors.As(err, &hostnameErr):
		return schemas.InvalidDestination
	case errors.As(err, &dnsErr):
		return schemas.ResolutionError
	case errors.As(err, &addrErr), errors.As(err, &invalidAddr), errors.As(err, &unknownNet):
		return schemas.InvalidDestination
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &timeoutErr) && timeoutErr.Timeout():
		return schemas.TimedOut
	case errors.Is(err, context.Canceled):
		return schemas.Canceled
	case errors.As(err, &verifyErr), errors.As(err, &authority), errors.As(err, &certInvalid),
		errors.As(err, &recordErr), errors.As(err, &alertErr), errors.As(err, &echErr):
		return schemas.SocketError
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.As(err, &opErr):
		return schemas.SocketError
	}
	msg := err.Error()
	for _, m := range untypedErrors {
		if strings.Contains(msg, m.text) {
			return m.outcome
		}
	}
	return schemas.GenericError
}

// untypedErrors are net/http failures that are returned as unexported, untyped errors, so
// their text is all there is to recognise them by.
var untypedErrors = []struct {
	text    string
	outcome schemas.Outcome
}{
	// The connection was closed before a response arrived (a fresh one, or one from the pool).
	{"http: server closed idle connection", schemas.SocketError},
	// A plain-HTTP server behind an https URL: the TLS handshake cannot succeed.
	{"http: server gave HTTP response to HTTPS client", schemas.SocketError},
	// URLs no request can be sent to ([New] refuses them; a client's own transport may not).
	{"unsupported protocol scheme", schemas.InvalidDestination},
	{"http: no Host in request URL", schemas.InvalidDestination},
}
