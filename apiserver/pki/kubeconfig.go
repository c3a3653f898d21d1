package pki

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/everynode/everynode/client/kubeconfig"
)

// WriteKubeconfig writes a kubeconfig for kubectl and everynode's client verbs:
// one cluster (serverURL, the CA embedded as certificate-authority-data), one
// user with a bearer token, and one context, all named contextName, which is
// also the current context. The file is written atomically with mode 0600.
func WriteKubeconfig(path, serverURL string, caPEM []byte, token, contextName string) error {
	if contextName == "" {
		contextName = "everynode"
	}
	data, err := kubeconfig.Encode(kubeconfig.New(contextName, serverURL, caPEM, token))
	if err != nil {
		return fmt.Errorf("pki: encode kubeconfig: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("pki: write kubeconfig: %w", err)
	}
	return writeFileAtomic(path, data, 0o600)
}
