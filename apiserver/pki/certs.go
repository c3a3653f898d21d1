package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Validity periods; the server certificate is reissued when less than
// renewBefore of it remains.
const (
	caValidity     = 10 * 365 * 24 * time.Hour
	serverValidity = 365 * 24 * time.Hour
	renewBefore    = 30 * 24 * time.Hour
)

// subjectAltNames is the set of names a serving certificate must carry.
type subjectAltNames struct {
	dns []string
	ips []net.IP
}

// sans returns the default names plus extra ones, deduplicated.
func sans(extra []string) subjectAltNames {
	var s subjectAltNames
	names := []string{"localhost", "127.0.0.1", "::1"}
	if h, err := os.Hostname(); err == nil && h != "" {
		names = append(names, h)
	}
	names = append(names, extra...)
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if ip := net.ParseIP(n); ip != nil {
			if !slices.ContainsFunc(s.ips, ip.Equal) {
				s.ips = append(s.ips, ip)
			}
			continue
		}
		if !slices.Contains(s.dns, n) {
			s.dns = append(s.dns, n)
		}
	}
	return s
}

// coveredBy reports whether cert carries every name in s.
func (s subjectAltNames) coveredBy(cert *x509.Certificate) bool {
	for _, d := range s.dns {
		if !slices.Contains(cert.DNSNames, d) {
			return false
		}
	}
	for _, ip := range s.ips {
		if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}

func loadOrCreateCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := os.ReadFile(keyPath)
	switch {
	case certErr == nil && keyErr == nil:
		cert, err := parseCert(certPEM)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("pki: read %s: %w", certPath, err)
		}
		key, err := parseKey(keyPEM)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("pki: read %s: %w", keyPath, err)
		}
		if !key.PublicKey.Equal(cert.PublicKey) {
			return nil, nil, nil, fmt.Errorf("pki: %s does not match %s", keyPath, certPath)
		}
		return cert, key, certPEM, nil
	case errors.Is(certErr, fs.ErrNotExist) && errors.Is(keyErr, fs.ErrNotExist):
		// First start: make the CA below.
	case certErr != nil && !errors.Is(certErr, fs.ErrNotExist):
		return nil, nil, nil, fmt.Errorf("pki: read CA: %w", certErr)
	case keyErr != nil && !errors.Is(keyErr, fs.ErrNotExist):
		return nil, nil, nil, fmt.Errorf("pki: read CA key: %w", keyErr)
	default:
		return nil, nil, nil, fmt.Errorf("pki: only one of %s and %s exists in %s; restore the missing file (a new CA would lock out every joined agent)", CACertFile, CAKeyFile, dir)
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("pki: generate CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: fmt.Sprintf("everynode-ca@%d", now.Unix())},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("pki: create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("pki: parse CA certificate: %w", err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	// Key first: a crash between the writes leaves a key without a cert, which
	// the next start reports instead of silently replacing.
	if err := writeFileAtomic(keyPath, keyPEM, 0o600); err != nil {
		return nil, nil, nil, err
	}
	if err := writeFileAtomic(certPath, certPEM, 0o644); err != nil {
		return nil, nil, nil, err
	}
	return cert, key, certPEM, nil
}

func loadOrCreateServerCert(dir string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, names subjectAltNames) (tls.Certificate, error) {
	certPath, keyPath := filepath.Join(dir, ServerCertFile), filepath.Join(dir, ServerKeyFile)
	if pair, err := tls.LoadX509KeyPair(certPath, keyPath); err == nil {
		leaf := pair.Leaf
		if leaf == nil {
			leaf, err = x509.ParseCertificate(pair.Certificate[0])
		}
		if err == nil && leaf.CheckSignatureFrom(ca) == nil && names.coveredBy(leaf) &&
			time.Until(leaf.NotAfter) > renewBefore {
			pair.Leaf = leaf
			pair.Certificate = append(pair.Certificate[:1], ca.Raw)
			return pair, nil
		}
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("pki: generate server key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "everynode-server"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(serverValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     names.dns,
		IPAddresses:  names.ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("pki: create server certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := writeFileAtomic(keyPath, keyPEM, 0o600); err != nil {
		return tls.Certificate{}, err
	}
	if err := writeFileAtomic(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("pki: parse server certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der, ca.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

func loadOrCreateSecret(dir string) ([]byte, error) {
	path := filepath.Join(dir, SecretFile)
	b, err := os.ReadFile(path)
	if err == nil {
		secret, err := hex.DecodeString(strings.TrimSpace(string(b)))
		if err != nil || len(secret) < 16 {
			return nil, fmt.Errorf("pki: %s is not a hex secret of at least 16 bytes", path)
		}
		return secret, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("pki: read cluster secret: %w", err)
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("pki: generate cluster secret: %w", err)
	}
	if err := writeFileAtomic(path, []byte(hex.EncodeToString(secret)+"\n"), 0o600); err != nil {
		return nil, err
	}
	return secret, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		// crypto/rand does not fail on supported platforms; fall back to time.
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

func parseCert(b []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

func parseKey(b []byte) (*ecdsa.PrivateKey, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New("no PEM key")
	}
	if block.Type == "EC PRIVATE KEY" {
		return x509.ParseECPrivateKey(block.Bytes)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("key is %T, want ECDSA", k)
	}
	return ek, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("pki: encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// writeIfChanged writes data unless the file already holds exactly it.
func writeIfChanged(path string, data []byte, mode os.FileMode) error {
	if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, data) {
		return nil
	}
	return writeFileAtomic(path, data, mode)
}

// writeFileAtomic writes data to a temporary file in the same directory and
// renames it over path, so readers never see a partial file.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	return nil
}
