package sinks

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
)

// ErrorText recognises an untyped error by a substring of its text: some libraries return
// their failures as unexported or plain errors, so their text is all there is to go by.
type ErrorText struct {
	// Text is the substring to look for.
	Text string
	// Outcome is the outcome of an error whose text contains Text.
	Outcome schemas.Outcome
}

// Classify names the outcome of an attempt that failed without an answer the sink could read
// a status from (SPEC §2.1's vocabulary, so the retry policy and probation treat every sink
// alike). err is the sink's error; parent is the caller's ctx.Err() when the attempt ended,
// nil while the caller's ctx is live. Every sink calls it; a sink adds what only it knows
// through own and text.
//
// The order of the checks matters, and is:
//
//  1. the caller's context: a cancelled or expired caller wins over whatever it caused
//     (Canceled, TimedOut);
//  2. own, when not nil: the sink's own failures — broker answers, a refusal of the sink's
//     policy — read before the network errors they may arrive wrapped in; own reports false
//     for an error it does not know;
//  3. the network under every sink: a certificate for another name is a destination that can
//     never work (InvalidDestination), not a passing TLS failure; a failed lookup is
//     ResolutionError even when the lookup timed out; malformed addresses are
//     InvalidDestination; deadlines and timeouts are TimedOut; a cancellation is Canceled;
//     other TLS failures and broken connections are SocketError;
//  4. text, the sink's untyped errors, in order;
//  5. GenericError for anything else, and for a nil err.
//
// To recognise a new kind of failure, add a case to step 3 when every sink can meet it
// (and a row to its table test), or to the sink's own or text when only that sink can.
func Classify(err, parent error, own func(error) (schemas.Outcome, bool), text []ErrorText) schemas.Outcome {
	if parent != nil {
		if errors.Is(parent, context.DeadlineExceeded) {
			return schemas.TimedOut
		}
		return schemas.Canceled
	}
	if err == nil {
		return schemas.GenericError
	}
	if own != nil {
		if o, ok := own(err); ok {
			return o
		}
	}
	if o, ok := networkOutcome(err); ok {
		return o
	}
	msg := err.Error()
	for _, m := range text {
		if strings.Contains(msg, m.Text) {
			return m.Outcome
		}
	}
	return schemas.GenericError
}

// networkOutcome is step 3 of [Classify]: the failures of name resolution, addressing, TLS and
// the socket, which every sink meets the same way.
func networkOutcome(err error) (schemas.Outcome, bool) {
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
	case errors.As(err, &hostnameErr):
		return schemas.InvalidDestination, true
	case errors.As(err, &dnsErr):
		return schemas.ResolutionError, true
	case errors.As(err, &addrErr), errors.As(err, &invalidAddr), errors.As(err, &unknownNet):
		return schemas.InvalidDestination, true
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &timeoutErr) && timeoutErr.Timeout():
		return schemas.TimedOut, true
	case errors.Is(err, context.Canceled):
		return schemas.Canceled, true
	case errors.As(err, &verifyErr), errors.As(err, &authority), errors.As(err, &certInvalid),
		errors.As(err, &recordErr), errors.As(err, &alertErr), errors.As(err, &echErr):
		return schemas.SocketError, true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.As(err, &opErr):
		return schemas.SocketError, true
	}
	return 0, false
}
