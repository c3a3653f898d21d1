// Package kubeconfig reads and writes kubeconfig files: the part of kubectl's
// format (client-go's clientcmd/api/v1 Config) that everynode uses, which is
// clusters (server, CA), users (bearer token) and contexts.
//
// Load follows client-go's clientcmd loading rules, so a file works the same
// for kubectl and for everynode: several files are merged with the first file
// winning for each named cluster, user and context and for current-context;
// relative file references are resolved against the directory of the file
// that holds them. Fields everynode does not use are ignored on read.
//
// The package exists so that the binary does not link clientcmd, whose
// dependencies (client-go's rest client, exec credential plugins, feature
// gates) every everynode process would initialise at start-up.
package kubeconfig

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Config is a kubeconfig file. Lists keep the file's order; names are unique
// within each list.
type Config struct {
	APIVersion     string         `json:"apiVersion,omitempty"`
	Kind           string         `json:"kind,omitempty"`
	Clusters       []NamedCluster `json:"clusters"`
	Users          []NamedUser    `json:"users"`
	Contexts       []NamedContext `json:"contexts"`
	CurrentContext string         `json:"current-context"`
}

// NamedCluster is an entry of "clusters".
type NamedCluster struct {
	Name    string  `json:"name"`
	Cluster Cluster `json:"cluster"`
}

// Cluster is how to reach an API server.
type Cluster struct {
	// Server is the API server's URL.
	Server string `json:"server"`
	// CertificateAuthority is a PEM file of the CA; Load makes it absolute.
	CertificateAuthority string `json:"certificate-authority,omitempty"`
	// CertificateAuthorityData is the CA in PEM; it takes precedence over
	// CertificateAuthority.
	CertificateAuthorityData []byte `json:"certificate-authority-data,omitempty"`
}

// NamedUser is an entry of "users".
type NamedUser struct {
	Name string `json:"name"`
	User User   `json:"user"`
}

// User is a set of credentials.
type User struct {
	// Token is a bearer token.
	Token string `json:"token,omitempty"`
	// TokenFile is a file holding a bearer token; Load makes it absolute.
	TokenFile string `json:"tokenFile,omitempty"`
}

// NamedContext is an entry of "contexts".
type NamedContext struct {
	Name    string  `json:"name"`
	Context Context `json:"context"`
}

// Context names a cluster and a user.
type Context struct {
	Cluster   string `json:"cluster"`
	User      string `json:"user"`
	Namespace string `json:"namespace,omitempty"`
}

// New returns a kubeconfig with one cluster, one token user and one context,
// all named name, which is also the current context.
func New(name, server string, caPEM []byte, token string) *Config {
	return &Config{
		APIVersion:     "v1",
		Kind:           "Config",
		Clusters:       []NamedCluster{{Name: name, Cluster: Cluster{Server: server, CertificateAuthorityData: caPEM}}},
		Users:          []NamedUser{{Name: name, User: User{Token: token}}},
		Contexts:       []NamedContext{{Name: name, Context: Context{Cluster: name, User: name}}},
		CurrentContext: name,
	}
}

// Encode returns c as YAML, with the keys in the order clientcmd.Write gives.
func Encode(c *Config) ([]byte, error) {
	out := *c
	if out.APIVersion == "" {
		out.APIVersion = "v1"
	}
	if out.Kind == "" {
		out.Kind = "Config"
	}
	data, err := yaml.Marshal(&out)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: encode: %w", err)
	}
	return data, nil
}

