package client

// RotateEncryptionKeyPath is where an admin rotates the key Secrets are
// encrypted under in etcd (POST, authenticated); the answer is a
// RotateEncryptionKeyResponse.
const RotateEncryptionKeyPath = "/everynode/v1/secrets/rotate-key"

// RotateEncryptionKeyResponse says what the rotation did.
type RotateEncryptionKeyResponse struct {
	// NewKey names the key every Secret is now encrypted under.
	NewKey string `json:"newKey"`
	// RetiredKeys name the keys removed from the key file.
	RetiredKeys []string `json:"retiredKeys"`
	// Reencrypted is the number of Secrets rewritten.
	Reencrypted int `json:"reencrypted"`
}
