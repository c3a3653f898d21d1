package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNodePassword: the node password is made once, 0600, and kept; a
// damaged file is an error, never silently replaced (the cluster would
// refuse the new one).
func TestNodePassword(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	p1, err := LoadOrCreateNodePassword(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(p1) != 64 {
		t.Errorf("password %q, want 64 hex characters", p1)
	}
	fi, err := os.Stat(filepath.Join(dir, NodePasswordFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v (%v), want 0600", fi.Mode(), err)
	}
	if p2, err := LoadOrCreateNodePassword(dir); err != nil || p2 != p1 {
		t.Errorf("second load: %q %v, want %q", p2, err, p1)
	}
	if err := os.WriteFile(filepath.Join(dir, NodePasswordFile), []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateNodePassword(dir); err == nil || !strings.Contains(err.Error(), "is not a node password") {
		t.Errorf("damaged file: %v", err)
	}
}
