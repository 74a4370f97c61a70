package broker_test

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// fakeAMQP is an AMQP 0-9-1 server of the least RabbitMQ behaviour the RabbitMQ publisher and
// subscriber need, over in-process pipes (so tests run it in a synctest bubble): it completes
// the handshake, sends heartbeats every 5 s, answers channel.open, queue.declare,
// confirm.select, basic.qos, basic.consume, channel.close and connection.close, and confirms
// each published message. It leaves the method named ignore unanswered (a "basic.publish" is
// never confirmed), as a broker that keeps the connection and stops answering does. A
// message body over maxBody bytes (when > 0) closes its channel with 406
// PRECONDITION_FAILED, in RabbitMQ's words for a message over its max_message_size. A consumer
// (basic.consume) is delivered the bodies of deliver, one basic.deliver each; once it has them,
// with stallAfterDeliver set, the fake stops reading the connection (keeping it, and sending
// heartbeats), as a broker that stops taking what the client writes does, until stop.
type fakeAMQP struct {
	ignore            string
	maxBody           int
	deliver           []string
	stallAfterDeliver bool
	noHeartbeats      bool          // asks for no heartbeats at tune, and sends none
	halt              chan struct{} // closed by stop; made by dial
	passive404        bool          // a passive queue.declare closes its channel with 404 NOT_FOUND
	ignoreReopen      bool          // every channel.open after the first goes unanswered
	opens             int

	mu        sync.Mutex
	conns     []net.Conn
	published [][]byte // the bodies taken, in order
	wg        sync.WaitGroup
}

// dial is an amqp091 Config.Dial that connects to the fake.
func (f *fakeAMQP) dial(string, string) (net.Conn, error) {
	client, server := net.Pipe()
	f.mu.Lock()
	if f.halt == nil {
		f.halt = make(chan struct{})
	}
	f.conns = append(f.conns, server)
	f.mu.Unlock()
	f.wg.Add(1)
	go func() { defer f.wg.Done(); f.serve(server) }()
	return client, nil
}

// stop closes every connection and waits for the server's goroutines.
func (f *fakeAMQP) stop() {
	f.mu.Lock()
	if f.halt != nil {
		select {
		case <-f.halt:
		default:
			close(f.halt)
		}
	}
	for _, c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// bodies returns the message bodies the fake took.
func (f *fakeAMQP) bodies() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, len(f.published))
	for i, b := range f.published {
		out[i] = string(b)
	}
	return out
}

const (
	frameMethod    = 1
	frameHeader    = 2
	frameBody      = 3
	frameHeartbeat = 8
)

// amqpConn is one connection of the fake.
type amqpConn struct {
	f       *fakeAMQP
	c       net.Conn
	wmu     sync.Mutex
	chans   map[uint16]*amqpChan
	closing chan struct{}
}

// amqpChan is a channel's state: the message being received and the confirms sent.
type amqpChan struct {
	bodySize uint64
	body     []byte
	inBody   bool
	tag      uint64
	closed   bool // closed by the server, waiting for close-ok
}

func (f *fakeAMQP) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	hdr := make([]byte, 8)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return
	}
	k := &amqpConn{f: f, c: c, chans: make(map[uint16]*amqpChan), closing: make(chan struct{})}
	var wg sync.WaitGroup
	defer wg.Wait() // after closing, below
	defer close(k.closing)
	// connection.start: version 0-9, no server properties, PLAIN, en_US.
	k.method(0, 10, 10, []byte{0, 9}, table(), longstr("PLAIN"), longstr("en_US"))
	started := false
	for {
		typ, ch, payload, err := readFrame(r)
		if err != nil {
			return
		}
		switch typ {
		case frameHeartbeat:
			continue
		case frameHeader:
			st := k.chans[ch]
			if st == nil || st.closed {
				continue
			}
			st.bodySize = binary.BigEndian.Uint64(payload[4:12])
			st.body, st.inBody = nil, true
			if st.bodySize == 0 {
				k.taken(ch, st)
			}
			continue
		case frameBody:
			st := k.chans[ch]
			if st == nil || st.closed || !st.inBody {
				continue
			}
			st.body = append(st.body, payload...)
			if uint64(len(st.body)) >= st.bodySize {
				k.taken(ch, st)
			}
			continue
		case frameMethod:
		default:
			return
		}
		class, method := binary.BigEndian.Uint16(payload[0:2]), binary.BigEndian.Uint16(payload[2:4])
		args := payload[4:]
		name := methodNames[[2]uint16{class, method}]
		if name == f.ignore && name != "" {
			continue
		}
		switch name {
		case "connection.start-ok":
			// connection.tune: no channel limit, 128 KiB frames, 10 s heartbeat.
			heartbeat := uint16(10)
			if f.noHeartbeats {
				heartbeat = 0
			}
			k.method(0, 10, 30, u16(0), u32(131072), u16(heartbeat))
		case "connection.tune-ok":
			if !started && !f.noHeartbeats {
				started = true
				wg.Add(1)
				go func() { defer wg.Done(); k.heartbeats() }()
			}
		case "connection.open":
			k.method(0, 10, 41, shortstr(""))
		case "connection.close":
			k.method(0, 10, 51)
			return
		case "channel.open":
			f.mu.Lock()
			f.opens++
			n := f.opens
			f.mu.Unlock()
			if f.ignoreReopen && n > 1 {
				continue
			}
			k.chans[ch] = &amqpChan{}
			k.method(ch, 20, 11, longstr(""))
		case "channel.close":
			delete(k.chans, ch)
			k.method(ch, 20, 41)
		case "channel.close-ok":
			delete(k.chans, ch)
		case "queue.declare":
			queue, rest := readShortstr(args[2:])
			if f.passive404 && rest[0]&1 != 0 {
				k.chans[ch].closed = true
				k.method(ch, 20, 40, u16(404), shortstr("NOT_FOUND - no queue '"+queue+"'"), u16(50), u16(10))
				continue
			}
			k.method(ch, 50, 11, shortstr(queue), u32(0), u32(0))
		case "confirm.select":
			k.method(ch, 85, 11)
		case "basic.qos":
			k.method(ch, 60, 11)
		case "basic.consume":
			_, rest := readShortstr(args[2:])
			tag, _ := readShortstr(rest)
			k.method(ch, 60, 21, shortstr(tag))
			for i, body := range f.deliver {
				// basic.deliver: consumer tag, delivery tag, not redelivered, the default
				// exchange, the queue; then a header without properties, and the body.
				k.method(ch, 60, 60, shortstr(tag), u64(uint64(i+1)), []byte{0}, shortstr(""), shortstr("orders"))
				k.write(frameHeader, ch, append(append(append(u16(60), u16(0)...), u64(uint64(len(body)))...), u16(0)...))
				k.write(frameBody, ch, []byte(body))
			}
			if f.stallAfterDeliver {
				f.mu.Lock()
				halt := f.halt
				f.mu.Unlock()
				<-halt
				return
			}
		case "basic.publish":
			if st := k.chans[ch]; st != nil {
				st.inBody = false
			}
		}
	}
}

