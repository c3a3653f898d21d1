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

func TestAPIPingOfProfile(t *testing.T) {
	for profile, want := range map[string][2]time.Duration{
		"": {}, gossip.ProfileLAN: {}, gossip.ProfileLocal: {}, gossip.ProfileWAN: {3 * time.Second, 2 * time.Second},
	} {
		if after, timeout := (GossipOptions{Profile: profile}).APIPing(); after != want[0] || timeout != want[1] {
			t.Errorf("profile %q: APIPing %v, %v, want %v, %v", profile, after, timeout, want[0], want[1])
		}
	}
}
