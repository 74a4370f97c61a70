package broker

import (
	"context"
	"database/sql/driver"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lib/pq"
)

// A PostgreSQL server that accepts connections and stops answering (a stopped process, a
// half-open connection) would hold lib/pq for good: it sets no deadline on its reads unless
// the DSN has a connect_timeout, and then only while it connects, and the cancel request it
// sends when a query's context ends waits for the server too. watermill-sql runs its queries
// without a context, and its Close waits for them, so one hung server held connections and
// goroutines for ever and made [Brokers.Close] hang. The connections of egrid's PostgreSQL
// publisher and subscriber are therefore bounded here: a read or write waits at most
// pgConnectBound while the connection is made (and for a cancel request's connection), and at
// most pgQueryBound once it is made; and closing the pool's [pgConns] cuts every connection at
// once, so Close never waits on the server.
const (
	// pgConnectBound bounds each read and write while a connection is made: the server
	// answers a startup at once.
	pgConnectBound = dialTimeout
	// pgQueryBound bounds each read and write of a query: the longest response timeout a
	// subscription may have (300 s), so no attempt the subscription still waits for is cut.
	pgQueryBound = 5 * time.Minute
)

// errPGClosed is the cause of a connection refused after its pool closed.
var errPGClosed = errors.New("the PostgreSQL connections are closed")

// pgConns makes and tracks the connections of one database handle. It implements
// [driver.Connector] for [sql.OpenDB].
type pgConns struct {
	dsn string

	mu     sync.Mutex
	conns  map[*pgConn]struct{}
	byConn map[driver.Conn]*pgConn // each lib/pq connection's own network connection
	closed bool
}

// newPGConns checks dsn (nothing is dialled) and returns its connector.
func newPGConns(dsn string) (*pgConns, error) {
	if _, err := pq.NewConnector(dsn); err != nil {
		return nil, err
	}
	return &pgConns{dsn: dsn, conns: make(map[*pgConn]struct{}), byConn: make(map[driver.Conn]*pgConn)}, nil
}

// Connect implements [driver.Connector]: one connection, made within pgConnectBound per read
// or write, then bounded by pgQueryBound.
func (p *pgConns) Connect(context.Context) (driver.Conn, error) {
	d := &pgDialer{pool: p}
	c, err := pq.DialOpen(d, p.dsn)
	if err != nil {
		return nil, err
	}
	d.connected(c)
	return c, nil
}

// of returns the network connection of lib/pq connection dc, or nil when it is gone.
func (p *pgConns) of(dc any) *pgConn {
	c, ok := dc.(driver.Conn)
	if !ok {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byConn[c]
}

// Driver implements [driver.Connector].
func (p *pgConns) Driver() driver.Driver { return pq.Driver{} }

// close cuts every connection, and refuses new ones. It is idempotent.
func (p *pgConns) close() {
	p.mu.Lock()
	p.closed = true
	conns := make([]*pgConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

func (p *pgConns) add(c *pgConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *pgConns) remove(c *pgConn) {
	p.mu.Lock()
	delete(p.conns, c)
	if c.driver != nil {
		delete(p.byConn, c.driver)
	}
	p.mu.Unlock()
}

// pgDialer dials for one lib/pq connection: the connection itself first, then any cancel
// request lib/pq sends for its queries.
type pgDialer struct {
	pool  *pgConns
	mu    sync.Mutex
	first *pgConn
}

// Dial implements [pq.Dialer].
func (d *pgDialer) Dial(network, address string) (net.Conn, error) {
	return d.DialTimeout(network, address, dialTimeout)
}

// DialTimeout implements [pq.Dialer].
func (d *pgDialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	if timeout <= 0 || timeout > dialTimeout {
		timeout = dialTimeout
	}
	nc, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	c := &pgConn{Conn: nc, pool: d.pool}
	c.bound.Store(int64(pgConnectBound))
	if !d.pool.add(c) {
		_ = nc.Close()
		return nil, errPGClosed
	}
	d.mu.Lock()
	if d.first == nil {
		d.first = c
	}
	d.mu.Unlock()
	return c, nil
}

// connected says the connection is made, as lib/pq connection dc: its queries get
// pgQueryBound, and [pgConns.of] finds it.
func (d *pgDialer) connected(dc driver.Conn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.first == nil {
		return
	}
	d.first.bound.Store(int64(pgQueryBound))
	d.pool.mu.Lock()
	if _, open := d.pool.conns[d.first]; open {
		d.first.driver = dc
		d.pool.byConn[dc] = d.first
	}
	d.pool.mu.Unlock()
}

// pgConn is a connection whose every read and write waits at most its bound. lib/pq's own
// deadlines (connect_timeout) give way to it.
type pgConn struct {
	net.Conn
	pool   *pgConns
	driver driver.Conn  // the lib/pq connection over it, once made; guarded by pool.mu
	bound  atomic.Int64 // time.Duration
	once   sync.Once
}

func (c *pgConn) Read(b []byte) (int, error) {
	_ = c.Conn.SetReadDeadline(time.Now().Add(time.Duration(c.bound.Load())))
	return c.Conn.Read(b)
}

func (c *pgConn) Write(b []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(time.Duration(c.bound.Load())))
	return c.Conn.Write(b)
}

func (c *pgConn) SetDeadline(time.Time) error      { return nil }
func (c *pgConn) SetReadDeadline(time.Time) error  { return nil }
func (c *pgConn) SetWriteDeadline(time.Time) error { return nil }

func (c *pgConn) Close() error {
	c.once.Do(func() { c.pool.remove(c) })
	return c.Conn.Close()
}
