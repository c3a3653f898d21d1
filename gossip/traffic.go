package gossip

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Traffic counts the bytes a member's transport carries, at the socket: the
// encrypted UDP payloads (probes, acks, gossip) and the TCP streams (joins,
// push/pull exchanges, TCP probes), both ways. IP, UDP and TCP headers are
// not included; PacketsIn and PacketsOut let a reader add UDP's. Safe for
// concurrent use; the zero value is ready.
type Traffic struct {
	BytesIn, BytesOut     atomic.Int64
	PacketsIn, PacketsOut atomic.Int64
	// Streams counts the TCP connections opened either way.
	Streams atomic.Int64
	// StreamBytesIn and StreamBytesOut are the part of BytesIn and BytesOut
	// carried by TCP streams (joins, push/pull exchanges, TCP probes).
	StreamBytesIn, StreamBytesOut atomic.Int64
}

// countingTransport wraps the member's network transport and adds what
// crosses it to a Traffic.
type countingTransport struct {
	memberlist.NodeAwareTransport
	t       *Traffic
	cut     *atomic.Bool // tests: while true, nothing is sent or received
	packets chan *memberlist.Packet
	streams chan net.Conn
	quit    chan struct{}
	done    chan struct{}
	// stop closes quit once: memberlist shuts its transport down when
	// Create fails, and New does so again.
	stop sync.Once
}

// newCountingTransport starts the goroutine that forwards (and counts) what
// inner receives; Shutdown stops it.
func newCountingTransport(inner memberlist.NodeAwareTransport, t *Traffic, cut *atomic.Bool) *countingTransport {
	c := &countingTransport{NodeAwareTransport: inner, t: t, cut: cut, packets: make(chan *memberlist.Packet),
		streams: make(chan net.Conn), quit: make(chan struct{}), done: make(chan struct{})}
	go c.forward()
	return c
}

func (c *countingTransport) forward() {
	defer close(c.done)
	pin, sin := c.NodeAwareTransport.PacketCh(), c.NodeAwareTransport.StreamCh()
	for {
		select {
		case p := <-pin:
			if c.isCut() {
				continue
			}
			c.t.PacketsIn.Add(1)
			c.t.BytesIn.Add(int64(len(p.Buf)))
			select {
			case c.packets <- p:
			case <-c.quit:
				return
			}
		case conn := <-sin:
			if c.isCut() {
				conn.Close()
				continue
			}
			c.t.Streams.Add(1)
			select {
			case c.streams <- &countingConn{Conn: conn, t: c.t}:
			case <-c.quit:
				conn.Close()
				return
			}
		case <-c.quit:
			return
		}
	}
}

func (c *countingTransport) PacketCh() <-chan *memberlist.Packet { return c.packets }

func (c *countingTransport) StreamCh() <-chan net.Conn { return c.streams }

func (c *countingTransport) isCut() bool { return c.cut != nil && c.cut.Load() }

func (c *countingTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if c.isCut() {
		return time.Now(), nil // lost on the way
	}
	c.countOut(len(b))
	return c.NodeAwareTransport.WriteTo(b, addr)
}

func (c *countingTransport) WriteToAddress(b []byte, addr memberlist.Address) (time.Time, error) {
	if c.isCut() {
		return time.Now(), nil
	}
	c.countOut(len(b))
	return c.NodeAwareTransport.WriteToAddress(b, addr)
}

func (c *countingTransport) countOut(n int) {
	c.t.PacketsOut.Add(1)
	c.t.BytesOut.Add(int64(n))
}

func (c *countingTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if c.isCut() {
		return nil, errCut
	}
	conn, err := c.NodeAwareTransport.DialTimeout(addr, timeout)
	return c.counted(conn, err)
}

func (c *countingTransport) DialAddressTimeout(addr memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if c.isCut() {
		return nil, errCut
	}
	conn, err := c.NodeAwareTransport.DialAddressTimeout(addr, timeout)
	return c.counted(conn, err)
}

func (c *countingTransport) counted(conn net.Conn, err error) (net.Conn, error) {
	if err != nil {
		return nil, err
	}
	c.t.Streams.Add(1)
	return &countingConn{Conn: conn, t: c.t}, nil
}

// Shutdown stops the inner transport, then the forwarding goroutine.
func (c *countingTransport) Shutdown() error {
	err := c.NodeAwareTransport.Shutdown()
	c.stop.Do(func() { close(c.quit) })
	<-c.done
	return err
}

// countingConn adds what a stream reads and writes to a Traffic.
type countingConn struct {
	net.Conn
	t *Traffic
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.t.BytesIn.Add(int64(n))
	c.t.StreamBytesIn.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.t.BytesOut.Add(int64(n))
	c.t.StreamBytesOut.Add(int64(n))
	return n, err
}

// errCut is a dial while a test cut the member's link.
var errCut = errors.New("gossip: link cut (test)")
