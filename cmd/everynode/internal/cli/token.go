package cli

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/everynode/everynode/apiserver"
	"github.com/everynode/everynode/apiserver/pki"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/cmd/internal/agentcmd"
	"github.com/everynode/everynode/resources"
)

// Bootstrap tokens ("everynode token create|list|delete") are kubeadm's:
// Secrets bootstrap-token-<id> of type bootstrap.kubernetes.io/token in
// kube-system, with an expiry. They admit agents only. "token rotate"
// replaces the cluster's own join secret (docs/security.md §4).

// defaultTokenTTL is kubeadm's.
const defaultTokenTTL = 24 * time.Hour

// tokenAlphabet is kubeadm's bootstrap token alphabet.
const tokenAlphabet = "0123456789abcdefghijklmnopqrstuvwxyz"

// TokenCreateCommand is "everynode token create".
type TokenCreateCommand struct {
	main *Main
	clientFlags
	ttl         time.Duration
	description string
}

func (c *TokenCreateCommand) flags(fs *pflag.FlagSet) {
	fs.DurationVar(&c.ttl, "ttl", defaultTokenTTL, "how long the token admits agents (0: never expires)")
	fs.StringVar(&c.description, "description", "", "a note on what the token is for, shown by \"token list\"")
}

func (c *TokenCreateCommand) complete(pos []string) error {
	if len(pos) > 0 {
		return usageError(fmt.Sprintf("unexpected arguments %q", pos), "token create takes only flags")
	}
	if c.ttl < 0 {
		return usageError(fmt.Sprintf("invalid --ttl %s", c.ttl), "use a positive duration, or 0 for a token that never expires")
	}
	return nil
}

// Run creates the token's Secret and prints the join token agents use.
func (c *TokenCreateCommand) Run(ctx context.Context, std IO) error {
	h, caHash, err := c.connectCA(c.main)
	if err != nil {
		return err
	}
	defer h.Close()
	id, err := randomString(6)
	if err != nil {
		return err
	}
	secret, err := randomString(16)
	if err != nil {
		return err
	}
	data := map[string][]byte{
		apiserver.BootstrapTokenIDKey:        []byte(id),
		apiserver.BootstrapTokenSecretKey:    []byte(secret),
		apiserver.BootstrapTokenUsageAuthKey: []byte("true"),
	}
	if c.ttl > 0 {
		data[apiserver.BootstrapTokenExpirationKey] = []byte(c.main.now().Add(c.ttl).UTC().Format(time.RFC3339))
	}
	if c.description != "" {
		data[apiserver.BootstrapTokenDescriptionKey] = []byte(c.description)
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: apiserver.BootstrapTokenSecretPrefix + id, Namespace: apiserver.BootstrapTokenNamespace},
		Type:       apiserver.BootstrapTokenType,
		Data:       data,
	}
	resources.Secrets.SetTypeMeta(s)
	if _, err := h.Create(ctx, s, client.WriteOptions{}); err != nil {
		return explainTransport(err, h.Server())
	}
	fmt.Fprintln(std.Out, joinToken(caHash, id+"."+secret))
	return nil
}

// TokenListCommand is "everynode token list".
type TokenListCommand struct {
	main *Main
	clientFlags
}

func (c *TokenListCommand) flags(*pflag.FlagSet) {}

func (c *TokenListCommand) complete(pos []string) error {
	if len(pos) > 0 {
		return usageError(fmt.Sprintf("unexpected arguments %q", pos), "token list takes no arguments")
	}
	return nil
}

// Run lists the bootstrap tokens as kubeadm does: TOKEN, TTL, EXPIRES,
// USAGES, DESCRIPTION.
func (c *TokenListCommand) Run(ctx context.Context, std IO) error {
	h, caHash, err := c.connectCA(c.main)
	if err != nil {
		return err
	}
	defer h.Close()
	objs, _, err := h.List(ctx, resources.Secrets, apiserver.BootstrapTokenNamespace, client.ListOptions{})
	if err != nil {
		return explainTransport(err, h.Server())
	}
	var rows [][]string
	now := c.main.now()
	for _, o := range objs {
		s, ok := o.(*corev1.Secret)
		if !ok || s.Type != apiserver.BootstrapTokenType {
			continue
		}
		d := func(k string) string { return string(s.Data[k]) }
		ttl, expires := "<forever>", "<never>"
		if exp := d(apiserver.BootstrapTokenExpirationKey); exp != "" {
			expires = exp
			if t, err := time.Parse(time.RFC3339, exp); err != nil || !now.Before(t) {
				ttl = "<invalid>"
			} else {
				ttl = duration.ShortHumanDuration(t.Sub(now))
			}
		}
		usages := "none"
		if d(apiserver.BootstrapTokenUsageAuthKey) == "true" {
			usages = "authentication"
		}
		rows = append(rows, []string{joinToken(caHash, d(apiserver.BootstrapTokenIDKey)+"."+d(apiserver.BootstrapTokenSecretKey)),
			ttl, expires, usages, d(apiserver.BootstrapTokenDescriptionKey)})
	}
	if len(rows) == 0 {
		fmt.Fprintln(std.Err, "No bootstrap tokens.")
		return nil
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i][0] < rows[j][0] })
	tw := tabwriter.NewWriter(std.Out, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "TOKEN\tTTL\tEXPIRES\tUSAGES\tDESCRIPTION")
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// TokenDeleteCommand is "everynode token delete".
type TokenDeleteCommand struct {
	main *Main
	clientFlags
	ids []string
}

