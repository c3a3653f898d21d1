// Package pki holds an everynode cluster's secrets: the certificate authority,
// the server's serving certificate, the cluster secret and everything derived
// from it (admin token, join token, gossip key, per-node tokens).
//
// Lifecycle:
//  1. Load creates the files on a server's first start and reuses them on later
//     starts. An existing CA is never regenerated; the serving certificate is
//     reissued (from the same CA) only when it lacks a requested name or nears expiry.
//  2. The returned *Cluster is immutable and safe for concurrent use.
//
// Files in the data dir (keys and secrets are mode 0600):
//
//	ca.crt, ca.key           ECDSA P-256 CA, valid 10 years
//	server.crt, server.key   serving certificate signed by the CA, valid 1 year
//	cluster-secret           32 random bytes, hex
//	join-token               K10<sha256 of ca.crt DER>::join:<join secret>
//
// Every token is HMAC-SHA256(cluster secret, purpose), so nothing but the
// cluster secret needs storing, and all comparisons are constant-time.
package pki

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// File names inside the data dir.
const (
	CACertFile     = "ca.crt"
	CAKeyFile      = "ca.key"
	ServerCertFile = "server.crt"
	ServerKeyFile  = "server.key"
	SecretFile     = "cluster-secret"
	JoinTokenFile  = "join-token"
)

// Identities returned by AuthenticateToken.
const (
	AdminUser      = "admin"
	MastersGroup   = "system:masters"
	NodeUserPrefix = "system:node:"
	NodesGroup     = "system:nodes"
)

// Purposes fed to the HMAC; changing one invalidates every token derived from it.
const (
	purposeAdmin  = "everynode admin token"
	purposeJoin   = "everynode join secret"
	purposeGossip = "everynode gossip key"
	purposeNode   = "everynode node token:"
)

// Cluster is a cluster's loaded key material. It is immutable after Load.
type Cluster struct {
	caCert     *x509.Certificate
	caPEM      []byte
	serverCert tls.Certificate
	secret     []byte
	joinToken  string
}

// Load reads the cluster's key material from dir, creating whatever is missing
// on first start. extraSANs are additional DNS names or IP addresses for the
// serving certificate (localhost, 127.0.0.1, ::1 and the hostname are always
// included). A CA certificate without its key is an error, never a reason to
// make a new CA: agents have pinned the old one.
func Load(dir string, extraSANs ...string) (*Cluster, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki: create data dir: %w", err)
	}
	caCert, caKey, caPEM, err := loadOrCreateCA(dir)
	if err != nil {
		return nil, err
	}
	serverCert, err := loadOrCreateServerCert(dir, caCert, caKey, sans(extraSANs))
	if err != nil {
		return nil, err
	}
	secret, err := loadOrCreateSecret(dir)
	if err != nil {
		return nil, err
	}
	c := &Cluster{caCert: caCert, caPEM: caPEM, serverCert: serverCert, secret: secret}
	c.joinToken = "K10" + CAHash(caCert.Raw) + "::join:" + c.joinSecret()
	if err := writeIfChanged(filepath.Join(dir, JoinTokenFile), []byte(c.joinToken+"\n"), 0o600); err != nil {
		return nil, err
	}
	return c, nil
}

// JoinTokenWith is the join token carrying secret instead of the derived
// join secret: the token after a rotation (docs/security.md §4).
func (c *Cluster) JoinTokenWith(secret string) string {
	return "K10" + CAHash(c.caCert.Raw) + "::join:" + secret
}

// WriteJoinToken replaces the join-token file in dir (mode 0600).
func WriteJoinToken(dir, token string) error {
	return writeIfChanged(filepath.Join(dir, JoinTokenFile), []byte(token+"\n"), 0o600)
}

// CAHash is the hex SHA-256 of a DER certificate, as carried in join tokens.
func CAHash(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// TLSConfig returns a fresh server-side TLS configuration serving the server
// certificate (with the CA in its chain, so a joining agent can pin it) over
// HTTP/2 or HTTP/1.1.
func (c *Cluster) TLSConfig() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{c.serverCert},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2", "http/1.1"},
	}
}

// CAPEM returns the CA certificate, PEM-encoded.
func (c *Cluster) CAPEM() []byte { return append([]byte(nil), c.caPEM...) }

// CACert returns the parsed CA certificate.
func (c *Cluster) CACert() *x509.Certificate { return c.caCert }

// AdminToken returns the bearer token of the cluster administrator.
func (c *Cluster) AdminToken() string { return c.derive(purposeAdmin) }

// JoinToken returns the join token: K10<CA hash>::join:<join secret>.
func (c *Cluster) JoinToken() string { return c.joinToken }

// GossipKey returns the 32-byte memberlist encryption key (AES-256).
func (c *Cluster) GossipKey() []byte { return c.mac(purposeGossip) }

// NodeToken returns the bearer token of the named node: node:<name>:<hex hmac>.
func (c *Cluster) NodeToken(node string) string {
	return "node:" + node + ":" + c.derive(purposeNode+node)
}

// CheckJoinSecret reports whether s is the cluster's join secret. s may be the
// bare secret or a whole join token; a whole token must also carry this
// cluster's CA hash.
func (c *Cluster) CheckJoinSecret(s string) bool {
	want := c.joinSecret()
	if strings.HasPrefix(s, "K10") {
		return subtle.ConstantTimeCompare([]byte(s), []byte(c.joinToken)) == 1
	}
	return subtle.ConstantTimeCompare([]byte(s), []byte(want)) == 1
}

// AuthenticateToken maps a bearer token to a user: the admin token gives
// ("admin", ["system:masters"]), a node token ("system:node:<name>", ["system:nodes"]).
func (c *Cluster) AuthenticateToken(token string) (name string, groups []string, ok bool) {
	if subtle.ConstantTimeCompare([]byte(token), []byte(c.AdminToken())) == 1 {
		return AdminUser, []string{MastersGroup}, true
	}
	rest, found := strings.CutPrefix(token, "node:")
	if !found {
		return "", nil, false
	}
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 {
		return "", nil, false
	}
	node := rest[:i]
	if subtle.ConstantTimeCompare([]byte(token), []byte(c.NodeToken(node))) != 1 {
		return "", nil, false
	}
	return NodeUserPrefix + node, []string{NodesGroup}, true
}

func (c *Cluster) joinSecret() string { return c.derive(purposeJoin) }

func (c *Cluster) derive(purpose string) string { return hex.EncodeToString(c.mac(purpose)) }

func (c *Cluster) mac(purpose string) []byte {
	m := hmac.New(sha256.New, c.secret)
	m.Write([]byte(purpose))
	return m.Sum(nil)
}
