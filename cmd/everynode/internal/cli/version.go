package cli

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"
)

// VersionCommand is "everynode version".
type VersionCommand struct {
	main *Main

	clientFlags
	clientOnly bool
}

func (c *VersionCommand) flags(fs *pflag.FlagSet) {
	fs.BoolVar(&c.clientOnly, "client", false, "print only the client version")
}

func (c *VersionCommand) complete(pos []string) error {
	if len(pos) > 0 {
		return usageError(fmt.Sprintf("unexpected arguments %q", pos), "version takes no arguments")
	}
	return nil
}

// Run implements the command: the client version, then the server's /version.
func (c *VersionCommand) Run(ctx context.Context, std IO) error {
	fmt.Fprintf(std.Out, "Client Version: %s\n", Version())
	if c.clientOnly {
		return nil
	}
	h, err := c.connect(c.main)
	if err != nil {
		return err
	}
	defer h.Close()
	info, err := h.ServerVersion(ctx)
	if err != nil {
		return explainTransport(err, h.Server())
	}
	fmt.Fprintf(std.Out, "Server Version: %s\n", info.GitVersion)
	return nil
}
