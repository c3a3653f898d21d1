package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"fmt"
	"strconv"
)

// purposeServiceAccountKey names the HMAC derivation of the key that signs
// service account tokens.
const purposeServiceAccountKey = "service-account-signing-key"

// ServiceAccountKey is the ECDSA P-256 key that signs service account tokens
// (TokenRequest), derived from the cluster secret like every other
// credential, so every server of a cluster signs and verifies with the same
// key and a restart keeps issued tokens valid. Rotating the cluster secret
// invalidates them.
func (c *Cluster) ServiceAccountKey() (*ecdsa.PrivateKey, error) {
	// A derived 32-byte scalar is a valid P-256 key unless it is zero or not
	// below the group order (probability about 2^-32); the next derivation
	// is tried then.
	for i := range 16 {
		key, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), c.mac(purposeServiceAccountKey+"/"+strconv.Itoa(i)))
		if err == nil {
			return key, nil
		}
	}
	return nil, fmt.Errorf("pki: no valid service account key derivable")
}
