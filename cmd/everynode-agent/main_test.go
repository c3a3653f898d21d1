package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
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

// TestCommandLine: version, help, and "everynode agent"'s checks with the
// same messages, with or without the "agent" word.
func TestCommandLine(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &out, &out); err != nil || !strings.HasPrefix(out.String(), "everynode-agent version v") {
		t.Errorf("version: %v %q", err, out.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"-h"}, &out, &out); err != nil || !strings.Contains(out.String(), "--token-file") || !strings.Contains(out.String(), "--gossip-profile") {
		t.Errorf("-h: %v\n%s", err, out.String())
	}
	for args, want := range map[string]string{
		"":                                       "--server is required",
		"agent":                                  "--server is required",
		"agent --server http://s:6443 --token K": "invalid --server",
		"--server https://s:6443 --token K --labels node-role.kubernetes.io/x=": "invalid --labels: a node may not set node-role.kubernetes.io/x on itself",
		"--server https://s:6443 --token K --runtime rkt":                       "unknown --runtime",
		"--server https://s:6443 --token K extra":                               "unexpected arguments",
		"--bogus": "unknown flag: --bogus; see \"everynode-agent -h\"",
	} {
		err := run(context.Background(), strings.Fields(args), &out, &out)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", args, err, want)
		}
	}
}

// TestJoins: everynode-agent's command line joins a server with the fake
// runtime, its Node turns Ready, and it stops cleanly when ctx ends.
func TestJoins(t *testing.T) {
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := server.Start(context.Background(), server.Config{
		DataDir: t.TempDir(), Listen: "127.0.0.1:0", CompactInterval: -1, Logger: log,
		Gossip: agent.GossipOptions{Addr: "127.0.0.1:0", Profile: gossip.ProfileLocal, LeaveOnStop: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	var stderr testkit.Buffer
	exited := make(chan error, 1)
	go func() {
		exited <- run(ctx, []string{"--server", srv.URL(), "--token", srv.JoinToken(), "--name", "lean-1", "--runtime", "fake",
			"--data-dir", t.TempDir(), "--gossip", "127.0.0.1:0", "--gossip-profile", "local", "--log-listen", "127.0.0.1:0", "--log-level", "warn"},
			&stderr, &stderr)
	}()
	testkit.Eventually(t, 2*time.Minute, func() error {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("agent exited: %v\n%s", err, stderr.String())
		default:
		}
		obj, err := srv.Admin().Get(ctx, resources.Nodes, "", "lean-1")
		if err != nil {
			return err
		}
		for _, c := range obj.(*corev1.Node).Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return errors.New("node lean-1 not Ready")
	})
	cancel()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("agent stopped with %v\n%s", err, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("agent did not stop within a minute of its context ending\n%s", stderr.String())
	}
}
