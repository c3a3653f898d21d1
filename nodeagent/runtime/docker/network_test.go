package docker

import (
	"net"
	"testing"

	"github.com/everynode/everynode/nodeagent/runtime"
)

// TestBridgeGateway: the address BridgeGateway gives is the gateway the
// engine hands a container on the pods' network.
func TestBridgeGateway(t *testing.T) {
	r := newRuntime(t, "bridge")
	id := run(t, r, testSpec(r, "net", "app", "-exit-after", "-1ns"))
	waitState(t, r, id, runtime.StateRunning)
	c, err := engine.cli.ContainerInspect(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	ep := c.NetworkSettings.Networks[podNetwork]
	if ep == nil || ep.Gateway == "" {
		t.Fatalf("container on %v, want the %s network with a gateway", c.NetworkSettings.Networks, podNetwork)
	}
	got, err := r.BridgeGateway(ctxT(t))
	if err != nil || got.String() != ep.Gateway {
		t.Errorf("Runtime.BridgeGateway: %v, %v; the container's gateway is %s", got, err, ep.Gateway)
	}
	got, err = BridgeGateway(ctxT(t), "")
	if err != nil || got.String() != ep.Gateway {
		t.Errorf("BridgeGateway: %v, %v; the container's gateway is %s", got, err, ep.Gateway)
	}
}

// TestInterfaceAddrIn: the fallback for an engine that reports no gateway
// finds the interface's address in the network's subnet, and nothing
// outside it.
func TestInterfaceAddrIn(t *testing.T) {
	lo, err := net.InterfaceByIndex(1)
	if err != nil || lo.Flags&net.FlagLoopback == 0 {
		t.Skipf("no loopback interface at index 1: %v", err)
	}
	_, loNet, _ := net.ParseCIDR("127.0.0.0/8")
	_, other, _ := net.ParseCIDR("192.0.2.0/24")
	if ip, err := interfaceAddrIn(lo.Name, []*net.IPNet{other, loNet}); err != nil || !ip.Equal(net.IPv4(127, 0, 0, 1)) {
		t.Errorf("in 127.0.0.0/8: %v, %v; want 127.0.0.1", ip, err)
	}
	if ip, err := interfaceAddrIn(lo.Name, []*net.IPNet{other}); err == nil {
		t.Errorf("in 192.0.2.0/24: %v, want an error", ip)
	}
	if _, err := interfaceAddrIn("no-such-if0", []*net.IPNet{loNet}); err == nil {
		t.Error("a missing interface gave no error")
	}
}
