package store

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apiserver/pkg/storage/value"
	aestransformer "k8s.io/apiserver/pkg/storage/value/encrypt/aes"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"

	"github.com/everynode/everynode/resources"
)

// EncryptionKeyFile is the name of the file, in a server's data dir, holding
// the keys Secrets are encrypted under in etcd.
const EncryptionKeyFile = "encryption-keys.json"

// encPrefix is kube-apiserver's on-disk prefix of an AES-GCM value; the key's
// name and a colon follow it.
const encPrefix = "k8s:enc:aesgcm:v1:"

// EncryptionKey is one AES key of the key file.
type EncryptionKey struct {
	// Name identifies the key in every value encrypted under it
	// ("k8s:enc:aesgcm:v1:<name>:").
	Name string `json:"name"`
	// Secret is the key, base64: 32 bytes (AES-256).
	Secret string `json:"secret"`
}

// EncryptionKeys is the key file's content, as the aesgcm provider's keys of
// kube-apiserver's EncryptionConfiguration: the first key encrypts every
// write; all of them decrypt. Values written before encryption (plaintext)
// stay readable.
type EncryptionKeys struct {
	Keys []EncryptionKey `json:"keys"`
}

var keyNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// transformer builds kube-apiserver's prefix transformer over the keys, with
// the plaintext reader last.
func (k *EncryptionKeys) transformer() (value.Transformer, error) {
	if len(k.Keys) == 0 {
		return nil, errors.New("it holds no key")
	}
	var pts []value.PrefixTransformer
	seen := map[string]bool{}
	for _, key := range k.Keys {
		if !keyNameRE.MatchString(key.Name) || seen[key.Name] {
			return nil, fmt.Errorf("key name %q is empty, repeated or not [a-z0-9-]", key.Name)
		}
		seen[key.Name] = true
		raw, err := base64.StdEncoding.DecodeString(key.Secret)
		if err != nil || len(raw) != 32 {
			return nil, fmt.Errorf("key %q is not 32 bytes of base64", key.Name)
		}
		block, err := aes.NewCipher(raw)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", key.Name, err)
		}
		t, err := aestransformer.NewGCMTransformer(block)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", key.Name, err)
		}
		pts = append(pts, value.PrefixTransformer{Prefix: []byte(encPrefix + key.Name + ":"), Transformer: t})
	}
	// Plaintext values (written before encryption) are read as they are;
	// the identity reader refuses anything with the k8s:enc: prefix, so an
	// encrypted value under a key not in the file is an error, never garbage.
	pts = append(pts, value.PrefixTransformer{Prefix: []byte{}, Transformer: identity.NewEncryptCheckTransformer()})
	return value.NewPrefixTransformers(errors.New("no key of the key file decrypts it"), pts...), nil
}

// newEncryptionKey returns a fresh random key named after its position.
func newEncryptionKey(existing []EncryptionKey) (EncryptionKey, error) {
	n := 1
	for _, k := range existing {
		if i, err := strconv.Atoi(strings.TrimPrefix(k.Name, "key")); err == nil && i >= n {
			n = i + 1
		}
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return EncryptionKey{}, fmt.Errorf("generate a key: %w", err)
	}
	return EncryptionKey{Name: "key" + strconv.Itoa(n), Secret: base64.StdEncoding.EncodeToString(raw)}, nil
}

// readKeyFile reads and checks a key file.
func readKeyFile(path string) (*EncryptionKeys, value.Transformer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var k EncryptionKeys
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&k); err != nil {
		return nil, nil, fmt.Errorf("secrets encryption key file %s is corrupt (%v): restore it from a backup or from another server; nothing was changed", path, err)
	}
	t, err := k.transformer()
	if err != nil {
		return nil, nil, fmt.Errorf("secrets encryption key file %s is corrupt (%v): restore it from a backup or from another server; nothing was changed", path, err)
	}
	return &k, t, nil
}

