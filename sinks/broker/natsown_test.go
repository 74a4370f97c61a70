package broker_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks/broker"
	"github.com/egridio/egrid/testkit/sinktest"
)

// Each NATS sink publishes on a connection of its own, dialled once and kept between
// deliveries: a write stuck on a server that stopped reading is cut by closing its connection,
// and on the connection every NATS sink of the router shared that cut failed the others'
// publishes in flight, which also waited behind the stuck write until then.
func TestNATSSinksEachHaveTheirOwnConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{}, 64)
	halt := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(halt); _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			wg.Add(1)
			go func() { // INFO, PONG to the first PING, then read and answer nothing
				defer wg.Done()
				defer c.Close()
				_, _ = io.WriteString(c, `INFO {"server_id":"fake","version":"2.10.0","proto":1,"headers":true,"max_payload":1048576}`+"\r\n")
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if strings.HasPrefix(line, "PING") {
						break
					}
				}
				_, _ = io.WriteString(c, "PONG\r\n")
				go func() { <-halt; _ = c.Close() }()
				_, _ = io.Copy(io.Discard, r)
			}()
		}
	}()
	b := open(t, broker.Servers{NATS: &broker.NATSServer{URL: "nats://" + ln.Addr().String()}})
	pub, _ := b.Publisher(broker.NATSJetStream)
	deliver := func(s *broker.Sink) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		// The server never acknowledges: the attempt ends at its deadline, after the dial.
		_ = s.Deliver(ctx, sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, sinktest.EventGridEvents(t, "own", 1)))
	}
	for _, topic := range []string{"a.created", "b.created"} {
		s, err := broker.New(pub, broker.Config{Topic: topic})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		deliver(s)
		deliver(s) // on the same connection
	}
	if n := len(accepted); n != 2 {
		t.Errorf("two NATS sinks, two deliveries each, dialled %d connections; want 2, one per sink", n)
	}
}
