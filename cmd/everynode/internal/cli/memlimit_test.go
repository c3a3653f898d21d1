package cli

import "testing"

func TestParseMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		bad  bool
	}{
		{in: "none", want: 0},
		{in: "auto", bad: true},
		{in: "256Mi", want: 256 << 20},
		{in: "1Gi", want: 1 << 30},
		{in: "300M", want: 300_000_000},
		{in: "32Mi", want: 32 << 20},
		{in: "31Mi", bad: true},
		{in: "0", bad: true},
		{in: "-1Gi", bad: true},
		{in: "lots", bad: true},
	} {
		got, err := parseMemoryLimit(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("parseMemoryLimit(%q) = %d, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseMemoryLimit(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}
