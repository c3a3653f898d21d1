package agentruntime

import (
	"runtime"
	"runtime/debug"
	"slices"
	"testing"
)

// restore puts back this process's GOGC and GOMAXPROCS after a test.
func restore(t *testing.T) {
	gc := debug.SetGCPercent(100)
	debug.SetGCPercent(gc)
	procs := runtime.GOMAXPROCS(0)
	t.Cleanup(func() {
		debug.SetGCPercent(gc)
		runtime.GOMAXPROCS(procs)
	})
}

func env(set ...string) func(string) (string, bool) {
	return func(name string) (string, bool) { return "", slices.Contains(set, name) }
}

func TestApply(t *testing.T) {
	for _, tc := range []struct {
		name              string
		set               []string
		wantGC, wantProcs int // -1: left as it was
	}{
		{"nothing set", nil, GCPercent, MaxProcs},
		{"GOGC set", []string{"GOGC"}, -1, MaxProcs},
		{"GOMAXPROCS set", []string{"GOMAXPROCS"}, GCPercent, -1},
		{"both set", []string{"GOGC", "GOMAXPROCS"}, -1, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			restore(t)
			debug.SetGCPercent(123)
			runtime.GOMAXPROCS(3)
			Apply(env(tc.set...))
			gc := debug.SetGCPercent(123)
			procs := runtime.GOMAXPROCS(0)
			if want := tc.wantGC; want == -1 && gc != 123 || want != -1 && gc != want {
				t.Errorf("GOGC %d, want %d (-1: unchanged from 123)", gc, want)
			}
			if want := tc.wantProcs; want == -1 && procs != 3 || want != -1 && procs != want {
				t.Errorf("GOMAXPROCS %d, want %d (-1: unchanged from 3)", procs, want)
			}
		})
	}
}

func TestEnvironMatchesApply(t *testing.T) {
	if got, want := Environ(env()), []string{"GOGC=50", "GOMAXPROCS=1"}; !slices.Equal(got, want) {
		t.Fatalf("Environ() = %q, want %q", got, want)
	}
	if got, want := Environ(env("GOGC")), []string{"GOMAXPROCS=1"}; !slices.Equal(got, want) {
		t.Fatalf("Environ() with GOGC set = %q, want %q", got, want)
	}
}