// writeKeyFile replaces path atomically with keys, mode 0600.
func writeKeyFile(path string, k *EncryptionKeys) error {
	data, err := json.MarshalIndent(k, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".encryption-keys-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// atRest encrypts and decrypts the stored values of Secrets. A nil *atRest
// (or one without a transformer) stores every value in plaintext.
type atRest struct {
	path string
	t    atomic.Pointer[value.Transformer]
}

// encrypts reports whether r's values are transformed.
func (a *atRest) encrypts(r *resources.Resource) bool {
	return a != nil && r == resources.Secrets && a.t.Load() != nil
}

// toStorage returns the value stored for data under key.
func (a *atRest) toStorage(r *resources.Resource, key string, data []byte) ([]byte, error) {
	if !a.encrypts(r) {
		return data, nil
	}
	out, err := (*a.t.Load()).TransformToStorage(context.Background(), data, value.DefaultContext(key))
	if err != nil {
		return nil, fmt.Errorf("encrypt %s: %w", key, err)
	}
	return out, nil
}

// fromStorage returns the plain value stored under key, and whether it was
// not written under the current key (plaintext or an older key).
func (a *atRest) fromStorage(r *resources.Resource, key string, stored []byte) ([]byte, bool, error) {
	if !a.encrypts(r) {
		return stored, false, nil
	}
	out, stale, err := (*a.t.Load()).TransformFromStorage(context.Background(), stored, value.DefaultContext(key))
	if err != nil {
		name := ""
		if bytes.HasPrefix(stored, []byte(encPrefix)) {
			rest := stored[len(encPrefix):]
			if i := bytes.IndexByte(rest, ':'); i > 0 {
				name = string(rest[:i])
			}
		}
		return nil, false, fmt.Errorf("decrypt %s (key %q): %w; is %s the server's key file?", key, name, err, a.path)
	}
	return out, stale, nil
}

// decode decrypts and decodes a stored value.
func (a *atRest) decode(r *resources.Resource, key []byte, stored []byte, rev int64) (resources.Object, error) {
	data, _, err := a.fromStorage(r, string(key), stored)
	if err != nil {
		return nil, err
	}
	return decode(r, data, rev)
}

// openAtRest loads the key file at path. A missing file is created with a new
// key, unless etcd already holds encrypted Secrets: then the key is lost and
// the server must not start (starting would make them unreadable to it; the
// values stay in etcd until the file is restored).
func openAtRest(ctx context.Context, client *clientv3.Client, path string, lg *slog.Logger) (*atRest, error) {
	a := &atRest{path: path}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(path, 0o600); err != nil {
			return nil, fmt.Errorf("secrets encryption key file %s is readable by other users and cannot be restricted: %w", path, err)
		}
		lg.Warn("secrets encryption key file was open to other users; restricted it to its owner", "file", path, "mode", fi.Mode().Perm(), "now", "0600")
	}
	_, t, err := readKeyFile(path)
	if errors.Is(err, os.ErrNotExist) {
		resp, gerr := client.Get(ctx, prefixOf(resources.Secrets), clientv3.WithPrefix())
		if gerr != nil {
			return nil, fmt.Errorf("check for encrypted Secrets: %w", gerr)
		}
		canary, gerr := client.Get(ctx, canaryKey)
		if gerr != nil {
			return nil, fmt.Errorf("check for encrypted Secrets: %w", gerr)
		}
		for _, kv := range append(resp.Kvs, canary.Kvs...) {
			if bytes.HasPrefix(kv.Value, []byte("k8s:enc:")) {
				return nil, fmt.Errorf("secrets encryption key file %s is missing but etcd holds Secrets encrypted under it (%s): restore the file from a backup or from another server; nothing was changed", path, kv.Key)
			}
		}
		key, kerr := newEncryptionKey(nil)
		if kerr != nil {
			return nil, kerr
		}
		k := &EncryptionKeys{Keys: []EncryptionKey{key}}
		if err := writeKeyFile(path, k); err != nil {
			return nil, err
		}
		t, err = k.transformer()
	}
	if err != nil {
		return nil, err
	}
	a.t.Store(&t)
	if err := a.checkCanary(ctx, client); err != nil {
		return nil, err
	}
	return a, nil
}

// canaryKey holds a constant encrypted under the current key. A server whose
// key file cannot decrypt it (another cluster's file, a fresh key made by a
// server started without the shared file) refuses to start instead of
// writing Secrets its peers cannot read.
const (
	canaryKey   = "/everynode/secrets-encryption-canary"
	canaryPlain = "everynode secrets encryption canary"
)

// checkCanary decrypts the canary, or writes it when there is none.
func (a *atRest) checkCanary(ctx context.Context, client *clientv3.Client) error {
	for {
		resp, err := client.Get(ctx, canaryKey)
		if err != nil {
			return fmt.Errorf("read the encryption canary: %w", err)
		}
		if len(resp.Kvs) == 1 {
			out, _, err := a.fromStorage(resources.Secrets, canaryKey, resp.Kvs[0].Value)
			if err != nil || string(out) != canaryPlain {
				return fmt.Errorf("secrets encryption key file %s does not hold the key this cluster's Secrets are encrypted under: copy encryption-keys.json from a server of this cluster (or restore it from a backup); nothing was changed", a.path)
			}
			return nil
		}
		if err := a.writeCanary(ctx, client, true); err != nil {
			if errors.Is(err, errCanaryExists) {
				continue // another server wrote it first: check it
			}
			return err
		}
		return nil
	}
}

var errCanaryExists = errors.New("canary exists")

// writeCanary stores the canary under the current key (only if absent when
// create is set).
func (a *atRest) writeCanary(ctx context.Context, client *clientv3.Client, create bool) error {
	enc, err := a.toStorage(resources.Secrets, canaryKey, []byte(canaryPlain))
	if err != nil {
		return err
	}
	if !create {
		if _, err := client.Put(ctx, canaryKey, string(enc)); err != nil {
			return fmt.Errorf("write the encryption canary: %w", err)
		}
		return nil
	}
	tx, err := client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(canaryKey), "=", 0)).
		Then(clientv3.OpPut(canaryKey, string(enc))).Commit()
	if err != nil {
		return fmt.Errorf("write the encryption canary: %w", err)
	}
	if !tx.Succeeded {
		return errCanaryExists
	}
	return nil
}

