package webhook_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/webhook"
)

// dialErr wraps err the way a failed dial reports it.
func dialErr(err error) error {
	return &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9}, Err: err}
}

// TestClassify checks what the webhook sink adds to [sinks.Classify] (net/http's untyped
// errors) and, with a few rows, that it hands everything else to it; the shared cases are in
// the sinks package's table.
func TestClassify(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		parent error // the caller's ctx.Err()
		want   schemas.Outcome
	}{
		{name: "caller cancelled wins over the error it caused", err: dialErr(&os.SyscallError{Syscall: "connect", Err: syscall.ECONNRESET}), parent: context.Canceled, want: schemas.Canceled},
		{name: "DNS timeout is still a resolution error", err: dialErr(&net.DNSError{Err: "i/o timeout", Name: "x.example", IsTimeout: true}), want: schemas.ResolutionError},
		{name: "connection refused", err: dialErr(&os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}), want: schemas.SocketError},
		{name: "closed by server before answering", err: errors.New("http: server closed idle connection"), want: schemas.SocketError},
		{name: "plain HTTP behind https", err: errors.New("http: server gave HTTP response to HTTPS client"), want: schemas.SocketError},
		{name: "TLS name mismatch", err: &tls.CertificateVerificationError{Err: x509.HostnameError{Host: "wrong.example"}}, want: schemas.InvalidDestination},
		{name: "no host", err: errors.New("http: no Host in request URL"), want: schemas.InvalidDestination},
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
