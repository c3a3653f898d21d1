package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/server"
)

// TestSecretsRotateKeyAndAudit runs "everynode server --audit-log" and
// "everynode secrets rotate-key" as a user does: the Secret reads back after
// the rotation, the key file holds only the new key, the audit log records
// the create and the rotation (and not the Secret's data), and no etcd file
// holds the data.
func TestSecretsRotateKeyAndAudit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	ctx := context.Background()
	dataDir := t.TempDir()
	auditPath := filepath.Join(t.TempDir(), "audit.log")
	srv := startServerArgs(t, dataDir, "--listen", "127.0.0.1:0", "--no-agent", "--gossip", "127.0.0.1:0",
		"--gossip-profile", "local", "--log-level", "warn", "--audit-log", auditPath, "--audit-log-maxsize", "1")
	admin := srv.client(t, "")
	const plain = "cli-rotate-s3cret"
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db"}, Data: map[string][]byte{"password": []byte(plain)}}
	if _, err := admin.Create(ctx, sec, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	out := srv.mustRun(t, "secrets", "rotate-key")
	if !strings.Contains(out, `Secrets are encrypted under key "key2"`) || !strings.Contains(out, "retired key1") {
		t.Fatalf("rotate-key printed %q", out)
	}
	var keys struct{ Keys []struct{ Name string } }
	b, err := os.ReadFile(filepath.Join(dataDir, server.EncryptionKeyFile))
	if err != nil || json.Unmarshal(b, &keys) != nil || len(keys.Keys) != 1 || keys.Keys[0].Name != "key2" {
		t.Fatalf("key file after rotation: %s %v", b, err)
	}
	got, err := admin.Get(ctx, resources.Secrets, "default", "db")
	if err != nil || string(got.(*corev1.Secret).Data["password"]) != plain {
		t.Fatalf("Secret after rotation: %v %v", got, err)
	}
	srv.stop(t)

	leaks := [][]byte{[]byte(plain), []byte(base64.StdEncoding.EncodeToString([]byte(plain)))}
	audit, err := os.ReadFile(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	var sawCreate, sawRotate bool
	for _, line := range bytes.Split(bytes.TrimSpace(audit), []byte("\n")) {
		var ev struct {
			RequestURI string `json:"requestURI"`
			Verb       string `json:"verb"`
			ObjectRef  *struct{ Resource, Name string }
			Status     struct{ Code int } `json:"responseStatus"`
		}
		if err := json.Unmarshal(line, &ev); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		sawCreate = sawCreate || ev.Verb == "create" && ev.ObjectRef != nil && ev.ObjectRef.Resource == "secrets" && ev.ObjectRef.Name == "db" && ev.Status.Code == 201
		sawRotate = sawRotate || ev.RequestURI == client.RotateEncryptionKeyPath && ev.Verb == "post" && ev.Status.Code == 200
	}
	if !sawCreate || !sawRotate {
		t.Fatalf("audit log lacks the create (%v) or the rotation (%v):\n%s", sawCreate, sawRotate, audit)
	}
	for _, l := range leaks {
		if bytes.Contains(audit, l) {
			t.Fatal("the audit log holds the Secret's data")
		}
	}
	if err := filepath.WalkDir(filepath.Join(dataDir, "etcd"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, l := range leaks {
			if bytes.Contains(b, l) {
				t.Errorf("%s holds the Secret's data", p)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