// taken ends the message being received on channel ch: over maxBody it closes the channel as
// RabbitMQ does, otherwise it keeps the body and confirms it (unless publishes are ignored).
func (k *amqpConn) taken(ch uint16, st *amqpChan) {
	st.inBody = false
	if k.f.maxBody > 0 && len(st.body) > k.f.maxBody {
		st.closed = true
		reason := fmt.Sprintf("PRECONDITION_FAILED - message size %d is larger than configured max size %d", len(st.body), k.f.maxBody)
		k.method(ch, 20, 40, u16(406), shortstr(reason), u16(60), u16(40))
		return
	}
	k.f.mu.Lock()
	k.f.published = append(k.f.published, st.body)
	k.f.mu.Unlock()
	st.tag++
	if k.f.ignore != "basic.publish" {
		k.method(ch, 60, 80, u64(st.tag), []byte{0})
	}
}

func (k *amqpConn) heartbeats() {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			k.write(frameHeartbeat, 0, nil)
		case <-k.closing:
			return
		}
	}
}

func (k *amqpConn) method(ch, class, method uint16, args ...[]byte) {
	p := append(u16(class), u16(method)...)
	for _, a := range args {
		p = append(p, a...)
	}
	k.write(frameMethod, ch, p)
}

func (k *amqpConn) write(typ byte, ch uint16, payload []byte) {
	b := append([]byte{typ}, u16(ch)...)
	b = append(b, u32(uint32(len(payload)))...)
	b = append(b, payload...)
	b = append(b, 0xCE)
	k.wmu.Lock()
	defer k.wmu.Unlock()
	_, _ = k.c.Write(b)
}

func readFrame(r *bufio.Reader) (typ byte, ch uint16, payload []byte, err error) {
	h := make([]byte, 7)
	if _, err = io.ReadFull(r, h); err != nil {
		return
	}
	payload = make([]byte, binary.BigEndian.Uint32(h[3:7])+1)
	if _, err = io.ReadFull(r, payload); err != nil {
		return
	}
	if payload[len(payload)-1] != 0xCE {
		return 0, 0, nil, fmt.Errorf("bad frame end")
	}
	return h[0], binary.BigEndian.Uint16(h[1:3]), payload[:len(payload)-1], nil
}

var methodNames = map[[2]uint16]string{
	{10, 11}: "connection.start-ok", {10, 31}: "connection.tune-ok", {10, 40}: "connection.open",
	{10, 50}: "connection.close", {20, 10}: "channel.open", {20, 40}: "channel.close",
	{20, 41}: "channel.close-ok", {50, 10}: "queue.declare", {85, 10}: "confirm.select",
	{60, 10}: "basic.qos", {60, 20}: "basic.consume", {60, 40}: "basic.publish",
}

func u16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
func u32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
func table() []byte       { return u32(0) }
func shortstr(s string) []byte {
	return append([]byte{byte(len(s))}, s...)
}
func longstr(s string) []byte { return append(u32(uint32(len(s))), s...) }

func readShortstr(b []byte) (string, []byte) {
	n := int(b[0])
	return string(b[1 : 1+n]), b[1+n:]
}