// RotateResult is what RotateEncryptionKey did.
type RotateResult struct {
	// NewKey and OldKeys name the key now in use and the keys retired.
	NewKey  string
	OldKeys []string
	// Secrets is the number of Secrets re-encrypted.
	Secrets int
}

// RotateEncryptionKey adds a new key to the key file and makes it the write
// key, re-encrypts every Secret under it, then removes the old keys from the
// file. At every step the file holds a key for every stored value: a crash
// leaves the new key first and the old ones still able to read, and running
// it again finishes. It fails if the store has no key file
// (Config.EncryptionKeyFile empty).
func (s *Store) RotateEncryptionKey(ctx context.Context) (*RotateResult, error) {
	a := s.atRest
	if a == nil || a.path == "" {
		return nil, errors.New("store: Secrets are not encrypted by this store (no key file)")
	}
	s.rotateMu.Lock()
	defer s.rotateMu.Unlock()
	k, _, err := readKeyFile(a.path)
	if err != nil {
		return nil, err
	}
	key, err := newEncryptionKey(k.Keys)
	if err != nil {
		return nil, err
	}
	res := &RotateResult{NewKey: key.Name}
	for _, old := range k.Keys {
		res.OldKeys = append(res.OldKeys, old.Name)
	}
	// 1. The new key first, the old ones still readable.
	k.Keys = append([]EncryptionKey{key}, k.Keys...)
	t, err := k.transformer()
	if err != nil {
		return nil, err
	}
	if err := writeKeyFile(a.path, k); err != nil {
		return nil, err
	}
	a.t.Store(&t)
	if err := a.writeCanary(ctx, s.client, false); err != nil {
		return nil, err
	}
	// 2. Every Secret rewritten under it. A write that encrypted under the
	// old key just before the switch may commit after a pass has listed:
	// passes repeat until one finds nothing left to rewrite.
	for pass := 0; ; pass++ {
		n, err := s.reencryptSecrets(ctx)
		if err != nil {
			return nil, fmt.Errorf("store: re-encrypt Secrets under %s (the key file keeps the old keys; run the rotation again): %w", key.Name, err)
		}
		res.Secrets += n
		if n == 0 {
			break
		}
		if pass == 10 {
			return nil, fmt.Errorf("store: Secrets under old keys keep appearing after %d passes (the key file keeps the old keys; run the rotation again)", pass+1)
		}
	}
	// 3. The old keys retired.
	k.Keys = k.Keys[:1]
	only, err := k.transformer()
	if err != nil {
		return nil, err
	}
	if err := writeKeyFile(a.path, k); err != nil {
		return nil, err
	}
	a.t.Store(&only)
	return res, nil
}

// reencryptSecrets rewrites every Secret not stored under the current key,
// each with a compare-and-swap on its revision (a concurrent write is already
// under the new key, so a lost swap is re-read and checked again).
func (s *Store) reencryptSecrets(ctx context.Context) (int, error) {
	r := resources.Secrets
	resp, err := s.client.Get(ctx, prefixOf(r), clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	n := 0
	for _, kv := range resp.Kvs {
		key, stored, rev := string(kv.Key), kv.Value, kv.ModRevision
		for {
			plain, stale, err := s.atRest.fromStorage(r, key, stored)
			if err != nil {
				return n, err
			}
			if !stale {
				break
			}
			enc, err := s.atRest.toStorage(r, key, plain)
			if err != nil {
				return n, err
			}
			tx, err := s.client.Txn(ctx).
				If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
				Then(clientv3.OpPut(key, string(enc))).
				Else(clientv3.OpGet(key)).
				Commit()
			if err != nil {
				return n, err
			}
			if tx.Succeeded {
				s.noteWritten(r, tx.Header.Revision)
				n++
				break
			}
			kvs := tx.Responses[0].GetResponseRange().GetKvs()
			if len(kvs) == 0 {
				break // deleted meanwhile
			}
			stored, rev = kvs[0].Value, kvs[0].ModRevision
		}
	}
	return n, nil
}
