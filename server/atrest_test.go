package server

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// TestServerSecretsAtRestAndAudit starts a whole server with --audit-log:
// a Secret written through the API is AES-GCM in etcd and its write is one
// audit line without its data; a server whose key file is corrupt does not
// start, says so in one line naming the file, and loses nothing: with the
// file restored the Secret reads back.
func TestServerSecretsAtRestAndAudit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	defer testkit.LeakCheck(t)()
	ctx := context.Background()
	cfg := localConfig(t)
	cfg.Agent = nil
	cfg.AuditLog = filepath.Join(t.TempDir(), "audit.log")
	s, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	kc, err := client.LoadKubeconfigFrom([]string{s.Kubeconfig()})
	if err != nil {
		t.Fatal(err)
	}
	h, err := client.NewHTTP(kc)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db"}, Data: map[string][]byte{"password": []byte("srv-s3cret")}}
	if _, err := h.Create(ctx, sec, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Etcd().Get(ctx, "/registry/secrets/default/db")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("raw get: %v", err)
	}
	raw := resp.Kvs[0].Value
	if !bytes.HasPrefix(raw, []byte("k8s:enc:aesgcm:v1:key1:")) || bytes.Contains(raw, []byte("srv-s3cret")) || bytes.Contains(raw, []byte("c3J2LXMzY3JldA")) {
		t.Fatalf("stored as %q", raw)
	}
	h.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	log, err := os.ReadFile(cfg.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(log, []byte(`"verb":"create"`)) || !bytes.Contains(log, []byte(`"resource":"secrets"`)) ||
		!bytes.Contains(log, []byte(`"name":"db"`)) || bytes.Contains(log, []byte("c3J2LXMzY3JldA")) || bytes.Contains(log, []byte("srv-s3cret")) {
		t.Fatalf("audit log:\n%s", log)
	}

	keyFile := filepath.Join(cfg.DataDir, store.EncryptionKeyFile)
	good, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s2, err := Start(ctx, cfg); err == nil {
		s2.Close()
		t.Fatal("a server with a corrupt key file started")
	} else if msg := err.Error(); !strings.Contains(msg, keyFile) || !strings.Contains(msg, "corrupt") || strings.Contains(msg, "\n") {
		t.Fatalf("start error %q: want one line naming %s", msg, keyFile)
	}
	if err := os.WriteFile(keyFile, good, 0o600); err != nil {
		t.Fatal(err)
	}
	s3, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start with the restored key file: %v", err)
	}
	defer s3.Close()
	kc3, err := client.LoadKubeconfigFrom([]string{s3.Kubeconfig()})
	if err != nil {
		t.Fatal(err)
	}
	h3, err := client.NewHTTP(kc3)
	if err != nil {
		t.Fatal(err)
	}
	defer h3.Close()
	got, err := h3.Get(ctx, resources.Secrets, "default", "db")
	if err != nil || string(got.(*corev1.Secret).Data["password"]) != "srv-s3cret" {
		t.Fatalf("Secret after restoring the key file: %v %v", got, err)
	}
	h3.Close()
	if err := s3.Close(); err != nil {
		t.Fatal(err)
	}
}
