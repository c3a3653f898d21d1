package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/client"
)

// CredentialsFile is where an agent keeps what the join gave it.
const CredentialsFile = "credentials.json"

// NodePasswordFile holds the node's own secret (mode 0600): made on its
// first join, presented at every join; the cluster keeps only its hash
// and refuses a join under the same name without it (docs/security.md §4).
const NodePasswordFile = "node-password"

// LoadOrCreateNodePassword reads dir's node password, making it (32 random
// bytes, hex) when there is none.
func LoadOrCreateNodePassword(dir string) (string, error) {
	path := filepath.Join(dir, NodePasswordFile)
	b, err := os.ReadFile(path)
	if err == nil {
		p := strings.TrimSpace(string(b))
		if len(p) < 32 {
			return "", fmt.Errorf("%s is not a node password (want at least 32 characters); restore it, or remove it and have an admin delete the node before joining again", path)
		}
		return p, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read node password: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create data dir: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	p := hex.EncodeToString(raw)
	// O_EXCL: two agents starting on one data dir keep the first's.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return LoadOrCreateNodePassword(dir)
	}
	if err != nil {
		return "", fmt.Errorf("write node password: %w", err)
	}
	if _, err := f.WriteString(p + "\n"); err != nil {
		f.Close()
		return "", fmt.Errorf("write node password: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", fmt.Errorf("write node password: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("write node password: %w", err)
	}
	return p, nil
}

// joinTimeout bounds the CA fetch and the join request.
const joinTimeout = 15 * time.Second

// credentials are an agent's node credential and what it needs to reach the
// cluster, kept in DATA_DIR/credentials.json (mode 0600) and reused when
// the agent restarts, also while the server is unreachable.
type credentials struct {
	// Server is the API URL the agent was given (--server).
	Server string `json:"server"`
	// CAHash is the join token's pinned CA hash; a different token means a
	// different cluster, and the saved credentials are not used.
	CAHash string `json:"caHash"`
	// NodeName is the node the token was issued for.
	NodeName string `json:"nodeName"`
	// NodeToken is the node's bearer token.
	NodeToken string `json:"nodeToken"`
	// CAPEM is the server's CA, verified against CAHash.
	CAPEM string `json:"caPEM"`
	// GossipKey is the gossip encryption key (base64 in JSON).
	GossipKey []byte `json:"gossipKey"`
	// GossipSeeds are the servers' gossip addresses from the last join.
	GossipSeeds []string `json:"gossipSeeds"`
	// APIServer is the URL the server reported for itself.
	APIServer string `json:"apiServer,omitempty"`

	// kept is set when the server refused the join token (rotated since)
	// and these saved credentials, still valid, are used instead.
	kept bool
}

func loadCredentials(dir string) (*credentials, error) {
	b, err := os.ReadFile(filepath.Join(dir, CredentialsFile))
	if err != nil {
		return nil, err
	}
	var c credentials
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("read %s: %w", filepath.Join(dir, CredentialsFile), err)
	}
	return &c, nil
}

func (c *credentials) save(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(dir, CredentialsFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// JoinRefusedError is a join the server answered with a refusal: never
// retried, and replaced by saved credentials only when the token alone was
// refused (Code 401: the join secret was rotated since this node joined,
// docs/security.md §4).
type JoinRefusedError struct {
	Msg  string
	Code int
}

func (e *JoinRefusedError) Error() string { return "join refused: " + e.Msg }

// ErrPinMismatch is a server whose CA is not the token's.
var ErrPinMismatch = errors.New("the server's CA does not match the join token (wrong server, or a token of another cluster); nothing was sent")

// obtainCredentials joins the cluster at server with token for node, or,
// when the server cannot be reached, returns the credentials saved by an
// earlier join of the same node to the same cluster (offline start). The
// second result is true for an offline start.
func obtainCredentials(ctx context.Context, server, token, node, dataDir string) (*credentials, bool, error) {
	caHash, secret, err := client.ParseJoinToken(token)
	if err != nil {
		return nil, false, fmt.Errorf("join refused: invalid join token: %w", err)
	}
	saved, _ := loadCredentials(dataDir)
	if saved != nil && (saved.Server != server || saved.CAHash != caHash || saved.NodeName != node) {
		saved = nil
	}
	offline := func(cause error) (*credentials, bool, error) {
		if saved == nil {
			return nil, false, &Error{Part: PartJoin, Err: fmt.Errorf("cannot reach the server at %s: %w", server, cause)}
		}
		return saved, true, nil
	}

	cctx, cancel := context.WithTimeout(ctx, joinTimeout)
	defer cancel()
	caPEM, err := client.FetchCA(cctx, server, caHash)
	if err != nil {
		if pinFailure(err) {
			return nil, false, ErrPinMismatch
		}
		return offline(err)
	}
	password, err := LoadOrCreateNodePassword(dataDir)
	if err != nil {
		return nil, false, &Error{Part: PartCredentials, Err: err}
	}
	resp, err := postJoin(cctx, server, caPEM, client.JoinRequest{NodeName: node, JoinSecret: secret, NodePassword: password})
	if err != nil {
		var refused *JoinRefusedError
		if errors.As(err, &refused) {
			if refused.Code == http.StatusUnauthorized && saved != nil {
				// The node credential does not depend on the join secret:
				// a rotation leaves joined nodes running.
				saved.kept = true
				return saved, false, nil
			}
			return nil, false, err
		}
		return offline(err)
	}
	key, err := base64.StdEncoding.DecodeString(resp.GossipKey)
	if err != nil || len(key) != 32 {
		return nil, false, fmt.Errorf("join: the server sent an invalid gossip key")
	}
	creds := &credentials{
		Server: server, CAHash: caHash, NodeName: node, NodeToken: resp.NodeToken, CAPEM: string(caPEM),
		GossipKey: key, GossipSeeds: resp.GossipSeeds, APIServer: resp.APIServer,
	}
	if err := creds.save(dataDir); err != nil {
		return nil, false, &Error{Part: PartCredentials, Err: err}
	}
	return creds, false, nil
}

// pinFailure tells a CA that does not match the token (or a certificate
// that does not verify against it) from a server that cannot be reached.
func pinFailure(err error) bool {
	var ue x509.UnknownAuthorityError
	var he x509.HostnameError
	var ce x509.CertificateInvalidError
	if errors.As(err, &ue) || errors.As(err, &he) || errors.As(err, &ce) {
		return true
	}
	return strings.Contains(err.Error(), "pinned by the join token")
}

// postJoin sends the join request over TLS verified by caPEM.
func postJoin(ctx context.Context, server string, caPEM []byte, in client.JoinRequest) (*client.JoinResponse, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("join: the server's CA is not PEM")
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, Proxy: nil}}
	defer hc.CloseIdleConnections()
	body, _ := json.Marshal(in)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(server, "/")+client.JoinPath, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	res, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		var st metav1.Status
		msg := strings.TrimSpace(string(b))
		if json.Unmarshal(b, &st) == nil && st.Message != "" {
			msg = st.Message
		}
		if res.StatusCode == http.StatusUnauthorized || res.StatusCode == http.StatusUnprocessableEntity ||
			res.StatusCode == http.StatusForbidden || res.StatusCode == http.StatusNotFound {
			return nil, &JoinRefusedError{Msg: msg, Code: res.StatusCode}
		}
		return nil, fmt.Errorf("join: server answered %d: %s", res.StatusCode, msg)
	}
	var out client.JoinResponse
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("join: bad answer: %w", err)
	}
	return &out, nil
}
