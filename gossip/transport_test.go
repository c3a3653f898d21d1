package gossip

import (
	"bytes"
	"io"
	"log"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

func startTransport(t *testing.T) *transport {
	t.Helper()
	tr, err := newTransport("127.0.0.1", 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown() })
	return tr
}

func addrOf(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

func recvPacket(t *testing.T, ch <-chan *memberlist.Packet) *memberlist.Packet {
	t.Helper()
	select {
	case p := <-ch:
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("no packet received")
		return nil
	}
}

// Each datagram is handed on in its own slice of its own size: reading the
// next one into the transport's buffer does not change the one before.
func TestTransportPacketsAreCopies(t *testing.T) {
	rx, tx := startTransport(t), startTransport(t)
	for _, msg := range []string{"first datagram", "2nd"} {
		if _, err := tx.WriteTo([]byte(msg), addrOf(rx.port())); err != nil {
			t.Fatal(err)
		}
	}
	p1 := recvPacket(t, rx.PacketCh())
	p2 := recvPacket(t, rx.PacketCh())
	if string(p1.Buf) != "first datagram" || string(p2.Buf) != "2nd" {
		t.Fatalf("received %q and %q, want %q and %q", p1.Buf, p2.Buf, "first datagram", "2nd")
	}
	if cap(p2.Buf) >= maxDatagram {
		t.Errorf("a 3-byte datagram is held in a buffer of %d bytes", cap(p2.Buf))
	}
	if from := p1.From.(*net.UDPAddr); from.Port != tx.port() {
		t.Errorf("packet from port %d, want the sender's %d", from.Port, tx.port())
	}
	if p1.Timestamp.IsZero() {
		t.Error("packet has no receive time")
	}
}

// bytesPerDatagram is what receiving one small datagram allocates in the
// process, on average over many.
func bytesPerDatagram(t *testing.T, port int, packets <-chan *memberlist.Packet) float64 {
	t.Helper()
	tx := startTransport(t)
	msg := bytes.Repeat([]byte{'x'}, 100)
	const n = 200
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range n {
		if _, err := tx.WriteTo(msg, addrOf(port)); err != nil {
			t.Fatal(err)
		}
		recvPacket(t, packets)
	}
	runtime.ReadMemStats(&after)
	return float64(after.TotalAlloc-before.TotalAlloc) / n
}

// Receiving a datagram allocates about its size, not memberlist's 64 KiB
// read buffer: the measure is taken of memberlist's own transport too, which
// shows it would see a buffer per datagram.
func TestTransportAllocatesTheDatagramNotABuffer(t *testing.T) {
	rx := startTransport(t)
	ours := bytesPerDatagram(t, rx.port(), rx.PacketCh())

	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
		BindAddrs: []string{"127.0.0.1"}, Logger: log.New(io.Discard, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	defer nt.Shutdown()
	theirs := bytesPerDatagram(t, nt.GetAutoBindPort(), nt.PacketCh())

	t.Logf("bytes allocated per 100-byte datagram received and sent: %.0f here, %.0f with memberlist.NetTransport", ours, theirs)
	if theirs < maxDatagram/2 {
		t.Fatalf("memberlist's transport measured %.0f bytes a datagram, want ≥ %d: the measure does not see its buffer", theirs, maxDatagram/2)
	}
	if ours > 4096 {
		t.Errorf("%.0f bytes allocated per datagram, want ≤ 4096", ours)
	}
}

// Shutdown returns while a datagram and a connection wait for a reader that
// never comes (memberlist stops reading before it shuts the transport down).
func TestTransportShutdownWithNobodyReading(t *testing.T) {
	rx := startTransport(t)
	tx := startTransport(t)
	if _, err := tx.WriteTo([]byte("unread"), addrOf(rx.port())); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", addrOf(rx.port()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	time.Sleep(50 * time.Millisecond) // let both reach the reading goroutines
	done := make(chan struct{})
	go func() { _ = rx.Shutdown(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return")
	}
	_ = rx.Shutdown() // a second call is harmless
	if _, err := net.DialTimeout("tcp", addrOf(rx.port()), time.Second); err == nil {
		t.Error("the TCP port still accepts after Shutdown")
	}
}

// A dialled stream arrives on StreamCh and carries bytes both ways; a
// datagram to a host name is resolved.
func TestTransportStreamsAndHostNames(t *testing.T) {
	a, b := startTransport(t), startTransport(t)
	conn, err := a.DialTimeout(addrOf(b.port()), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var in net.Conn
	select {
	case in = <-b.StreamCh():
	case <-time.After(10 * time.Second):
		t.Fatal("no stream accepted")
	}
	defer in.Close()
	if _, err := conn.Write([]byte("push")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(in, got); err != nil || string(got) != "push" {
		t.Fatalf("read %q, %v; want \"push\"", got, err)
	}

	if _, err := a.WriteTo([]byte("by name"), net.JoinHostPort("localhost", strconv.Itoa(b.port()))); err != nil {
		t.Fatal(err)
	}
	if p := recvPacket(t, b.PacketCh()); string(p.Buf) != "by name" {
		t.Fatalf("received %q", p.Buf)
	}
	if _, err := a.WriteTo([]byte("x"), "no-port"); err == nil {
		t.Error("a datagram to an address without a port was sent")
	}
}

func TestTransportAdvertiseAddr(t *testing.T) {
	tr := startTransport(t)
	ip, port, err := tr.FinalAdvertiseAddr("", 0)
	// 4 bytes, as memberlist.NetTransport gives it: memberlist compares
	// addresses byte for byte.
	if err != nil || !ip.Equal(net.ParseIP("127.0.0.1")) || len(ip) != net.IPv4len || port != tr.port() {
		t.Errorf("bound to 127.0.0.1: advertises %v (%d bytes):%d (%v), want 127.0.0.1 (4 bytes):%d", ip, len(ip), port, err, tr.port())
	}
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
		BindAddrs: []string{"127.0.0.1"}, Logger: log.New(io.Discard, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	defer nt.Shutdown()
	if theirs, _, _ := nt.FinalAdvertiseAddr("", 0); !bytes.Equal(theirs, ip) {
		t.Errorf("advertises %v (% x), memberlist's transport %v (% x)", ip, []byte(ip), theirs, []byte(theirs))
	}
	ip, port, err = tr.FinalAdvertiseAddr("10.1.2.3", 7000)
	if err != nil || ip.String() != "10.1.2.3" || len(ip) != net.IPv4len || port != 7000 {
		t.Errorf("configured 10.1.2.3:7000: advertises %v (%d bytes):%d (%v)", ip, len(ip), port, err)
	}
	if _, _, err := tr.FinalAdvertiseAddr("node-1", 7000); err == nil {
		t.Error("a host name was accepted as the advertise address")
	}

	all, err := newTransport("0.0.0.0", 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer all.Shutdown()
	ip, port, err = all.FinalAdvertiseAddr("", 0)
	if err != nil {
		t.Logf("bound to all interfaces, no private IP here: %v", err)
		return
	}
	if ip.IsUnspecified() || port != all.port() {
		t.Errorf("bound to all interfaces: advertises %v:%d, want a private IP and port %d", ip, port, all.port())
	}
}

// Port 0 finds a port free for both TCP and UDP; a port taken is an error
// that names it.
func TestTransportBind(t *testing.T) {
	tr := startTransport(t)
	if _, err := newTransport("127.0.0.1", tr.port(), slog.New(slog.DiscardHandler)); err == nil {
		t.Fatalf("bound port %d twice", tr.port())
	} else if want := strconv.Itoa(tr.port()); !bytes.Contains([]byte(err.Error()), []byte(want)) {
		t.Errorf("error %q does not name port %s", err, want)
	}
	if _, err := newTransport("not-an-ip", 0, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("bound to a host name")
	}
}

// The counting transport shuts down twice without panicking: memberlist
// shuts its transport down when Create fails, and New does so again.
func TestCountingTransportShutdownTwice(t *testing.T) {
	c := newCountingTransport(startTransport(t), &Traffic{}, nil)
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
}
