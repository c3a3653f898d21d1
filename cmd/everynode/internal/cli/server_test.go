package cli

import (
	"bytes"
	"strings"
	"testing"
)

// TestWelcomeNamesTheDashboard: `everynode server` prints the dashboard's
// URL on the server's own listener, and how to log in.
func TestWelcomeNamesTheDashboard(t *testing.T) {
	var out bytes.Buffer
	printWelcome(IO{Out: &out}, "https://10.0.0.5:6443", "https://10.0.0.5:6443", "/var/lib/everynode/join-token", "/var/lib/everynode/admin.kubeconfig")
	for _, want := range []string{"Dashboard: https://10.0.0.5:6443/ui/", "the token in /var/lib/everynode/admin.kubeconfig", "kubectl create token NAME"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("welcome lacks %q:\n%s", want, out.String())
		}
	}
}
