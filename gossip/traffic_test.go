package gossip

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// fakeTransport is a memberlist.NodeAwareTransport whose channels the test
// feeds and whose writes it records.
type fakeTransport struct {
	packets chan *memberlist.Packet
	streams chan net.Conn
	written [][]byte
	dialed  net.Conn
}

func (f *fakeTransport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	return net.IPv4(127, 0, 0, 1), 1, nil
}
func (f *fakeTransport) WriteTo(b []byte, _ string) (time.Time, error) {
	f.written = append(f.written, b)
	return time.Now(), nil
}
func (f *fakeTransport) WriteToAddress(b []byte, _ memberlist.Address) (time.Time, error) {
	return f.WriteTo(b, "")
}
func (f *fakeTransport) PacketCh() <-chan *memberlist.Packet { return f.packets }
func (f *fakeTransport) DialTimeout(string, time.Duration) (net.Conn, error) {
	return f.dialed, nil
}
func (f *fakeTransport) DialAddressTimeout(memberlist.Address, time.Duration) (net.Conn, error) {
	return f.dialed, nil
}
func (f *fakeTransport) StreamCh() <-chan net.Conn { return f.streams }
func (f *fakeTransport) Shutdown() error           { return nil }

func TestCountingTransportCountsPacketsAndStreams(t *testing.T) {
	checkGoroutines(t)
	dialed, dialedPeer := net.Pipe()
	accepted, acceptedPeer := net.Pipe()
	defer dialedPeer.Close()
	defer acceptedPeer.Close()
	f := &fakeTransport{packets: make(chan *memberlist.Packet), streams: make(chan net.Conn), dialed: dialed}
	var tr Traffic
	c := newCountingTransport(f, &tr, nil)

	// Out: two packets, 10 and 20 bytes.
	if _, err := c.WriteTo(make([]byte, 10), "a:1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteToAddress(make([]byte, 20), memberlist.Address{Addr: "b:1"}); err != nil {
		t.Fatal(err)
	}
	// In: one packet of 7 bytes, forwarded unchanged.
	in := &memberlist.Packet{Buf: make([]byte, 7)}
	f.packets <- in
	if got := <-c.PacketCh(); got != in {
		t.Fatalf("forwarded packet %p, want %p", got, in)
	}
	// A dialed stream: 5 bytes out, 3 in.
	conn, err := c.DialTimeout("a:1", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		b := make([]byte, 5)
		_, _ = io.ReadFull(dialedPeer, b)
		_, _ = dialedPeer.Write([]byte("abc"))
	}()
	if _, err := conn.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(conn, make([]byte, 3)); err != nil {
		t.Fatal(err)
	}
	// An accepted stream: 4 bytes in.
	f.streams <- accepted
	sc := <-c.StreamCh()
	go func() { _, _ = acceptedPeer.Write([]byte("1234")) }()
	if _, err := io.ReadFull(sc, make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}

	for _, x := range []struct {
		name      string
		got, want int64
	}{
		{"BytesOut", tr.BytesOut.Load(), 10 + 20 + 5},
		{"BytesIn", tr.BytesIn.Load(), 7 + 3 + 4},
		{"PacketsOut", tr.PacketsOut.Load(), 2},
		{"PacketsIn", tr.PacketsIn.Load(), 1},
		{"Streams", tr.Streams.Load(), 2},
		{"StreamBytesOut", tr.StreamBytesOut.Load(), 5},
		{"StreamBytesIn", tr.StreamBytesIn.Load(), 3 + 4},
	} {
		if x.got != x.want {
			t.Errorf("%s = %d, want %d", x.name, x.got, x.want)
		}
	}
	if len(f.written) != 2 {
		t.Errorf("inner transport wrote %d packets, want 2", len(f.written))
	}
}

// Two real members with counters: the join (a TCP push/pull) and the probes
// (UDP) that follow show up on both sides.
func TestMembersCountTraffic(t *testing.T) {
	checkGoroutines(t)
	var ta, tb Traffic
	ca, cb := testConfig("a", ProfileLocal), testConfig("b", ProfileLocal)
	ca.Traffic, cb.Traffic = &ta, &tb
	a, b := startMember(t, ca), startMember(t, cb)
	if _, err := b.Join([]string{a.LocalAddr()}); err != nil {
		t.Fatalf("join: %v", err)
	}
	waitFor(t, 10*time.Second, "both alive and probing each other", func() bool {
		return seesAlive(a, "a", "b") && seesAlive(b, "a", "b") &&
			ta.PacketsIn.Load() > 0 && tb.PacketsIn.Load() > 0 && ta.PacketsOut.Load() > 0 && tb.PacketsOut.Load() > 0
	})
	if ta.Streams.Load() < 1 || tb.Streams.Load() < 1 {
		t.Errorf("streams a=%d b=%d, want ≥ 1 each (the join's push/pull)", ta.Streams.Load(), tb.Streams.Load())
	}
	// Every byte counted includes the UDP packets: bytes ≥ packets.
	if ta.BytesIn.Load() < ta.PacketsIn.Load() || tb.BytesOut.Load() < tb.PacketsOut.Load() {
		t.Errorf("bytes below packet counts: a in %d/%d, b out %d/%d", ta.BytesIn.Load(), ta.PacketsIn.Load(), tb.BytesOut.Load(), tb.PacketsOut.Load())
	}
}
