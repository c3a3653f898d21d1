package docker

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
)

// podNetwork is the engine network of the containers made without host
// networking: Docker's default bridge.
const podNetwork = "bridge"

// bridgeNameOption is the bridge network's option naming its host interface.
const bridgeNameOption = "com.docker.network.bridge.name"

// BridgeGateway is the host's IPv4 address on the network the pods without
// host networking use (Docker's default bridge, e.g. 172.17.0.1): the
// address at which such a pod reaches a process of the host. It is the
// gateway the engine reports for the network; an engine that reports none
// (Docker 20.10 for a docker0 it did not create) gives the bridge
// interface's address in the network's subnet, found when this process
// sees the host's interfaces.
func (r *Runtime) BridgeGateway(ctx context.Context) (net.IP, error) {
	return bridgeGateway(ctx, r.cli)
}

// BridgeGateway is Runtime.BridgeGateway for the engine at host (empty:
// DOCKER_HOST or the local socket), for a caller without a Runtime (the
// server, choosing the names of its serving certificate).
func BridgeGateway(ctx context.Context, host string) (net.IP, error) {
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	cli, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker: client for %q: %w", host, err)
	}
	defer cli.Close()
	return bridgeGateway(ctx, cli)
}

func bridgeGateway(ctx context.Context, cli *client.Client) (net.IP, error) {
	nw, err := cli.NetworkInspect(ctx, podNetwork, network.InspectOptions{})
	if err != nil {
		return nil, fmt.Errorf("docker: inspect network %s: %w", podNetwork, err)
	}
	var subnets []*net.IPNet
	for _, c := range nw.IPAM.Config {
		if gw := net.ParseIP(c.Gateway).To4(); gw != nil {
			return gw, nil
		}
		if _, sn, err := net.ParseCIDR(c.Subnet); err == nil && sn.IP.To4() != nil {
			subnets = append(subnets, sn)
		}
	}
	name := nw.Options[bridgeNameOption]
	if name == "" || len(subnets) == 0 {
		return nil, fmt.Errorf("docker: network %s reports no IPv4 gateway", podNetwork)
	}
	gw, err := interfaceAddrIn(name, subnets)
	if err != nil {
		return nil, fmt.Errorf("docker: network %s reports no IPv4 gateway, and its bridge %s: %w", podNetwork, name, err)
	}
	return gw, nil
}

// interfaceAddrIn is the first IPv4 address of the interface name within
// one of subnets.
func interfaceAddrIn(name string, subnets []*net.IPNet) (net.IP, error) {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return nil, err
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.To4() == nil {
			continue
		}
		for _, sn := range subnets {
			if sn.Contains(ipn.IP) {
				return ipn.IP.To4(), nil
			}
		}
	}
	return nil, errors.New("no address in the network's subnet")
}
