package cli

import (
	"testing"

	"github.com/everynode/everynode/images"
)

// TestServerCopies is image ls's BLOBS ON SERVERS column.
func TestServerCopies(t *testing.T) {
	got := serverCopies([]images.ServerCopy{{Server: "a", Blobs: 3, Total: 3}, {Server: "b", Blobs: 1, Total: 3}, {Server: "c", Total: 3}})
	if want := "a (all), b (1/3), c (0/3)"; got != want {
		t.Errorf("serverCopies = %q, want %q", got, want)
	}
}
