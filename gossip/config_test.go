package gossip

import (
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	valid := func() Config {
		c := DefaultLANConfig()
		c.Name, c.Key, c.Meta = "n1", testKey(1), Meta{Role: RoleAgent}
		return c
	}
	tests := []struct {
		name   string
		change func(*Config)
		want   string // substring of the error; "" = valid
	}{
		{"lan preset", func(*Config) {}, ""},
		{"wan preset", func(c *Config) { c.Profile, c.BindAddr = ProfileWAN, DefaultWANConfig().BindAddr }, ""},
		{"local preset", func(c *Config) { c.Profile, c.BindAddr = ProfileLocal, DefaultLocalConfig().BindAddr }, ""},
		{"empty profile is lan", func(c *Config) { c.Profile = "" }, ""},
		{"server role", func(c *Config) { c.Meta = Meta{Role: RoleServer, APIAddr: "https://10.0.0.1:6443"} }, ""},
		{"advertise host only", func(c *Config) { c.AdvertiseAddr = "10.0.0.9" }, ""},
		{"advertise host:port", func(c *Config) { c.AdvertiseAddr = "10.0.0.9:17946" }, ""},
		{"ipv6 bind", func(c *Config) { c.BindAddr = "[::1]:0" }, ""},
		{"no name", func(c *Config) { c.Name = "" }, "Name is required"},
		{"no key", func(c *Config) { c.Key = nil }, "32 bytes"},
		{"short key", func(c *Config) { c.Key = testKey(1)[:16] }, "32 bytes"},
		{"bind without port", func(c *Config) { c.BindAddr = "127.0.0.1" }, "want host:port"},
		{"bind hostname", func(c *Config) { c.BindAddr = "localhost:0" }, "IP address"},
		{"bind bad port", func(c *Config) { c.BindAddr = ":99999" }, "bad port"},
		{"advertise hostname", func(c *Config) { c.AdvertiseAddr = "node.example:1" }, "IP address"},
		{"unknown profile", func(c *Config) { c.Profile = "moon" }, `unknown profile "moon"`},
		{"no role", func(c *Config) { c.Meta.Role = "" }, "Meta.Role"},
		{"negative buffer", func(c *Config) { c.HintBuffer = -1 }, "HintBuffer"},
		{"meta too big", func(c *Config) { c.Meta.AgentAddr = strings.Repeat("x", 500) }, "limit is 512"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.change(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.want)
			}
			if tt.want != "" {
				if _, err := New(c); err == nil {
					t.Fatal("New accepted an invalid config")
				}
			}
		})
	}
}

func TestProfileTimingsOrdered(t *testing.T) {
	for _, p := range []string{ProfileLAN, ProfileWAN, ProfileLocal} {
		tm, err := profileTimings(p)
		if err != nil {
			t.Fatal(err)
		}
		// memberlist needs room after the direct ping for indirect and TCP probes.
		if tm.probeTimeout >= tm.probeInterval || tm.suspicionMult < 3 || tm.gossipInterval >= tm.probeInterval {
			t.Errorf("%s: implausible timings %+v", p, tm)
		}
	}
}

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{Alive: "alive", Suspect: "suspect", Dead: "dead", Left: "left", State(9): "State(9)"} {
		if got := s.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(s), got, want)
		}
	}
}

// TestCompressionByProfile: only wan compresses (an idle lan member spent a
// quarter of its CPU on LZW tables), and members that compress and members
// that do not understand each other: a wan member joins a lan one (the join's
// state exchange compressed one way, not the other) and both list each other
// alive.
func TestCompressionByProfile(t *testing.T) {
	for p, want := range map[string]bool{ProfileLAN: false, ProfileWAN: true, ProfileLocal: false} {
		tm, err := profileTimings(p)
		if err != nil {
			t.Fatal(err)
		}
		cfg := testConfig("x", p)
		if got := cfg.memberlistConfig(tm, nil, slog.New(slog.DiscardHandler)).EnableCompression; got != want {
			t.Errorf("%s: EnableCompression = %v, want %v", p, got, want)
		}
	}
	lan := startMember(t, testConfig("lan", ProfileLAN))
	wan := startMember(t, testConfig("wan", ProfileWAN))
	if _, err := wan.Join([]string{lan.LocalAddr()}); err != nil {
		t.Fatalf("a compressing member joining one that does not: %v", err)
	}
	waitFor(t, 20*time.Second, "both members alive on both sides", func() bool {
		return seesAlive(lan, "lan", "wan") && seesAlive(wan, "lan", "wan")
	})
}
