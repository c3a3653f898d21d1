package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Files of a clustered server's etcd peer identity, in the data dir.
const (
	PeerCertFile = "etcd-peer.crt"
	PeerKeyFile  = "etcd-peer.key"
	// PeerCommonName is the subject of every server's peer certificate;
	// only servers (who hold the CA key) get one.
	PeerCommonName = "everynode-etcd-peer"
)

// PeerCert makes sure dir holds an etcd peer certificate signed by the
// cluster's CA, for server and client authentication (peer traffic is
// mutual TLS both ways), carrying names (the advertise address), and
// returns the paths of the certificate and its key. An existing one is
// kept while it is signed by the CA, covers names and is not near expiry.
func PeerCert(dir string, names ...string) (certPath, keyPath string, err error) {
	caCert, caKey, _, err := loadOrCreateCA(dir)
	if err != nil {
		return "", "", err
	}
	certPath, keyPath = filepath.Join(dir, PeerCertFile), filepath.Join(dir, PeerKeyFile)
	want := sans(names)
	if pair, err := tls.LoadX509KeyPair(certPath, keyPath); err == nil {
		if leaf, err := x509.ParseCertificate(pair.Certificate[0]); err == nil && leaf.CheckSignatureFrom(caCert) == nil &&
			want.coveredBy(leaf) && time.Until(leaf.NotAfter) > renewBefore {
			return certPath, keyPath, nil
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("pki: generate etcd peer key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: PeerCommonName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(serverValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     want.dns,
		IPAddresses:  want.ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return "", "", fmt.Errorf("pki: create etcd peer certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return "", "", err
	}
	if err := writeFileAtomic(keyPath, keyPEM, 0o600); err != nil {
		return "", "", err
	}
	if err := writeFileAtomic(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", err
	}
	return certPath, keyPath, nil
}

// KeyMaterial is what a joining server receives to become the same cluster:
// the CA (certificate and key) and the cluster secret every credential
// derives from.
type KeyMaterial struct {
	CACert []byte `json:"caCert"` // PEM
	CAKey  []byte `json:"caKey"`  // PEM
	Secret []byte `json:"secret"` // the cluster-secret file's content
}

// ReadKeyMaterial reads dir's CA and cluster secret.
func ReadKeyMaterial(dir string) (*KeyMaterial, error) {
	var km KeyMaterial
	for _, f := range []struct {
		name string
		to   *[]byte
	}{{CACertFile, &km.CACert}, {CAKeyFile, &km.CAKey}, {SecretFile, &km.Secret}} {
		b, err := os.ReadFile(filepath.Join(dir, f.name))
		if err != nil {
			return nil, fmt.Errorf("pki: read key material: %w", err)
		}
		*f.to = b
	}
	return &km, nil
}

// WriteKeyMaterial writes km into an uninitialised dir (before Load), after
// checking that the CA certificate and key belong together; it refuses a dir
// that already has a CA.
func WriteKeyMaterial(dir string, km *KeyMaterial) error {
	if old, err := os.ReadFile(filepath.Join(dir, CACertFile)); err == nil && !bytes.Equal(old, km.CACert) {
		return fmt.Errorf("pki: %s already holds another cluster's CA; join with a fresh data dir", dir)
	}
	if _, err := tls.X509KeyPair(km.CACert, km.CAKey); err != nil {
		return fmt.Errorf("pki: the received CA certificate and key do not match: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("pki: create data dir: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, SecretFile), km.Secret, 0o600); err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(dir, CAKeyFile), km.CAKey, 0o600); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, CACertFile), km.CACert, 0o644)
}
