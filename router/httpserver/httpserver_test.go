package httpserver_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egridio/egrid/router/httpserver"
	"github.com/egridio/egrid/testkit"
)

func TestLimitBodiesWaitsThenAnswers429(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		entered := make(chan string, 4)
		h := httpserver.LimitBodies(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			entered <- r.URL.Path
			if r.URL.Path == "/topics/hold" {
				<-release
			}
		}), 1, 2*time.Second, func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/topics/") })

		serve := func(path string) *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader("[]")))
			return rec
		}
		held := make(chan *httptest.ResponseRecorder, 1)
		go func() { held <- serve("/topics/hold") }()
		synctest.Wait()
		if got := <-entered; got != "/topics/hold" {
			t.Fatalf("first request entered %s", got)
		}

		// Unselected requests are not limited.
		if rec := serve("/admin/topics"); rec.Code != http.StatusOK {
			t.Fatalf("an admin request while the slot is held: %d", rec.Code)
		}
		<-entered

		// A selected one waits the whole wait, then gets 429 with Retry-After.
		shed := make(chan *httptest.ResponseRecorder, 1)
		go func() { shed <- serve("/topics/x") }()
		testkit.Advance(2*time.Second - time.Nanosecond)
		select {
		case rec := <-shed:
			t.Fatalf("answered %d before its wait was over", rec.Code)
		default:
		}
		testkit.Advance(time.Nanosecond)
		rec := <-shed
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" || rec.Header().Get("Connection") != "close" ||
			!strings.Contains(rec.Body.String(), `"code":"TooManyRequests"`) {
			t.Fatalf("shed request: %d %v %s", rec.Code, rec.Header(), rec.Body)
		}

		// One that waits while the slot is freed gets it.
		waiter := make(chan *httptest.ResponseRecorder, 1)
		go func() { waiter <- serve("/topics/y") }()
		testkit.Advance(time.Second)
		close(release)
		if rec := <-held; rec.Code != http.StatusOK {
			t.Fatalf("held request: %d", rec.Code)
		}
		if rec := <-waiter; rec.Code != http.StatusOK {
			t.Fatalf("a request that waited for the freed slot: %d %s", rec.Code, rec.Body)
		}
	})
}

func TestLimitListenerHoldsAcceptsAtTheLimit(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := httpserver.LimitListener(inner, 1, nil)
	defer ln.Close()
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	dial()
	first := <-accepted
	dial()
	// The second connection is accepted once the first is closed (that it is not accepted
	// before is checked against the binary by TestConnectionLimit in cmd/egrid).
	first.Close()
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(time.Minute):
		t.Fatal("the second connection was not accepted within a minute of the first closing")
	}
	ln.Close()
	select {
	case _, ok := <-accepted:
		if ok {
			t.Fatal("accepted a connection after Close")
		}
	case <-time.After(time.Minute):
		t.Fatal("Accept did not return within a minute of Close")
	}
}
