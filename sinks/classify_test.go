package sinks_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

// netTimeout is a net.Error that timed out, as dial and read deadlines report.
type netTimeout struct{}

func (netTimeout) Error() string   { return "i/o timeout" }
func (netTimeout) Timeout() bool   { return true }
func (netTimeout) Temporary() bool { return true }

// dialErr wraps err the way a failed dial reports it.
func dialErr(err error) error {
	return &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9}, Err: err}
}

// refusal is a sink's own failure, for the checks of own's place in the order.
type refusal struct{}

func (refusal) Error() string { return "refused by the sink's policy" }

// own recognises refusal, as a sink's own function does.
func own(err error) (schemas.Outcome, bool) {
	if errors.As(err, new(refusal)) {
		return schemas.Forbidden, true
	}
	return 0, false
}

// text is a sink's list of untyped errors.
var text = []sinks.ErrorText{
	{Text: "publisher closed", Outcome: schemas.SocketError},
	{Text: "no such queue", Outcome: schemas.NotFound},
}

func TestClassify(t *testing.T) {
	attemptTimeout := fmt.Errorf("no response within the attempt timeout: %w", context.DeadlineExceeded)
	refused := dialErr(&os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED})
	tests := []struct {
		name   string
		err    error
		parent error // the caller's ctx.Err()
		want   schemas.Outcome
	}{
		// 1. The caller's context.
		{name: "caller cancelled", err: context.Canceled, parent: context.Canceled, want: schemas.Canceled},
		{name: "caller cancelled wins over the error it caused", err: dialErr(&os.SyscallError{Syscall: "connect", Err: syscall.ECONNRESET}), parent: context.Canceled, want: schemas.Canceled},
		{name: "caller's deadline", err: context.DeadlineExceeded, parent: context.DeadlineExceeded, want: schemas.TimedOut},
		{name: "caller's deadline wins over the error it caused", err: refused, parent: context.DeadlineExceeded, want: schemas.TimedOut},
		{name: "caller wins over the sink's own", err: refusal{}, parent: context.Canceled, want: schemas.Canceled},

		// 2. The sink's own failures, before the network errors they arrive wrapped in.
		{name: "own", err: refusal{}, want: schemas.Forbidden},
		{name: "own wrapped in a dial error", err: dialErr(refusal{}), want: schemas.Forbidden},
		{name: "own does not know it", err: refused, want: schemas.SocketError},

		// 3. The network.
		{name: "attempt timeout", err: attemptTimeout, want: schemas.TimedOut},
		{name: "deadline in the chain", err: fmt.Errorf("publish: %w", context.DeadlineExceeded), want: schemas.TimedOut},
		{name: "read deadline", err: fmt.Errorf("reading: %w", os.ErrDeadlineExceeded), want: schemas.TimedOut},
		{name: "net read deadline", err: &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, want: schemas.TimedOut},
		{name: "dial timeout", err: dialErr(netTimeout{}), want: schemas.TimedOut},
		{name: "TLS handshake timeout", err: netTimeout{}, want: schemas.TimedOut},
		{name: "context cancelled without the caller", err: context.Canceled, want: schemas.Canceled},
		{name: "DNS not found", err: dialErr(&net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}), want: schemas.ResolutionError},
		{name: "DNS timeout is still a resolution error", err: dialErr(&net.DNSError{Err: "i/o timeout", Name: "x.example", IsTimeout: true}), want: schemas.ResolutionError},
		{name: "bare DNS timeout", err: &net.DNSError{Err: "i/o timeout", Name: "nats.invalid", IsTimeout: true}, want: schemas.ResolutionError},
		{name: "connection refused", err: refused, want: schemas.SocketError},
		{name: "connection reset", err: &net.OpError{Op: "read", Net: "tcp", Err: &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}}, want: schemas.SocketError},
		{name: "bare reset", err: fmt.Errorf("write: %w", syscall.ECONNRESET), want: schemas.SocketError},
		{name: "broken pipe", err: fmt.Errorf("write: %w", syscall.EPIPE), want: schemas.SocketError},
		{name: "host unreachable", err: dialErr(&os.SyscallError{Syscall: "connect", Err: syscall.EHOSTUNREACH}), want: schemas.SocketError},
		{name: "EOF", err: io.EOF, want: schemas.SocketError},
		{name: "wrapped EOF", err: fmt.Errorf("read: %w", io.EOF), want: schemas.SocketError},
		{name: "unexpected EOF", err: fmt.Errorf("net/http: HTTP/1.x transport connection broken: %w", io.ErrUnexpectedEOF), want: schemas.SocketError},
		{name: "closed connection", err: fmt.Errorf("write: %w", net.ErrClosed), want: schemas.SocketError},
		{name: "other net error", err: &net.OpError{Op: "write", Net: "tcp", Err: errors.New("something odd")}, want: schemas.SocketError},
		{name: "unknown certificate authority", err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, want: schemas.SocketError},
		{name: "expired certificate", err: &tls.CertificateVerificationError{Err: x509.CertificateInvalidError{Reason: x509.Expired}}, want: schemas.SocketError},
		{name: "TLS alert", err: &net.OpError{Op: "remote error", Err: tls.AlertError(40)}, want: schemas.SocketError},
		{name: "not TLS", err: tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, want: schemas.SocketError},
		{name: "TLS name mismatch", err: &tls.CertificateVerificationError{Err: x509.HostnameError{Host: "wrong.example"}}, want: schemas.InvalidDestination},
		{name: "invalid port", err: dialErr(&net.AddrError{Err: "invalid port", Addr: "70000"}), want: schemas.InvalidDestination},
		{name: "invalid address", err: dialErr(net.InvalidAddrError("bad")), want: schemas.InvalidDestination},
		{name: "unknown network", err: dialErr(net.UnknownNetworkError("tcp9")), want: schemas.InvalidDestination},

		// 4. Untyped errors, by their text, after the network.
		{name: "text", err: errors.New("watermill: publisher closed"), want: schemas.SocketError},
		{name: "second text", err: errors.New("no such queue: orders"), want: schemas.NotFound},
		{name: "network before text", err: fmt.Errorf("no such queue: %w", io.EOF), want: schemas.SocketError},

		// 5. Anything else.
		{name: "anything else", err: errors.New("net/http: invalid header field value"), want: schemas.GenericError},
		{name: "no error", err: nil, want: schemas.GenericError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sinks.Classify(tt.err, tt.parent, own, text); got != tt.want {
				t.Fatalf("Classify(%v, %v) = %v; want %v", tt.err, tt.parent, got, tt.want)
			}
		})
	}
}

// TestClassifyWithoutOwnOrText: a sink with nothing of its own gets the network's answers.
func TestClassifyWithoutOwnOrText(t *testing.T) {
	if got := sinks.Classify(errors.New("watermill: publisher closed"), nil, nil, nil); got != schemas.GenericError {
		t.Errorf("an untyped error with no text list = %v; want GenericError", got)
	}
	if got := sinks.Classify(io.EOF, nil, nil, nil); got != schemas.SocketError {
		t.Errorf("EOF = %v; want SocketError", got)
	}
}
