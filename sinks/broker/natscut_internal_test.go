package broker

import (
	"net"
	"testing"
)

// An attempt can end before its publish's write begins (on a busy machine, or behind a
// reconnection): the write that begins after it is cut all the same, so it does not sit in
// nats.go's 1-minute write timeout. The cut looked only for a write in progress as the attempt
// ended, and let a later one hang.
func TestNATSWriteBegunAfterTheAttemptEndedIsCut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() { // takes the connection and reads nothing from it
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	d := &natsDialer{}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	server := <-accepted
	defer server.Close()

	returned := make(chan struct{})
	cutDone := make(chan struct{})
	go func() { defer close(cutDone); d.cutStuckWrite(returned) }() // the attempt has ended
	// Far more than the sockets buffer: without the cut the write waits for good (no deadline).
	if _, err := c.Write(make([]byte, 64<<20)); err == nil {
		t.Fatal("the write begun after the attempt ended went through a server that reads nothing; want it cut")
	}
	close(returned)
	<-cutDone
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.wrote) != 0 {
		t.Errorf("%d cut waiters left behind, want none", len(d.wrote))
	}
}
