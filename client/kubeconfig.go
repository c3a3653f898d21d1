package client

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/everynode/everynode/client/kubeconfig"
)

// KubeconfigPaths returns the kubeconfig files consulted, in kubectl's order:
// the explicit path (--kubeconfig) alone if set; else every file named in env
// (the KUBECONFIG value, a path list); else ~/.kube/config under home.
func KubeconfigPaths(explicit, env, home string) []string {
	if explicit != "" {
		return []string{explicit}
	}
	if env != "" {
		var out []string
		for _, p := range filepath.SplitList(env) {
			if p != "" {
				out = append(out, p)
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	if home == "" {
		return nil
	}
	return []string{filepath.Join(home, ".kube", "config")}
}

// LoadKubeconfig reads the current context's server, CA and token like kubectl:
// path if non-empty, else the files in $KUBECONFIG (merged, first wins), else
// ~/.kube/config. The CA comes from certificate-authority-data or the
// certificate-authority file (relative to the kubeconfig); the token from
// token or tokenFile.
func LoadKubeconfig(path string) (Config, error) {
	home, _ := os.UserHomeDir()
	return LoadKubeconfigFrom(KubeconfigPaths(path, os.Getenv("KUBECONFIG"), home))
}

// LoadKubeconfigFrom is LoadKubeconfig over an explicit list of files; the
// first file must exist when it is the only one.
func LoadKubeconfigFrom(paths []string) (Config, error) {
	if len(paths) == 0 {
		return Config{}, errors.New("no kubeconfig: no --kubeconfig, KUBECONFIG or home directory")
	}
	raw, err := kubeconfig.Load(paths, len(paths) == 1)
	if err != nil {
		return Config{}, err
	}
	if raw.CurrentContext == "" && len(raw.Contexts) == 0 {
		return Config{}, fmt.Errorf("no context in kubeconfig %s", strings.Join(paths, string(filepath.ListSeparator)))
	}
	return fromKubeconfig(raw)
}

func fromKubeconfig(raw *kubeconfig.Config) (Config, error) {
	name := raw.CurrentContext
	ctx, ok := raw.Context(name)
	if !ok {
		return Config{}, fmt.Errorf("kubeconfig: current context %q not found", name)
	}
	cluster, ok := raw.Cluster(ctx.Cluster)
	if !ok {
		return Config{}, fmt.Errorf("kubeconfig: cluster %q of context %q not found", ctx.Cluster, name)
	}
	if cluster.Server == "" {
		return Config{}, fmt.Errorf("kubeconfig: cluster %q has no server", ctx.Cluster)
	}
	cfg := Config{Server: cluster.Server, CAPEM: cluster.CertificateAuthorityData}
	if len(cfg.CAPEM) == 0 && cluster.CertificateAuthority != "" {
		b, err := os.ReadFile(cluster.CertificateAuthority)
		if err != nil {
			return Config{}, fmt.Errorf("kubeconfig: certificate-authority: %w", err)
		}
		cfg.CAPEM = b
	}
	if user, ok := raw.User(ctx.User); ok {
		cfg.Token = user.Token
		if cfg.Token == "" && user.TokenFile != "" {
			b, err := os.ReadFile(user.TokenFile)
			if err != nil {
				return Config{}, fmt.Errorf("kubeconfig: tokenFile: %w", err)
			}
			cfg.Token = strings.TrimSpace(string(b))
		}
	}
	return cfg, nil
}
