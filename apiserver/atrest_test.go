package apiserver

import (
	"bytes"
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// TestRotateEncryptionKey: only the admin rotates the key Secrets are
// encrypted under; after the rotation every Secret is stored under the new
// key and still served.
func TestRotateEncryptionKey(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Config{DataDir: dir, CompactInterval: -1, Logger: testLogger(),
		EncryptionKeyFile: filepath.Join(dir, store.EncryptionKeyFile)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	e := newEnv(t, func(c *Config) {
		c.Store = st
		c.Authorizer = NewNodeRestriction(StoreGraph(st))
		c.Authenticator = tokens{adminToken: {Name: "admin", Groups: []string{mastersGroup}},
			n1Token: {Name: "system:node:n1", Groups: []string{nodesGroup}}}
	})
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db"}, StringData: map[string]string{"password": "p4ss-rotate"}}
	e.do(req{method: "POST", path: "/api/v1/namespaces/default/secrets", body: toJSON(t, sec)}).must(t, http.StatusCreated, nil)
	raw := func() []byte {
		resp, err := st.Client().Get(testCtx(t), "/registry/secrets/default/db")
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("raw get: %v", err)
		}
		return resp.Kvs[0].Value
	}
	before := raw()
	if !bytes.HasPrefix(before, []byte("k8s:enc:aesgcm:v1:key1:")) || bytes.Contains(before, []byte("p4ss")) {
		t.Fatalf("stored as %q", before)
	}
	for tok, want := range map[string]int{n1Token: http.StatusForbidden, "-": http.StatusUnauthorized} {
		if r := e.do(req{method: "POST", path: client.RotateEncryptionKeyPath, token: tok, body: `{}`}); r.code != want {
			t.Fatalf("rotation by %q: %d %s", tok, r.code, r.body)
		}
	}
	if !bytes.Equal(raw(), before) {
		t.Fatal("a refused rotation re-encrypted")
	}
	var out client.RotateEncryptionKeyResponse
	e.do(req{method: "POST", path: client.RotateEncryptionKeyPath, body: `{}`}).must(t, http.StatusOK, &out)
	if out.NewKey != "key2" || out.Reencrypted != 1 || len(out.RetiredKeys) != 1 || out.RetiredKeys[0] != "key1" {
		t.Fatalf("rotation answered %+v", out)
	}
	if after := raw(); !bytes.HasPrefix(after, []byte("k8s:enc:aesgcm:v1:key2:")) || bytes.Contains(after, []byte("p4ss")) {
		t.Fatalf("after rotation stored as %q", after)
	}
	got, err := e.s.store.st.Get(testCtx(t), resources.Secrets, "default", "db")
	if err != nil || string(got.(*corev1.Secret).Data["password"]) != "p4ss-rotate" {
		t.Fatalf("Get after rotation: %v %v", got, err)
	}
	var served corev1.Secret
	e.get("/api/v1/namespaces/default/secrets/db").must(t, http.StatusOK, &served)
	if string(served.Data["password"]) != "p4ss-rotate" {
		t.Fatalf("served %v", served.Data)
	}
}
