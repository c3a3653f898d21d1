package pki

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// WriteKubeconfig writes a kubeconfig for kubectl and everynode's client verbs:
// one cluster (serverURL, the CA embedded as certificate-authority-data), one
// user with a bearer token, and one context, all named contextName, which is
// also the current context. The file is written atomically with mode 0600.
func WriteKubeconfig(path, serverURL string, caPEM []byte, token, contextName string) error {
	if contextName == "" {
		contextName = "everynode"
	}
	cfg := clientcmdapi.NewConfig()
	cluster := clientcmdapi.NewCluster()
	cluster.Server = serverURL
	cluster.CertificateAuthorityData = caPEM
	cfg.Clusters[contextName] = cluster
	user := clientcmdapi.NewAuthInfo()
	user.Token = token
	cfg.AuthInfos[contextName] = user
	ctx := clientcmdapi.NewContext()
	ctx.Cluster = contextName
	ctx.AuthInfo = contextName
	cfg.Contexts[contextName] = ctx
	cfg.CurrentContext = contextName

	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("pki: encode kubeconfig: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("pki: write kubeconfig: %w", err)
	}
	return writeFileAtomic(path, data, 0o600)
}
