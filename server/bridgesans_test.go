package server

import (
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/everynode/everynode/agent"
	"github.com/everynode/everynode/apiserver/pki"
	"github.com/everynode/everynode/nodeagent/runtime/docker"
)

// TestBridgeSANs: a server on loopback or on every address names the local
// Docker bridge's gateway in its certificate (where its host's agents
// forward it to their pods); one on another address, or whose local agent
// is not on Docker, does not.
func TestBridgeSANs(t *testing.T) {
	s := &Server{log: slog.New(slog.DiscardHandler)}
	ctx := t.Context()
	for _, host := range []string{"192.0.2.5", "example.test"} {
		if got := s.bridgeSANs(ctx, Config{}, host); got != nil {
			t.Errorf("listening on %s: %v, want none", host, got)
		}
	}
	if got := s.bridgeSANs(ctx, Config{Agent: &agent.NodeOptions{Runtime: agent.RuntimeFake}}, "127.0.0.1"); got != nil {
		t.Errorf("with a fake-runtime agent: %v, want none", got)
	}
	gw, err := docker.BridgeGateway(ctx, "")
	if err != nil {
		if got := s.bridgeSANs(ctx, Config{}, "127.0.0.1"); got != nil {
			t.Errorf("without a Docker bridge (%v): %v, want none", err, got)
		}
		t.Skipf("no Docker bridge here: %v", err)
	}
	for _, host := range []string{"127.0.0.1", "::1", "localhost", "", "0.0.0.0", "::"} {
		if got := s.bridgeSANs(ctx, Config{}, host); !slices.Equal(got, []string{gw.String()}) {
			t.Errorf("listening on %q: %v, want [%s]", host, got, gw)
		}
	}

	// A started server without a local agent (one of this host may join
	// it on loopback) serves a certificate that carries it.
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	cfg := localConfig(t)
	cfg.Agent = nil
	srv, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	b, err := os.ReadFile(filepath.Join(srv.DataDir(), pki.ServerCertFile))
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM", pki.ServerCertFile)
	}
	leaf, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(leaf.IPAddresses, gw.Equal) {
		t.Errorf("serving certificate names %v, want %s among them", leaf.IPAddresses, gw)
	}
}