// Decode parses a kubeconfig in YAML or JSON. An empty document is an empty
// Config. Unknown fields are ignored; an apiVersion other than v1, a kind
// other than Config and a name used twice in a list are errors.
func Decode(data []byte) (*Config, error) {
	c := &Config{}
	if len(bytes.TrimSpace(data)) == 0 {
		return c, nil
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, err
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(js, c); err != nil {
		return nil, err
	}
	if c.APIVersion != "" && c.APIVersion != "v1" {
		return nil, fmt.Errorf("unsupported apiVersion %q, want v1", c.APIVersion)
	}
	if c.Kind != "" && c.Kind != "Config" {
		return nil, fmt.Errorf("unsupported kind %q, want Config", c.Kind)
	}
	if err := unique("clusters", c.Clusters, func(n NamedCluster) string { return n.Name }); err != nil {
		return nil, err
	}
	if err := unique("users", c.Users, func(n NamedUser) string { return n.Name }); err != nil {
		return nil, err
	}
	if err := unique("contexts", c.Contexts, func(n NamedContext) string { return n.Name }); err != nil {
		return nil, err
	}
	return c, nil
}

func unique[T any](list string, items []T, name func(T) string) error {
	seen := make(map[string]bool, len(items))
	for _, it := range items {
		n := name(it)
		if seen[n] {
			return fmt.Errorf("duplicate name %q in %s", n, list)
		}
		seen[n] = true
	}
	return nil
}

// LoadFile reads and decodes one kubeconfig file and makes its relative
// certificate-authority and tokenFile paths absolute, relative to the file's
// directory. A missing file's error satisfies os.IsNotExist.
func LoadFile(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("error loading config file %q: %w", path, err)
	}
	base, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("could not determine the absolute path of config file %s: %w", path, err)
	}
	for i := range c.Clusters {
		resolve(&c.Clusters[i].Cluster.CertificateAuthority, base)
	}
	for i := range c.Users {
		resolve(&c.Users[i].User.TokenFile, base)
	}
	return c, nil
}

func resolve(p *string, base string) {
	if *p != "" && !filepath.IsAbs(*p) {
		*p = filepath.Join(base, *p)
	}
}

// Load reads paths like kubectl. With explicit set, paths must be one file
// and it must exist. Otherwise (the files of $KUBECONFIG) missing files are
// skipped and the others merged: the first file to name a cluster, user or
// context wins for that name, and the first non-empty current-context wins.
// Files that fail to decode are reported together, after merging the rest.
func Load(paths []string, explicit bool) (*Config, error) {
	if explicit {
		if len(paths) != 1 {
			return nil, fmt.Errorf("kubeconfig: an explicit path must be one file, got %d", len(paths))
		}
		if _, err := os.Stat(paths[0]); os.IsNotExist(err) {
			return nil, err
		}
	}
	merged := &Config{}
	seen := map[string]bool{}
	var errs []error
	for _, p := range paths {
		if p == "" {
			continue
		}
		c, err := LoadFile(p)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if merged.CurrentContext == "" {
			merged.CurrentContext = c.CurrentContext
		}
		for _, n := range c.Clusters {
			if !seen["cluster/"+n.Name] {
				seen["cluster/"+n.Name] = true
				merged.Clusters = append(merged.Clusters, n)
			}
		}
		for _, n := range c.Users {
			if !seen["user/"+n.Name] {
				seen["user/"+n.Name] = true
				merged.Users = append(merged.Users, n)
			}
		}
		for _, n := range c.Contexts {
			if !seen["context/"+n.Name] {
				seen["context/"+n.Name] = true
				merged.Contexts = append(merged.Contexts, n)
			}
		}
	}
	return merged, errors.Join(errs...)
}

// Cluster returns the cluster named name.
func (c *Config) Cluster(name string) (Cluster, bool) {
	for _, n := range c.Clusters {
		if n.Name == name {
			return n.Cluster, true
		}
	}
	return Cluster{}, false
}

// User returns the user named name.
func (c *Config) User(name string) (User, bool) {
	for _, n := range c.Users {
		if n.Name == name {
			return n.User, true
		}
	}
	return User{}, false
}

// Context returns the context named name.
func (c *Config) Context(name string) (Context, bool) {
	for _, n := range c.Contexts {
		if n.Name == name {
			return n.Context, true
		}
	}
	return Context{}, false
}
