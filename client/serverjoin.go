package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Paths of the servers' own join (docs/ha.md). ServerJoinPath and
// ServerPromotePath are served without a bearer token: the server join
// token in the body is the credential. RemoveServerPath needs the admin.
const (
	ServerJoinPath    = "/everynode/v1/servers/join"
	ServerPromotePath = "/everynode/v1/servers/promote"
	RemoveServerPath  = "/everynode/v1/servers/remove"
)

// ServerJoinRequest is the body of POST ServerJoinPath and
// ServerPromotePath.
type ServerJoinRequest struct {
	// Name is the joining server's etcd member name.
	Name string `json:"name"`
	// PeerURL is its etcd peer URL, https://advertise-address:port.
	PeerURL string `json:"peerURL,omitempty"`
	// JoinToken is the whole join token of the cluster (the first server's
	// join-token file); agent-only tokens are refused.
	JoinToken string `json:"joinToken"`
}

// ServerJoinResponse is the answer to an accepted server join: the
// cluster's key material and the etcd cluster the server was added to as
// a learner.
type ServerJoinResponse struct {
	CACert []byte `json:"caCert"`
	CAKey  []byte `json:"caKey"`
	Secret []byte `json:"secret"`
	// EncryptionKeys is the cluster's encryption-keys.json (the keys
	// Secrets are encrypted with in etcd), when it has one.
	EncryptionKeys []byte `json:"encryptionKeys,omitempty"`
	// InitialCluster is name=peerURL,... of every member, the new one
	// included.
	InitialCluster string `json:"initialCluster"`
}

// RemoveServerRequest is the body of POST RemoveServerPath.
type RemoveServerRequest struct {
	Name string `json:"name"`
}

// PostPinned POSTs in as JSON to server+path, trusting only caPEM, and
// decodes a 200 answer into out; any other answer is returned as an error
// carrying the Status message.
func PostPinned(ctx context.Context, server string, caPEM []byte, path string, in, out any) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return errors.New("the server's CA is not PEM")
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, Proxy: nil}}
	defer hc.CloseIdleConnections()
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(server, "/")+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	res, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		var st metav1.Status
		if json.Unmarshal(b, &st) == nil && st.Message != "" {
			return &StatusError{Code: res.StatusCode, Message: st.Message}
		}
		return &StatusError{Code: res.StatusCode, Message: strings.TrimSpace(string(b))}
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decode the answer of %s: %w", path, err)
	}
	return nil
}

// StatusError is a refusal from PostPinned.
type StatusError struct {
	Code    int
	Message string
}

func (e *StatusError) Error() string { return e.Message }
