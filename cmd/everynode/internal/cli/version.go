package cli

import (
	"context"
	"fmt"
)

// VersionCommand is "everynode version".
type VersionCommand struct {
	main *Main

	clientFlags
	clientOnly bool
}

// Run implements the command: the client version, then the server's /version.
func (c *VersionCommand) Run(ctx context.Context, args []string, std IO) error {
	fs := newFlagSet("version", "version [--client]", std.Out)
	c.register(fs.FlagSet)
	fs.BoolVar(&c.clientOnly, "client", false, "print only the client version")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError(fmt.Sprintf("unexpected arguments %q", pos), "version takes no arguments")
	}
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
