package store

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/resources"
)

const atRestPlain = "hunter2-at-rest-plaintext"

// plaintextForms are the forms in which a Secret's value could leak: as is
// (stringData, a log), and base64 as Secret.data is stored in JSON.
var plaintextForms = [][]byte{[]byte(atRestPlain), []byte(base64.StdEncoding.EncodeToString([]byte(atRestPlain)))}

func leaks(b []byte) bool {
	for _, p := range plaintextForms {
		if bytes.Contains(b, p) {
			return true
		}
	}
	return false
}

func testSecret(name string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Data: map[string][]byte{"password": []byte(atRestPlain)}}
}

func rawGet(t *testing.T, s *Store, key string) []byte {
	t.Helper()
	resp, err := s.Client().Get(testCtx(t), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("raw get %s: %v (%d kvs)", key, err, len(resp.Kvs))
	}
	return resp.Kvs[0].Value
}

func openAtRestTest(t *testing.T, dir string) (*Store, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return Open(ctx, Config{DataDir: dir, CompactInterval: -1, Logger: testLogger(), unsafeNoFsync: true,
		EncryptionKeyFile: filepath.Join(dir, EncryptionKeyFile)})
}

// TestSecretsEncryptedAtRest attacks etcd directly: a Secret's raw value, and
// every file of etcd's data directory once closed, hold no trace of its data;
// the API path (store Get, List, Watch) still reads it.
func TestSecretsEncryptedAtRest(t *testing.T) {
	dir := t.TempDir()
	s, err := openAtRestTest(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, EncryptionKeyFile)
	fi, err := os.Stat(keyFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file %s: %v, mode %v; want 0600", keyFile, err, fi)
	}
	w, err := s.Watch(testCtx(t), resources.Secrets, "default", 0, Selector{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	mustCreate(t, s, resources.Secrets, testSecret("db"))
	if ev := next(t, w); string(ev.Object.(*corev1.Secret).Data["password"]) != atRestPlain {
		t.Fatalf("watch delivered %v", ev.Object)
	}
	if _, err := s.GuaranteedUpdate(testCtx(t), resources.Secrets, "default", "db", func(cur resources.Object) (resources.Object, error) {
		cur.(*corev1.Secret).Data["user"] = []byte("admin")
		return cur, nil
	}); err != nil {
		t.Fatal(err)
	}
	raw := rawGet(t, s, "/registry/secrets/default/db")
	if !bytes.HasPrefix(raw, []byte("k8s:enc:aesgcm:v1:key1:")) || leaks(raw) {
		t.Fatalf("raw etcd value is not AES-GCM under key1 or leaks the data: %q", raw)
	}
	// The value is bound to its key (authenticated data): moved under
	// another name it does not decrypt.
	if _, err := s.Client().Put(testCtx(t), "/registry/secrets/default/moved", string(raw)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(testCtx(t), resources.Secrets, "default", "moved"); err == nil {
		t.Fatal("a value moved to another key decrypted")
	}
	got, err := s.Get(testCtx(t), resources.Secrets, "default", "db")
	if err != nil || string(got.(*corev1.Secret).Data["password"]) != atRestPlain || string(got.(*corev1.Secret).Data["user"]) != "admin" {
		t.Fatalf("Get: %v %v", got, err)
	}
	list, _, err := s.List(testCtx(t), resources.Secrets, "default", Selector{})
	if err != nil || len(list) != 1 || string(list[0].(*corev1.Secret).Data["password"]) != atRestPlain {
		t.Fatalf("List: %v %v", list, err)
	}
	// Other kinds are not encrypted.
	mustCreate(t, s, resources.ConfigMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cm"}})
	if raw := rawGet(t, s, "/registry/configmaps/default/cm"); !bytes.HasPrefix(raw, []byte(protoMagic)) {
		t.Fatalf("ConfigMap stored as %q", raw)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// A stolen etcd (its whole data directory, WAL and snapshots included)
	// without the key file reveals nothing.
	n := 0
	if err := filepath.WalkDir(filepath.Join(dir, "etcd"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		n++
		if leaks(b) {
			t.Errorf("%s holds the Secret's data in plaintext", p)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no etcd file scanned")
	}
}

// TestSecretsAtRestPlaintextAndRotation: Secrets written before encryption
// stay readable; RotateEncryptionKey re-encrypts every Secret under a new key
// and retires the old ones; a reopened store reads them all.
func TestSecretsAtRestPlaintextAndRotation(t *testing.T) {
	dir := t.TempDir()
	s, err := openAtRestTest(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, resources.Secrets, testSecret("new"))
	// A value stored before encryption was turned on: plain JSON.
	plain := `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"old","namespace":"default","uid":"u-old"},"data":{"password":"` +
		base64.StdEncoding.EncodeToString([]byte(atRestPlain)) + `"}}`
	if _, err := s.Client().Put(testCtx(t), "/registry/secrets/default/old", plain); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"old", "new"} {
		got, err := s.Get(testCtx(t), resources.Secrets, "default", name)
		if err != nil || string(got.(*corev1.Secret).Data["password"]) != atRestPlain {
			t.Fatalf("Get %s: %v %v", name, got, err)
		}
	}
	if err := waitListed(t, s, 2); err != nil {
		t.Fatal(err)
	}
	res, err := s.RotateEncryptionKey(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if res.NewKey != "key2" || len(res.OldKeys) != 1 || res.OldKeys[0] != "key1" || res.Secrets != 2 {
		t.Fatalf("rotation: %+v", res)
	}
	for _, name := range []string{"old", "new"} {
		if raw := rawGet(t, s, "/registry/secrets/default/"+name); !bytes.HasPrefix(raw, []byte("k8s:enc:aesgcm:v1:key2:")) || leaks(raw) {
			t.Fatalf("%s after rotation: %q", name, raw)
		}
	}
	k, _, err := readKeyFile(filepath.Join(dir, EncryptionKeyFile))
	if err != nil || len(k.Keys) != 1 || k.Keys[0].Name != "key2" {
		t.Fatalf("key file after rotation: %+v %v", k, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := openAtRestTest(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	for _, name := range []string{"old", "new"} {
		got, err := s2.Get(testCtx(t), resources.Secrets, "default", name)
		if err != nil || string(got.(*corev1.Secret).Data["password"]) != atRestPlain {
			t.Fatalf("Get %s after reopening: %v %v", name, got, err)
		}
	}
}

func waitListed(t *testing.T, s *Store, n int) error {
	list, _, err := s.List(testCtx(t), resources.Secrets, "", Selector{})
	if err != nil {
		return err
	}
	if len(list) != n {
		return errors.New("cache does not hold every Secret")
	}
	return nil
}

// TestSecretsKeyFileLostOrCorrupt: a server whose key file is missing (while
// etcd holds encrypted Secrets) or corrupt refuses to start with one line
// naming the file and the fix, and changes nothing: restoring the file
// brings every Secret back.
func TestSecretsKeyFileLostOrCorrupt(t *testing.T) {
	dir := t.TempDir()
	s, err := openAtRestTest(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, resources.Secrets, testSecret("db"))
	before := rawGet(t, s, "/registry/secrets/default/db")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, EncryptionKeyFile)
	good, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want string
		damage     func() error
	}{
		{"missing", "is missing but etcd holds Secrets encrypted", func() error { return os.Remove(keyFile) }},
		{"truncated", "is corrupt", func() error { return os.WriteFile(keyFile, good[:len(good)/2], 0o600) }},
		{"another key", "does not hold the key this cluster's Secrets are encrypted under", func() error {
			key, err := newEncryptionKey(nil) // also named key1: as a server started without the shared file makes
			if err != nil {
				return err
			}
			return writeKeyFile(keyFile, &EncryptionKeys{Keys: []EncryptionKey{key}})
		}},
		{"short key", "is corrupt", func() error {
			return os.WriteFile(keyFile, []byte(`{"keys":[{"name":"key1","secret":"c2hvcnQ="}]}`), 0o600)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.damage(); err != nil {
				t.Fatal(err)
			}
			damaged, _ := os.ReadFile(keyFile)
			_, err := openAtRestTest(t, dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), keyFile) ||
				!strings.Contains(err.Error(), "restore") || strings.Contains(err.Error(), "\n") {
				t.Fatalf("Open = %v; want one line naming %s, %q and the fix", err, keyFile, tc.want)
			}
			if now, _ := os.ReadFile(keyFile); !bytes.Equal(now, damaged) {
				t.Fatal("Open changed the damaged key file")
			}
			if err := os.WriteFile(keyFile, good, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := openAtRestTest(t, dir)
			if err != nil {
				t.Fatalf("Open with the restored file: %v", err)
			}
			defer s.Close()
			if raw := rawGet(t, s, "/registry/secrets/default/db"); !bytes.Equal(raw, before) {
				t.Fatal("the stored value changed")
			}
			got, err := s.Get(testCtx(t), resources.Secrets, "default", "db")
			if err != nil || string(got.(*corev1.Secret).Data["password"]) != atRestPlain {
				t.Fatalf("Get after restoring: %v %v", got, err)
			}
		})
	}
	// A key file left open to other users is restricted at start.
	if err := os.Chmod(keyFile, 0o644); err != nil {
		t.Fatal(err)
	}
	s2, err := openAtRestTest(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode after start: %v %v", fi.Mode(), err)
	}
	// A different key file (another cluster's, a fresh one) reads nothing.
	other := t.TempDir()
	key, _ := newEncryptionKey(nil)
	if err := writeKeyFile(filepath.Join(other, "k"), &EncryptionKeys{Keys: []EncryptionKey{key}}); err != nil {
		t.Fatal(err)
	}
	_, tr, err := readKeyFile(filepath.Join(other, "k"))
	if err != nil {
		t.Fatal(err)
	}
	a := &atRest{path: "other"}
	a.t.Store(&tr)
	if out, _, err := a.fromStorage(resources.Secrets, "/registry/secrets/default/db", before); err == nil || leaks(out) {
		t.Fatalf("another key decrypted the value: %q %v", out, err)
	}
}

// TestSecretsKeyFileMissingNoSecrets: even before any Secret exists, a
// server that lost its key file (or a second server started without the
// shared one) does not make a key of its own that its peers cannot read.
func TestSecretsKeyFileMissingNoSecrets(t *testing.T) {
	dir := t.TempDir()
	s, err := openAtRestTest(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, EncryptionKeyFile)
	good, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	if _, err := openAtRestTest(t, dir); err == nil || !strings.Contains(err.Error(), "is missing but etcd holds") {
		t.Fatalf("Open without the key file: %v", err)
	}
	if _, err := os.Stat(keyFile); !os.IsNotExist(err) {
		t.Fatalf("a refused Open made a key file: %v", err)
	}
	if err := os.WriteFile(keyFile, good, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = openAtRestTest(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}
