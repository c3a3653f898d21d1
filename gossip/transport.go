package gossip

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	sockaddr "github.com/hashicorp/go-sockaddr"
	"github.com/hashicorp/memberlist"
)

const (
	// maxDatagram is the largest UDP payload: what one read must have room for.
	maxDatagram = 65536
	// udpReadBuffer is the socket receive buffer asked for (halved until the
	// kernel accepts it), so that a burst of gossip is queued, not dropped.
	udpReadBuffer = 2 << 20
	// bindTries bounds the retries when port 0 gives TCP a port that UDP
	// cannot have.
	bindTries = 10
)

// transport is memberlist's network transport for one address: UDP packets
// and TCP streams on the same port, as memberlist.NetTransport carries them.
// The difference is what a received datagram costs: NetTransport reads each
// into a new 64 KiB buffer, which on an idle lan agent (about 7 datagrams a
// second) was 450 KiB/s of garbage and a garbage collection every few
// seconds; this one reads into one buffer it keeps and hands memberlist a
// copy of the datagram's size (docs/benchmarks.md, "Idle CPU per agent").
type transport struct {
	udp    *net.UDPConn
	tcp    *net.TCPListener
	bindIP net.IP
	log    *slog.Logger

	packets chan *memberlist.Packet
	streams chan net.Conn

	quit     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

var _ memberlist.NodeAwareTransport = (*transport)(nil)

// newTransport listens on ip:port for TCP and UDP and starts the goroutines
// that read them; Shutdown stops them. Port 0 picks a port free for both.
func newTransport(ip string, port int, log *slog.Logger) (*transport, error) {
	bindIP := net.ParseIP(ip)
	if bindIP == nil {
		return nil, fmt.Errorf("bind address %q is not an IP address", ip)
	}
	tries := 1
	if port == 0 {
		tries = bindTries
	}
	var tcp *net.TCPListener
	var udp *net.UDPConn
	var err error
	for range tries {
		tcp, udp, err = listen(bindIP, port)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	t := &transport{udp: udp, tcp: tcp, bindIP: bindIP, log: log,
		packets: make(chan *memberlist.Packet), streams: make(chan net.Conn), quit: make(chan struct{})}
	t.wg.Add(2)
	go t.readPackets()
	go t.acceptStreams()
	return t, nil
}

// listen binds TCP, then UDP on the port TCP got.
func listen(ip net.IP, port int) (*net.TCPListener, *net.UDPConn, error) {
	tcp, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip, Port: port})
	if err != nil {
		return nil, nil, fmt.Errorf("listen on TCP %s: %w", net.JoinHostPort(ip.String(), fmt.Sprint(port)), err)
	}
	port = tcp.Addr().(*net.TCPAddr).Port
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: ip, Port: port})
	if err != nil {
		tcp.Close()
		return nil, nil, fmt.Errorf("listen on UDP %s: %w", net.JoinHostPort(ip.String(), fmt.Sprint(port)), err)
	}
	for size := udpReadBuffer; size > 0; size /= 2 {
		if err = udp.SetReadBuffer(size); err == nil {
			break
		}
	}
	if err != nil {
		tcp.Close()
		udp.Close()
		return nil, nil, fmt.Errorf("set the UDP receive buffer: %w", err)
	}
	return tcp, udp, nil
}

// port is the port bound (the one picked, for port 0).
func (t *transport) port() int { return t.tcp.Addr().(*net.TCPAddr).Port }

// FinalAdvertiseAddr is the address other members are told: the one
// configured, else the bound one, else, when bound to all interfaces, this
// machine's first private IP (memberlist's rule).
func (t *transport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if ip != "" {
		addr := net.ParseIP(ip)
		if addr == nil {
			return nil, 0, fmt.Errorf("advertise address %q is not an IP address", ip)
		}
		if v4 := addr.To4(); v4 != nil {
			addr = v4
		}
		return addr, port, nil
	}
	if !t.bindIP.IsUnspecified() {
		// In the listener's form (4 bytes for IPv4), as memberlist's own
		// transport gives it: memberlist compares addresses byte for byte,
		// and a member whose address changed form would conflict with itself.
		ip := t.tcp.Addr().(*net.TCPAddr).IP
		if v4 := ip.To4(); v4 != nil {
			ip = v4
		}
		return ip, t.port(), nil
	}
	private, err := sockaddr.GetPrivateIP()
	if err != nil {
		return nil, 0, fmt.Errorf("find a private IP to advertise: %w", err)
	}
	addr := net.ParseIP(private)
	if addr == nil {
		return nil, 0, errors.New("no private IP address to advertise: set the advertise address")
	}
	return addr, t.port(), nil
}

// WriteTo sends one datagram to addr (host:port).
func (t *transport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress sends one datagram to a.Addr (host:port).
func (t *transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if ap, err := netip.ParseAddrPort(a.Addr); err == nil {
		_, err = t.udp.WriteToUDPAddrPort(b, ap)
		return time.Now(), err
	}
	ua, err := net.ResolveUDPAddr("udp", a.Addr)
	if err != nil {
		return time.Time{}, err
	}
	_, err = t.udp.WriteTo(b, ua)
	return time.Now(), err
}

// PacketCh delivers the datagrams received, each in its own slice.
func (t *transport) PacketCh() <-chan *memberlist.Packet { return t.packets }

// StreamCh delivers the TCP connections accepted.
func (t *transport) StreamCh() <-chan net.Conn { return t.streams }

// DialTimeout opens a TCP stream to addr (host:port).
func (t *transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout opens a TCP stream to a.Addr (host:port).
func (t *transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return d.Dial("tcp", a.Addr)
}

// Shutdown closes both sockets and waits for the reading goroutines, which
// drop what nobody is left to take.
func (t *transport) Shutdown() error {
	t.stopOnce.Do(func() {
		close(t.quit)
		t.tcp.Close()
		t.udp.Close()
	})
	t.wg.Wait()
	return nil
}

func (t *transport) stopping() bool {
	select {
	case <-t.quit:
		return true
	default:
		return false
	}
}

// readPackets reads datagrams into one buffer and hands each on as a copy.
func (t *transport) readPackets() {
	defer t.wg.Done()
	buf := make([]byte, maxDatagram)
	for {
		n, from, err := t.udp.ReadFromUDP(buf)
		ts := time.Now()
		if err != nil {
			if t.stopping() {
				return
			}
			t.log.Warn("gossip: read a UDP packet", "err", err)
			continue
		}
		if n < 1 {
			continue // memberlist needs at least the message type
		}
		p := &memberlist.Packet{Buf: append([]byte(nil), buf[:n]...), From: from, Timestamp: ts}
		select {
		case t.packets <- p:
		case <-t.quit:
			return
		}
	}
}

// acceptStreams accepts TCP connections, backing off (5 ms doubling to 1 s)
// while accepting fails, as when file descriptors run out.
func (t *transport) acceptStreams() {
	defer t.wg.Done()
	var delay time.Duration
	for {
		conn, err := t.tcp.AcceptTCP()
		if err != nil {
			if t.stopping() {
				return
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			t.log.Warn("gossip: accept a TCP connection", "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
			case <-t.quit:
				return
			}
			continue
		}
		delay = 0
		select {
		case t.streams <- conn:
		case <-t.quit:
			conn.Close()
			return
		}
	}
}