func (c *TokenDeleteCommand) flags(*pflag.FlagSet) {}

func (c *TokenDeleteCommand) complete(pos []string) error {
	if len(pos) == 0 {
		return usageError("token delete needs a token or its ID", "give what \"everynode token list\" shows, or its 6-character ID")
	}
	for _, p := range pos {
		id := p
		if i := strings.LastIndex(id, "::join:"); i >= 0 {
			id = id[i+len("::join:"):]
		}
		if tid, _, ok := apiserver.ParseBootstrapToken(id); ok {
			id = tid
		}
		if len(id) != 6 || strings.Trim(id, tokenAlphabet) != "" {
			return usageError(fmt.Sprintf("%q is not a bootstrap token or token ID", p), "give what \"everynode token list\" shows, or its 6-character ID")
		}
		c.ids = append(c.ids, id)
	}
	return nil
}

// Run deletes the tokens' Secrets.
func (c *TokenDeleteCommand) Run(ctx context.Context, std IO) error {
	h, err := c.connect(c.main)
	if err != nil {
		return err
	}
	defer h.Close()
	for _, id := range c.ids {
		_, err := h.Delete(ctx, resources.Secrets, apiserver.BootstrapTokenNamespace, apiserver.BootstrapTokenSecretPrefix+id, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return withFix(fmt.Errorf("bootstrap token %q not found", id), "see \"everynode token list\"")
		}
		if err != nil {
			return explainTransport(err, h.Server())
		}
		fmt.Fprintf(std.Out, "bootstrap token %q deleted\n", id)
	}
	return nil
}

// TokenRotateCommand is "everynode token rotate".
type TokenRotateCommand struct {
	main *Main
	clientFlags
}

func (c *TokenRotateCommand) flags(*pflag.FlagSet) {}

func (c *TokenRotateCommand) complete(pos []string) error {
	if len(pos) > 0 {
		return usageError(fmt.Sprintf("unexpected arguments %q", pos), "token rotate takes no arguments")
	}
	return nil
}

// Run asks the server for a new join secret and prints the new join token.
func (c *TokenRotateCommand) Run(ctx context.Context, std IO) error {
	h, err := c.connect(c.main)
	if err != nil {
		return err
	}
	defer h.Close()
	b, err := h.RawPost(ctx, client.RotateJoinTokenPath, []byte("{}"))
	if err != nil {
		return explainTransport(err, h.Server())
	}
	var out client.RotateJoinTokenResponse
	if err := json.Unmarshal(b, &out); err != nil || out.JoinToken == "" {
		return fmt.Errorf("the server's answer to the rotation is not a join token: %s", b)
	}
	fmt.Fprintln(std.Err, "The join token was rotated: new agents need the token below (also in the server's data dir, file join-token); joined agents keep running.")
	fmt.Fprintln(std.Out, out.JoinToken)
	return nil
}

// connectCA is connect, and the hash of the kubeconfig's cluster CA for
// join tokens.
func (c *clientFlags) connectCA(m *Main) (*client.HTTP, string, error) {
	paths := client.KubeconfigPaths(c.kubeconfig, m.getenv("KUBECONFIG"), m.getenv("HOME"))
	cfg, err := client.LoadKubeconfigFrom(paths)
	if err != nil {
		return nil, "", withFix(fmt.Errorf("cannot read kubeconfig: %w", err),
			"set --kubeconfig or KUBECONFIG to the admin.kubeconfig in the server's data dir")
	}
	block, _ := pem.Decode(cfg.CAPEM)
	if block == nil {
		return nil, "", withFix(fmt.Errorf("the kubeconfig has no certificate-authority-data, which a join token pins"),
			"use the admin.kubeconfig in the server's data dir")
	}
	h, err := c.connect(m)
	if err != nil {
		return nil, "", err
	}
	return h, pki.CAHash(block.Bytes), nil
}

// joinToken is the K10 join token carrying secret.
func joinToken(caHash, secret string) string { return "K10" + caHash + "::join:" + secret }

// randomString is n characters of tokenAlphabet from crypto/rand.
func randomString(n int) (string, error) {
	b := make([]byte, n)
	max := big.NewInt(int64(len(tokenAlphabet)))
	for i := range b {
		k, err := rand.Int(rand.Reader, max)
		if err != nil {
			return "", err
		}
		b[i] = tokenAlphabet[k.Int64()]
	}
	return string(b), nil
}

// readTokenFile reads a join token from a file (--token-file).
func readTokenFile(path string) (string, error) { return agentcmd.ReadTokenFile(path) }
