package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/everynode/everynode/client"
)

// SecretsRotateKeyCommand is "everynode secrets rotate-key".
type SecretsRotateKeyCommand struct {
	main *Main
	clientFlags
}

func (c *SecretsRotateKeyCommand) flags(*pflag.FlagSet) {}

func (c *SecretsRotateKeyCommand) complete(pos []string) error {
	if len(pos) > 0 {
		return usageError(fmt.Sprintf("unexpected arguments %q", pos), "secrets rotate-key takes no arguments")
	}
	return nil
}

// Run asks the server to encrypt every Secret under a new key and retire
// the old one.
func (c *SecretsRotateKeyCommand) Run(ctx context.Context, std IO) error {
	h, err := c.connect(c.main)
	if err != nil {
		return err
	}
	defer h.Close()
	b, err := h.RawPost(ctx, client.RotateEncryptionKeyPath, []byte("{}"))
	if err != nil {
		return explainTransport(err, h.Server())
	}
	var out client.RotateEncryptionKeyResponse
	if err := json.Unmarshal(b, &out); err != nil || out.NewKey == "" {
		return fmt.Errorf("the server's answer to the rotation is not a key name: %s", b)
	}
	fmt.Fprintf(std.Out, "Secrets are encrypted under key %q: %d re-encrypted, retired %s.\n",
		out.NewKey, out.Reencrypted, strings.Join(out.RetiredKeys, ", "))
	fmt.Fprintln(std.Err, "With several servers, copy the answering server's encryption-keys.json to the others' data dirs now (docs/security.md).")
	return nil
}
