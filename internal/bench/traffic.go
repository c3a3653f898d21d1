package bench

import (
	"net"
	"sync/atomic"

	"github.com/everynode/everynode/gossip"
)

// byteCount is what one direction pair of connections carried.
type byteCount struct {
	in, out atomic.Int64
}

// countedConn adds what a connection reads and writes to a byteCount. Under
// TLS it counts the TLS records: HTTP/2 frames, their encryption and the
// handshake, everything but the TCP/IP headers.
type countedConn struct {
	net.Conn
	c *byteCount
}

func (c *countedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.c.in.Add(int64(n))
	return n, err
}

func (c *countedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.c.out.Add(int64(n))
	return n, err
}

// Traffic is the bytes a fleet's agents sent and received so far: over
// their API connections (TLS records) and their gossip members (encrypted
// UDP payloads and TCP streams), without IP/TCP/UDP headers. GossipPackets*
// count the UDP datagrams, each 28 more bytes on an IPv4 link.
type Traffic struct {
	APIIn            int64 `json:"api_in"`
	APIOut           int64 `json:"api_out"`
	GossipIn         int64 `json:"gossip_in"`
	GossipOut        int64 `json:"gossip_out"`
	GossipPacketsIn  int64 `json:"gossip_packets_in"`
	GossipPacketsOut int64 `json:"gossip_packets_out"`
	// GossipStream* are the part of Gossip* carried by TCP streams
	// (push/pull state exchanges, joins, TCP probes).
	GossipStreamIn  int64 `json:"gossip_stream_in"`
	GossipStreamOut int64 `json:"gossip_stream_out"`
}

// add returns t + u.
func (t Traffic) add(u Traffic) Traffic {
	return Traffic{APIIn: t.APIIn + u.APIIn, APIOut: t.APIOut + u.APIOut, GossipIn: t.GossipIn + u.GossipIn,
		GossipOut: t.GossipOut + u.GossipOut, GossipPacketsIn: t.GossipPacketsIn + u.GossipPacketsIn,
		GossipPacketsOut: t.GossipPacketsOut + u.GossipPacketsOut,
		GossipStreamIn:   t.GossipStreamIn + u.GossipStreamIn, GossipStreamOut: t.GossipStreamOut + u.GossipStreamOut}
}

// sub returns t − u.
func (t Traffic) sub(u Traffic) Traffic {
	return t.add(Traffic{APIIn: -u.APIIn, APIOut: -u.APIOut, GossipIn: -u.GossipIn, GossipOut: -u.GossipOut,
		GossipPacketsIn: -u.GossipPacketsIn, GossipPacketsOut: -u.GossipPacketsOut,
		GossipStreamIn: -u.GossipStreamIn, GossipStreamOut: -u.GossipStreamOut})
}

// trafficOf reads the counters of an API transport and a gossip member.
func trafficOf(api *byteCount, g *gossip.Traffic) Traffic {
	return Traffic{APIIn: api.in.Load(), APIOut: api.out.Load(), GossipIn: g.BytesIn.Load(), GossipOut: g.BytesOut.Load(),
		GossipPacketsIn: g.PacketsIn.Load(), GossipPacketsOut: g.PacketsOut.Load(),
		GossipStreamIn: g.StreamBytesIn.Load(), GossipStreamOut: g.StreamBytesOut.Load()}
}

// idleRates turns the traffic of an idle window of s seconds for n agents
// into the per-agent rates of Result.
func idleRates(d Traffic, s float64, n int, res *Result) {
	per := func(v int64) float64 { return float64(v) / s / float64(n) }
	res.IdleAPIBytesPerSIn, res.IdleAPIBytesPerSOut = per(d.APIIn), per(d.APIOut)
	res.IdleGossipBytesPerSIn, res.IdleGossipBytesPerSOut = per(d.GossipIn), per(d.GossipOut)
	res.IdleGossipPacketsPerSIn, res.IdleGossipPacketsPerSOut = per(d.GossipPacketsIn), per(d.GossipPacketsOut)
	res.IdleGossipStreamBytesPerSIn, res.IdleGossipStreamBytesPerSOut = per(d.GossipStreamIn), per(d.GossipStreamOut)
	res.IdleBytesPerSIn = res.IdleAPIBytesPerSIn + res.IdleGossipBytesPerSIn
	res.IdleBytesPerSOut = res.IdleAPIBytesPerSOut + res.IdleGossipBytesPerSOut
}
