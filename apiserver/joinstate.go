package apiserver

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"regexp"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// What the join endpoint remembers between joins (docs/security.md §4),
// kept in etcd next to the objects: node identities and a rotated join
// secret under keys of their own (never served by the API), bootstrap
// tokens as kubeadm keeps them, Secrets of type bootstrap.kubernetes.io/token
// in kube-system.
const (
	nodePasswordPrefix = "/everynode/node-passwords/"
	joinSecretKey      = "/everynode/join-secret"
)

// Bootstrap tokens, as kubeadm stores them (k8s.io/cluster-bootstrap).
const (
	BootstrapTokenSecretPrefix   = "bootstrap-token-"
	BootstrapTokenType           = corev1.SecretType("bootstrap.kubernetes.io/token")
	BootstrapTokenIDKey          = "token-id"
	BootstrapTokenSecretKey      = "token-secret"
	BootstrapTokenExpirationKey  = "expiration"
	BootstrapTokenDescriptionKey = "description"
	BootstrapTokenUsageAuthKey   = "usage-bootstrap-authentication"
	BootstrapTokenNamespace      = "kube-system"
)

// bootstrapTokenPattern is kubeadm's token format: <id>.<secret>.
var bootstrapTokenPattern = regexp.MustCompile(`^([a-z0-9]{6})\.([a-z0-9]{16})$`)

// ParseBootstrapToken splits a kubeadm bootstrap token "<id>.<secret>".
func ParseBootstrapToken(s string) (id, secret string, ok bool) {
	m := bootstrapTokenPattern.FindStringSubmatch(s)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

// JoinState is what joins read and write besides the cluster's key
// material. *StoreJoinState implements it on the cluster's store.
type JoinState interface {
	// ClaimNode records password as the node's on its first join and
	// reports whether password is the one recorded.
	ClaimNode(ctx context.Context, node, password string) (bool, error)
	// ForgetNode frees the node's name (its Node was deleted): the next
	// join under it records its own password.
	ForgetNode(ctx context.Context, node string) error
	// JoinSecret is the rotated join secret ("" while the cluster's
	// derived one is in force).
	JoinSecret(ctx context.Context) (string, error)
	// RotateJoinSecret makes and records a new join secret and returns it.
	RotateJoinSecret(ctx context.Context) (string, error)
	// BootstrapToken is the Secret of bootstrap token id, nil when missing.
	BootstrapToken(ctx context.Context, id string) (*corev1.Secret, error)
}

// StoreJoinState keeps the join state in st's etcd.
type StoreJoinState struct{ st *store.Store }

// NewStoreJoinState returns the JoinState of st.
func NewStoreJoinState(st *store.Store) *StoreJoinState { return &StoreJoinState{st: st} }

var _ JoinState = (*StoreJoinState)(nil)

// hashPassword is the stored form of a node password: a random 256-bit
// secret needs no slow hash.
func hashPassword(p string) string {
	sum := sha256.Sum256([]byte(p))
	return hex.EncodeToString(sum[:])
}

// ClaimNode implements JoinState.
func (j *StoreJoinState) ClaimNode(ctx context.Context, node, password string) (bool, error) {
	key := nodePasswordPrefix + node
	want := hashPassword(password)
	// Record it unless a password is recorded; then compare with that one.
	tx, err := j.st.Client().Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, want)).
		Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return false, fmt.Errorf("record node password of %s: %w", node, err)
	}
	if tx.Succeeded {
		return true, nil
	}
	kvs := tx.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return false, fmt.Errorf("record node password of %s: the record vanished meanwhile; retry", node)
	}
	return subtle.ConstantTimeCompare(kvs[0].Value, []byte(want)) == 1, nil
}

// ForgetNode implements JoinState.
func (j *StoreJoinState) ForgetNode(ctx context.Context, node string) error {
	_, err := j.st.Client().Delete(ctx, nodePasswordPrefix+node)
	return err
}

// JoinSecret implements JoinState.
func (j *StoreJoinState) JoinSecret(ctx context.Context) (string, error) {
	res, err := j.st.Client().Get(ctx, joinSecretKey)
	if err != nil {
		return "", fmt.Errorf("read the join secret: %w", err)
	}
	if len(res.Kvs) == 0 {
		return "", nil
	}
	return string(res.Kvs[0].Value), nil
}

// RotateJoinSecret implements JoinState.
func (j *StoreJoinState) RotateJoinSecret(ctx context.Context) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	secret := hex.EncodeToString(b)
	if _, err := j.st.Client().Put(ctx, joinSecretKey, secret); err != nil {
		return "", fmt.Errorf("record the join secret: %w", err)
	}
	return secret, nil
}

// BootstrapToken implements JoinState.
func (j *StoreJoinState) BootstrapToken(ctx context.Context, id string) (*corev1.Secret, error) {
	obj, err := j.st.Get(ctx, resources.Secrets, BootstrapTokenNamespace, BootstrapTokenSecretPrefix+id)
	if store.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return nil, fmt.Errorf("stored secret is a %T", obj)
	}
	return s, nil
}

// bootstrapTokenValid checks a bootstrap token's Secret as kube-apiserver's
// bootstrap authenticator does: its type, its secret (constant time), its
// authentication usage and its expiry.
func bootstrapTokenValid(s *corev1.Secret, id, secret string, now time.Time) bool {
	if s == nil || s.Type != BootstrapTokenType || s.DeletionTimestamp != nil {
		return false
	}
	get := func(k string) string {
		if v, ok := s.Data[k]; ok {
			return string(v)
		}
		return s.StringData[k]
	}
	if get(BootstrapTokenIDKey) != id || subtle.ConstantTimeCompare([]byte(get(BootstrapTokenSecretKey)), []byte(secret)) != 1 {
		return false
	}
	if get(BootstrapTokenUsageAuthKey) != "true" {
		return false
	}
	if exp := get(BootstrapTokenExpirationKey); exp != "" {
		t, err := time.Parse(time.RFC3339, exp)
		if err != nil || !now.Before(t) {
			return false
		}
	}
	return true
}
