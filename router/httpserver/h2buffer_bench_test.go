package httpserver_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/egridio/egrid/router/httpserver"
)

// BenchmarkHTTP2Upload measures 1 MB publish bodies sent over HTTP/2 (TLS, loopback) to a
// server as [httpserver.New] makes it, with its connection receive buffer (the connection's
// flow-control window) at [httpserver.MaxReceiveBuffer] or at net/http's 1 MiB,
// one request at a time and eight at once on the one connection.
func BenchmarkHTTP2Upload(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 1<<20)
	for _, buf := range []int{1 << 20, httpserver.MaxReceiveBuffer} {
		for _, streams := range []int{1, 8} {
			b.Run(fmt.Sprintf("buffer=%dKiB/streams=%d", buf>>10, streams), func(b *testing.B) {
				srv := httpserver.New(httpserver.Config{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.Copy(io.Discard, r.Body)
				}), httpserver.Requests{}, nil)
				srv.HTTP2.MaxReceiveBufferPerConnection = buf
				ts := httptest.NewUnstartedServer(srv.Handler)
				ts.Config = srv
				ts.EnableHTTP2 = true
				ts.StartTLS()
				defer ts.Close()
				client := ts.Client()
				post := func() {
					resp, err := client.Post(ts.URL+"/topics/t/events", "application/json", bytes.NewReader(body))
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					if resp.ProtoMajor != 2 {
						b.Errorf("served over %s", resp.Proto)
					}
				}
				post() // the connection and its TLS handshake
				b.SetBytes(int64(len(body)))
				b.ResetTimer()
				sem := make(chan struct{}, streams)
				done := make(chan struct{}, b.N)
				for range b.N {
					sem <- struct{}{}
					go func() {
						post()
						<-sem
						done <- struct{}{}
					}()
				}
				for range b.N {
					<-done
				}
			})
		}
	}
}
