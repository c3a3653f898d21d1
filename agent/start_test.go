package agent_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/everynode/everynode/agent"
	"github.com/everynode/everynode/gossip"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/server"
)

// startServer starts a server without a local agent for the agents of a test.
func startServer(t *testing.T) *server.Server {
	t.Helper()
	s, err := server.Start(context.Background(), server.Config{
		DataDir: t.TempDir(), Listen: "127.0.0.1:0", CompactInterval: -1, Logger: testLogger(t),
		Gossip: agent.GossipOptions{Addr: "127.0.0.1:0", Profile: gossip.ProfileLocal},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func agentConfig(t *testing.T, s *server.Server, name string) agent.Config {
	return agent.Config{
		Server: s.URL(), Token: s.JoinToken(), DataDir: t.TempDir(), Logger: testLogger(t),
		Node:   agent.NodeOptions{Name: name, IP: "127.0.0.1", Runtime: agent.RuntimeFake, LogListen: "127.0.0.1:0"},
		Gossip: agent.GossipOptions{Addr: "127.0.0.1:0", Profile: gossip.ProfileLocal, LeaveOnStop: true},
	}
}

// TestStartClose joins a server, registers a Ready node (its liveness
// comes through gossip), saves its credentials, and Close leaves no
// goroutine behind.
func TestStartClose(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	defer testkit.LeakCheck(t)()
	s := startServer(t)
	defer s.Close()
	cfg := agentConfig(t, s, "a1")
	a, err := agent.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Offline() {
		t.Error("started offline with the server up")
	}
	if fi, err := os.Stat(filepath.Join(cfg.DataDir, agent.CredentialsFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("credentials: %v %v", fi, err)
	}
	testkit.Eventually(t, 30*time.Second, func() error {
		obj, err := s.Admin().Get(context.Background(), resources.Nodes, "", "a1")
		if err != nil {
			return err
		}
		for _, c := range obj.(*corev1.Node).Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return errors.New("node a1 not Ready")
	})
	if err := a.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestStartFailsLogListenTaken: the log endpoint's address is taken; Start
// fails after the join, the API client and the runtime, with PartLogListen,
// and leaves nothing running.
func TestStartFailsLogListenTaken(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	defer testkit.LeakCheck(t)()
	s := startServer(t)
	defer s.Close()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg := agentConfig(t, s, "a2")
	cfg.Node.LogListen = taken.Addr().String()
	a, err := agent.Start(context.Background(), cfg)
	var ae *agent.Error
	if !errors.As(err, &ae) || ae.Part != agent.PartLogListen {
		if a != nil {
			a.Close()
		}
		t.Fatalf("Start = %v, want a PartLogListen error", err)
	}
}

// TestStartUnreachable: no server and no saved credentials: PartJoin, and
// nothing left running.
func TestStartUnreachable(t *testing.T) {
	defer testkit.LeakCheck(t)()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	cfg := agent.Config{Server: "https://" + addr, Token: "K10" + strings.Repeat("ab", 32) + "::join:secret", DataDir: t.TempDir(),
		Node: agent.NodeOptions{Name: "a3", Runtime: agent.RuntimeFake, LogListen: "127.0.0.1:0"}}
	a, err := agent.Start(context.Background(), cfg)
	if a != nil {
		a.Close()
	}
	var ae *agent.Error
	if !errors.As(err, &ae) || ae.Part != agent.PartJoin {
		t.Fatalf("Start = %v, want a PartJoin error", err)
	}
}
