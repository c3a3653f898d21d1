package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/everynode/everynode/agent"
	"github.com/everynode/everynode/cmd/everynode/internal/cli"
	"github.com/everynode/everynode/internal/testkit"
)

// joinOnce runs "everynode agent" until it has joined or failed: it returns
// the agent's error when it refuses to start, and stops it otherwise.
func joinOnce(t *testing.T, srv *runningServer, name, dataDir string, env map[string]string, tokenArgs ...string) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	args := append([]string{"agent", "--server", srv.url(t), "--name", name, "--runtime", "fake", "--data-dir", dataDir,
		"--gossip", "127.0.0.1:0", "--gossip-profile", "local", "--log-listen", "127.0.0.1:0", "--log-level", "warn"}, tokenArgs...)
	m := &cli.Main{Getenv: func(k string) string { return env[k] }}
	done := make(chan error, 1)
	log := &testkit.Buffer{}
	go func() { done <- m.Run(ctx, args, nil, &testkit.Buffer{}, log) }()
	admin := srv.client(t, "")
	var err error
	testkit.Eventually(t, joinWait, func() error {
		select {
		case err = <-done:
			return nil
		default:
		}
		if _, gerr := getNode(context.Background(), admin, name); gerr != nil {
			return gerr
		}
		if b, rerr := os.ReadFile(filepath.Join(dataDir, agent.CredentialsFile)); rerr != nil || len(b) == 0 {
			return rerr
		}
		return nil
	})
	if err != nil {
		return err
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("agent %s: %s\n%s", name, cli.FormatError(err), log.String())
	}
	return nil
}

