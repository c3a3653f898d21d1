package bench

import (
	"slices"
	"testing"
)

func TestFloorWork(t *testing.T) {
	ws := WriteStats{PodCreates: 2, Total: 7, seqs: map[string][]write{
		"/registry/pods/default/b":                {{size: 100, create: true}, {size: 150}, {size: 160}},
		"/registry/pods/default/a":                {{size: 90, create: true}, {size: 140}},
		"/registry/pods/default/existing":         {{size: 120}},                              // not created in the window
		"/registry/pods/default/gone":             {{size: 80, create: true}, {delete: true}}, // deleted again
		"/registry/events/default/a.1":            {{size: 500, create: true}},                // not a pod
		"/registry/daemonsets/default/bench-ds-1": {{size: 700}},
	}}
	got := floorWork(ws.seqs)
	want := []podWrites{{key: "/registry/pods/default/a", createSize: 90, status: 140}, {key: "/registry/pods/default/b", createSize: 100, status: 160}}
	if !slices.Equal(got, want) {
		t.Errorf("floorWork = %+v, want %+v", got, want)
	}
	ws.summarise()
	if ws.Keys != 6 || ws.KeysPerPod != 3 || ws.WritesPerPod != 3.5 {
		t.Errorf("keys %d, keys per pod %v, writes per pod %v; want 6, 3, 3.5", ws.Keys, ws.KeysPerPod, ws.WritesPerPod)
	}
	if ws.PodCreateBytes != 95 || ws.PodStatusBytes != 150 {
		t.Errorf("pod create/status bytes %d/%d, want 95/150", ws.PodCreateBytes, ws.PodStatusBytes)
	}
}

func TestFloorConcurrencies(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want []int
	}{
		{1, []int{1}},
		{16, []int{16}},
		{100, []int{16, 64, 100}},
		{1000, []int{16, 64, 256, 1000}},
		{5000, []int{16, 64, 256, 1024, 4096, 5000}},
	} {
		if got := floorConcurrencies(tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("floorConcurrencies(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
}

func TestCountList(t *testing.T) {
	got := countList(map[string]int{"pods": 2000, "events": 2700, "daemonsets": 15, "controllerrevisions": 15})
	want := "events 2700, pods 2000, controllerrevisions 15, daemonsets 15"
	if got != want {
		t.Errorf("countList = %q, want %q", got, want)
	}
}
