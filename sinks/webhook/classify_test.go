package webhook_test

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
	"github.com/egridio/egrid/sinks/webhook"
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

func TestClassify(t *testing.T) {
	attemptTimeout := fmt.Errorf("no response within the attempt timeout: %w", context.DeadlineExceeded)
	tests := []struct {
		name   string
		err    error
		parent error // the caller's ctx.Err()
		want   schemas.Outcome
	}{
		{name: "caller cancelled", err: context.Canceled, parent: context.Canceled, want: schemas.Canceled},
		{name: "caller cancelled wins over the error it caused", err: dialErr(&os.SyscallError{Syscall: "connect", Err: syscall.ECONNRESET}), parent: context.Canceled, want: schemas.Canceled},
		{name: "caller's deadline", err: context.DeadlineExceeded, parent: context.DeadlineExceeded, want: schemas.TimedOut},
		{name: "attempt timeout", err: attemptTimeout, want: schemas.TimedOut},
		{name: "read deadline", err: fmt.Errorf("reading: %w", os.ErrDeadlineExceeded), want: schemas.TimedOut},
		{name: "dial timeout", err: dialErr(netTimeout{}), want: schemas.TimedOut},
		{name: "TLS handshake timeout", err: netTimeout{}, want: schemas.TimedOut},
		{name: "context cancelled without the caller", err: context.Canceled, want: schemas.Canceled},
		{name: "DNS not found", err: dialErr(&net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}), want: schemas.ResolutionError},
		{name: "DNS timeout is still a resolution error", err: dialErr(&net.DNSError{Err: "i/o timeout", Name: "x.example", IsTimeout: true}), want: schemas.ResolutionError},
		{name: "connection refused", err: dialErr(&os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}), want: schemas.SocketError},
		{name: "connection reset", err: &net.OpError{Op: "read", Net: "tcp", Err: &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}}, want: schemas.SocketError},
		{name: "broken pipe", err: fmt.Errorf("write: %w", syscall.EPIPE), want: schemas.SocketError},
		{name: "host unreachable", err: dialErr(&os.SyscallError{Syscall: "connect", Err: syscall.EHOSTUNREACH}), want: schemas.SocketError},
		{name: "EOF", err: io.EOF, want: schemas.SocketError},
		{name: "unexpected EOF", err: fmt.Errorf("net/http: HTTP/1.x transport connection broken: %w", io.ErrUnexpectedEOF), want: schemas.SocketError},
		{name: "closed by server before answering", err: errors.New("http: server closed idle connection"), want: schemas.SocketError},
		{name: "other net error", err: &net.OpError{Op: "write", Net: "tcp", Err: errors.New("something odd")}, want: schemas.SocketError},
		{name: "unknown certificate authority", err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, want: schemas.SocketError},
		{name: "expired certificate", err: &tls.CertificateVerificationError{Err: x509.CertificateInvalidError{Reason: x509.Expired}}, want: schemas.SocketError},
		{name: "TLS alert", err: &net.OpError{Op: "remote error", Err: tls.AlertError(40)}, want: schemas.SocketError},
		{name: "not TLS", err: tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, want: schemas.SocketError},
		{name: "plain HTTP behind https", err: errors.New("http: server gave HTTP response to HTTPS client"), want: schemas.SocketError},
		{name: "TLS name mismatch", err: &tls.CertificateVerificationError{Err: x509.HostnameError{Host: "wrong.example"}}, want: schemas.InvalidDestination},
		{name: "invalid port", err: dialErr(&net.AddrError{Err: "invalid port", Addr: "70000"}), want: schemas.InvalidDestination},
		{name: "invalid address", err: dialErr(net.InvalidAddrError("bad")), want: schemas.InvalidDestination},
		{name: "unknown network", err: dialErr(net.UnknownNetworkError("tcp9")), want: schemas.InvalidDestination},
		{name: "unsupported scheme", err: errors.New(`unsupported protocol scheme "ftp"`), want: schemas.InvalidDestination},
		{name: "egress policy denial at dial", err: dialErr(fmt.Errorf("endpoint denied: %w", sinks.ErrDestinationDenied)), want: schemas.InvalidDestination},
		{name: "egress policy denial as the dial error itself", err: &net.OpError{Op: "dial", Err: sinks.ErrDestinationDenied}, want: schemas.InvalidDestination},
		{name: "anything else", err: errors.New("net/http: invalid header field value"), want: schemas.GenericError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := webhook.Classify(tt.err, tt.parent); got != tt.want {
				t.Fatalf("Classify(%v, %v) = %v; want %v", tt.err, tt.parent, got, tt.want)
			}
		})
	}
}
