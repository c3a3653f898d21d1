package client

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// ParseJoinToken splits a join token "K10<ca hash>::join:<secret>" into the
// hex SHA-256 of the CA certificate (DER) and the join secret.
func ParseJoinToken(s string) (caHash, secret string, err error) {
	s = strings.TrimSpace(s)
	rest, ok := strings.CutPrefix(s, "K10")
	if !ok {
		return "", "", errors.New("join token must start with K10 (copy it from the server's data dir, file join-token)")
	}
	caHash, cred, ok := strings.Cut(rest, "::")
	if !ok {
		return "", "", errors.New("join token has no \"::\" after the CA hash")
	}
	if len(caHash) != sha256.Size*2 {
		return "", "", fmt.Errorf("join token CA hash has %d characters, want %d", len(caHash), sha256.Size*2)
	}
	if _, err := hex.DecodeString(caHash); err != nil {
		return "", "", errors.New("join token CA hash is not hex")
	}
	secret, ok = strings.CutPrefix(cred, "join:")
	if !ok || secret == "" {
		return "", "", errors.New("join token has no \"join:<secret>\" part")
	}
	return strings.ToLower(caHash), secret, nil
}

// VerifyCA checks that the first certificate in caPEM is a CA whose DER
// SHA-256 equals caHash (from ParseJoinToken).
func VerifyCA(caHash string, caPEM []byte) error {
	block, _ := pem.Decode(caPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return errors.New("CA data holds no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return fmt.Errorf("parse CA certificate: %w", err)
	}
	if !cert.IsCA {
		return errors.New("certificate is not a CA")
	}
	if !hashMatches(caHash, cert.Raw) {
		return errors.New("CA certificate does not match the join token's hash (wrong server, or the server's CA was replaced)")
	}
	return nil
}

func hashMatches(caHash string, der []byte) bool {
	sum := sha256.Sum256(der)
	return subtle.ConstantTimeCompare([]byte(hex.EncodeToString(sum[:])), []byte(strings.ToLower(caHash))) == 1
}

// FetchCA connects to server (an https URL) and returns, PEM-encoded, the CA
// certificate the server presents in its chain, after checking that its hash
// equals caHash and that it signed the server's certificate for that host.
// This is how an agent holding only a join token comes to trust the server.
func FetchCA(ctx context.Context, server, caHash string) ([]byte, error) {
	u, err := url.Parse(server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("server %q must be an https URL", server)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "443")
	}
	var ca *x509.Certificate
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // verified below against the pinned hash
		VerifyConnection: func(cs tls.ConnectionState) error {
			for _, c := range cs.PeerCertificates {
				if c.IsCA && hashMatches(caHash, c.Raw) {
					ca = c
				}
			}
			if ca == nil || len(cs.PeerCertificates) == 0 {
				return errors.New("server did not present the CA pinned by the join token")
			}
			pool := x509.NewCertPool()
			pool.AddCert(ca)
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{DNSName: u.Hostname(), Roots: pool})
			return err
		},
	}
	d := tls.Dialer{Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, fmt.Errorf("fetch CA from %s: %w", host, err)
	}
	conn.Close()
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}), nil
}

// JoinPath is where agents exchange the cluster's join secret for their
// node credential. It is served without a bearer token: the secret is the
// credential.
const JoinPath = "/everynode/v1/join"

// JoinRequest is the body of POST JoinPath.
type JoinRequest struct {
	NodeName   string `json:"nodeName"`
	JoinSecret string `json:"joinSecret"`
	// NodePassword is the joining machine's own secret, made on its first
	// join and kept in its data dir: a later join under the same name must
	// present it (docs/security.md §4).
	NodePassword string `json:"nodePassword,omitempty"`
}

// RotateJoinTokenPath is where an admin rotates the cluster's join secret
// (POST, authenticated); the answer is a RotateJoinTokenResponse.
const RotateJoinTokenPath = "/everynode/v1/join-token/rotate"

// RotateJoinTokenResponse carries the new join token.
type RotateJoinTokenResponse struct {
	JoinToken string `json:"joinToken"`
}

// JoinResponse is the answer to an accepted join. Nothing is registered by
// the join itself: the agent registers its Node with NodeToken.
type JoinResponse struct {
	// NodeToken is the node's bearer token (user system:node:<name>, group system:nodes).
	NodeToken string `json:"nodeToken"`
	// GossipKey is the gossip encryption key, base64 (standard encoding).
	GossipKey string `json:"gossipKey"`
	// GossipSeeds are the servers' gossip addresses.
	GossipSeeds []string `json:"gossipSeeds"`
	// APIServer is the API URL as the server knows it.
	APIServer string `json:"apiServer"`
}