// TestJoinIdentityAndTokens is the node identity and join token suite by
// attack (docs/security.md §4), with real agents and the CLI: the join
// token cannot take over a registered node's name; bootstrap tokens admit
// agents until deleted; a rotated join secret admits no one new while
// joined agents restart with their saved credentials.
func TestJoinIdentityAndTokens(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	ctx := context.Background()
	srv := startServer(t, t.TempDir())
	admin := srv.client(t, "")
	tokenFile := filepath.Join(t.TempDir(), "join-token")
	if err := os.WriteFile(tokenFile, []byte(srv.joinToken(t)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// First join: the machine gets its node password (0600), the name is its.
	dirA := t.TempDir()
	if err := joinOnce(t, srv, "w-id", dirA, nil, "--token-file", tokenFile); err != nil {
		t.Fatalf("first join: %s", cli.FormatError(err))
	}
	fi, err := os.Stat(filepath.Join(dirA, agent.NodePasswordFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("node password: %v %v, want mode 0600", fi, err)
	}
	before, err := getNode(ctx, admin, "w-id")
	if err != nil {
		t.Fatal(err)
	}

	// Attack: the join token from another machine under the same name.
	dirB := t.TempDir()
	err = joinOnce(t, srv, "w-id", dirB, map[string]string{cli.TokenEnv: srv.joinToken(t)})
	want := `error: join refused: nodes "w-id" is forbidden: the node name is held by another machine (this machine's node password does not match the one recorded when "w-id" first joined); ` +
		`if that machine is gone, an admin frees the name with "everynode delete node w-id", else join this one under another --name`
	if err == nil || cli.FormatError(err) != want {
		t.Fatalf("takeover: %v, want the line\n%s", err, want)
	}
	if _, err := os.Stat(filepath.Join(dirB, agent.CredentialsFile)); err == nil {
		t.Error("the refused machine got credentials")
	}
	if after, err := getNode(ctx, admin, "w-id"); err != nil || after.UID != before.UID {
		t.Errorf("the refused join changed the Node: %v", err)
	}
	// The rightful machine still joins (afresh: no saved credentials).
	if err := os.Remove(filepath.Join(dirA, agent.CredentialsFile)); err != nil {
		t.Fatal(err)
	}
	if err := joinOnce(t, srv, "w-id", dirA, nil, "--token-file", tokenFile); err != nil {
		t.Fatalf("rejoin: %s", cli.FormatError(err))
	}

	// Bootstrap tokens: created, listed, used, deleted.
	boot, err := srv.run(t, "token", "create", "--ttl", "1h", "--description", "edge rollout")
	if err != nil {
		t.Fatal(err)
	}
	boot = strings.TrimSpace(boot)
	if !strings.HasPrefix(boot, "K10") || !strings.Contains(boot, "::join:") {
		t.Fatalf("token create printed %q", boot)
	}
	list, err := srv.run(t, "token", "list")
	if err != nil || !strings.Contains(list, boot) || !strings.Contains(list, "edge rollout") || !strings.Contains(list, "authentication") {
		t.Fatalf("token list: %v\n%s", err, list)
	}
	forever, err := srv.run(t, "token", "create", "--ttl", "0")
	if err != nil {
		t.Fatal(err)
	}
	list, err = srv.run(t, "token", "list")
	if err != nil || !strings.Contains(list, strings.TrimSpace(forever)+"   <forever>   <never>") {
		t.Errorf("token list with a token that never expires: %v\n%s", err, list)
	}
	if _, err := srv.run(t, "token", "delete", "zzzzzz"); err == nil || cli.FormatError(err) != `error: bootstrap token "zzzzzz" not found; see "everynode token list"` {
		t.Errorf("delete an unknown token: %v", err)
	}
	if err := joinOnce(t, srv, "w-boot", t.TempDir(), map[string]string{cli.TokenEnv: boot}); err != nil {
		t.Fatalf("join with a bootstrap token: %s", cli.FormatError(err))
	}
	if _, err := srv.run(t, "token", "delete", boot); err != nil {
		t.Fatal(err)
	}
	if err := joinOnce(t, srv, "w-boot2", t.TempDir(), map[string]string{cli.TokenEnv: boot}); err == nil ||
		!strings.Contains(err.Error(), "invalid join token") {
		t.Fatalf("join with a deleted bootstrap token: %v", err)
	}

	// Rotation: the old token admits no one new; the joined agent restarts
	// with its saved credentials; the new token admits.
	old := srv.joinToken(t)
	rotated, err := srv.run(t, "token", "rotate")
	if err != nil {
		t.Fatal(err)
	}
	rotated = strings.TrimSpace(rotated)
	if rotated == old || srv.joinToken(t) != rotated {
		t.Fatalf("rotate printed %q; join-token file %q; old %q", rotated, srv.joinToken(t), old)
	}
	if err := joinOnce(t, srv, "w-new", t.TempDir(), map[string]string{cli.TokenEnv: old}); err == nil ||
		!strings.Contains(err.Error(), "invalid join token") {
		t.Fatalf("join with the old token: %v", err)
	}
	a := startAgent(t, srv, "w-id", dirA, "--token", old) // the later --token wins
	waitNodeReady(t, admin, "w-id", corev1.ConditionTrue, joinWait)
	a.stop(t)
	for _, want := range []string{"the join token was given with --token", "the server refused the join token (rotated since this node joined?)"} {
		if !strings.Contains(a.log.String(), want) {
			t.Errorf("the agent's log lacks %q:\n%s", want, a.log.String())
		}
	}
	if err := joinOnce(t, srv, "w-new", t.TempDir(), map[string]string{cli.TokenEnv: rotated}); err != nil {
		t.Fatalf("join with the rotated token: %s", cli.FormatError(err))
	}

	// The admin frees the name: the other machine may take it.
	if _, err := srv.run(t, "delete", "node", "w-id"); err != nil {
		t.Fatal(err)
	}
	if _, err := getNode(ctx, admin, "w-id"); !apierrors.IsNotFound(err) {
		t.Fatalf("node w-id after delete: %v", err)
	}
	if err := joinOnce(t, srv, "w-id", dirB, map[string]string{cli.TokenEnv: rotated}); err != nil {
		t.Fatalf("join after the name was freed: %s", cli.FormatError(err))
	}
}
