package agent

import (
	"slices"
	"testing"
	"time"

	"github.com/everynode/everynode/gossip"
)

func TestMergeSeeds(t *testing.T) {
	if got := mergeSeeds([]string{"a", "b"}, []string{"b", "c"}); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("mergeSeeds = %v", got)
	}
}

func TestNodeStatusPeriodOfProfile(t *testing.T) {
	for profile, want := range map[string]time.Duration{
		"": 0, gossip.ProfileLAN: 0, gossip.ProfileLocal: 0, gossip.ProfileWAN: WANNodeStatusPeriod,
	} {
		if got := (GossipOptions{Profile: profile}).NodeStatusPeriod(); got != want {
			t.Errorf("profile %q: NodeStatusPeriod %v, want %v", profile, got, want)
		}
	}
}
