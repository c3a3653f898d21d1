package cli

import (
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/everynode/everynode/cmd/internal/agentcmd"
)

// FixError is a failure with the action that fixes it; it prints as
// "<cause>; <fix>" (package agentcmd, which the lean agent binary shares).
type FixError = agentcmd.FixError

func withFix(err error, fix string) error { return agentcmd.WithFix(err, fix) }

func usageError(msg, fix string) error { return agentcmd.UsageError(msg, fix) }

// parseLogLevel reads a --log-level value.
func parseLogLevel(s string) (slog.Level, error) { return agentcmd.ParseLogLevel(s) }

// FormatError renders err as the single line the command prints on stderr:
// API errors as kubectl does ("Error from server (NotFound): ..."), anything
// else as "error: <cause>; <fix>".
func FormatError(err error) string { return agentcmd.FormatError(err) }

func isFix(err error) bool { return agentcmd.IsFix(err) }

// explainTransport adds the fix to a failure to reach the server.
func explainTransport(err error, server string) error {
	if err == nil {
		return nil
	}
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		if apierrors.IsUnauthorized(err) {
			return withFix(fmt.Errorf("the server at %s rejected the token (401 Unauthorized)", server),
				"use the admin.kubeconfig written by this server into its data dir")
		}
		return err
	}
	var ue x509.UnknownAuthorityError
	var he x509.HostnameError
	var ce *x509.CertificateInvalidError
	switch {
	case errors.As(err, &ue), errors.As(err, &ce):
		return withFix(fmt.Errorf("cannot verify the server's certificate at %s: %w", server, err),
			"the kubeconfig's CA is not this server's; use the admin.kubeconfig from this server's data dir")
	case errors.As(err, &he):
		return withFix(fmt.Errorf("the server's certificate does not name %s: %w", server, err),
			"connect through a name in the certificate, or restart the server with --tls-san naming this host")
	case errors.Is(err, syscall.ECONNREFUSED):
		return withFix(fmt.Errorf("cannot reach the API server at %s: connection refused", server),
			"start it with \"everynode server\" or check the server address in the kubeconfig")
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return withFix(fmt.Errorf("cannot reach the API server at %s: %w", server, err),
			"check that \"everynode server\" is running and the kubeconfig's server address")
	}
	return err
}
