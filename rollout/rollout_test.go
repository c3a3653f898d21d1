package rollout

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		ann  map[string]string
		want string // the error, "" when valid
		chk  func(Options) bool
	}{
		{"none", nil, "", func(o Options) bool { return o == (Options{}) }},
		{"other prefixes ignored", map[string]string{"rollout.example.com/x": "y", "everynode.io/paused": "?"}, "", func(o Options) bool { return o == (Options{}) }},
		{"paused", map[string]string{Paused: "true"}, "", func(o Options) bool { return o.Paused && !o.Limited() }},
		{"paused false", map[string]string{Paused: "false"}, "", func(o Options) bool { return !o.Paused }},
		{"paused yes", map[string]string{Paused: "yes"},
			`metadata.annotations[rollout.everynode.io/paused]: Unsupported value: "yes": supported values: "true", "false"`, nil},
		{"paused True", map[string]string{Paused: "True"}, `supported values: "true", "false"`, nil},
		{"auto-rollback", map[string]string{AutoRollback: "true"}, "", func(o Options) bool { return o.AutoRollback }},
		{"auto-rollback bad", map[string]string{AutoRollback: "1"}, `metadata.annotations[rollout.everynode.io/auto-rollback]: Unsupported value: "1"`, nil},
		{"unreachable-blocks", map[string]string{UnreachableBlocks: "true"}, "", func(o Options) bool { return o.UnreachableBlocks }},
		{"unreachable-blocks bad", map[string]string{UnreachableBlocks: ""}, `[rollout.everynode.io/unreachable-blocks]: Unsupported value: ""`, nil},
		{"partition N", map[string]string{Partition: "3"}, "", func(o Options) bool { return *o.Partition == intstr.FromInt32(3) && o.Limited() }},
		{"partition 0", map[string]string{Partition: "0"}, "", func(o Options) bool { return *o.Partition == intstr.FromInt32(0) }},
		{"partition N%", map[string]string{Partition: "25%"}, "", func(o Options) bool { return *o.Partition == intstr.FromString("25%") }},
		{"partition 100%", map[string]string{Partition: "100%"}, "", func(o Options) bool { return *o.Partition == intstr.FromString("100%") }},
		{"partition 101%", map[string]string{Partition: "101%"}, `metadata.annotations[rollout.everynode.io/partition]: Invalid value: "101%": a percentage must be from 0% to 100%`, nil},
		{"partition negative", map[string]string{Partition: "-1"}, `[rollout.everynode.io/partition]: Invalid value: "-1": must be a number of nodes or a percentage`, nil},
		{"partition words", map[string]string{Partition: "half"}, `e.g. "3" or "10%"`, nil},
		{"partition huge", map[string]string{Partition: "99999999999"}, "must be a number of nodes from 0 to 2147483647", nil},
		{"canary selector", map[string]string{CanarySelector: "zone in (lab),!gpu"}, "", func(o Options) bool {
			return o.CanarySelector.Matches(labels.Set{"zone": "lab"}) && !o.CanarySelector.Matches(labels.Set{"zone": "lab", "gpu": "1"})
		}},
		{"canary selector empty", map[string]string{CanarySelector: ""}, `[rollout.everynode.io/canary-selector]: Invalid value: "": must be a non-empty label selector`, nil},
		{"canary selector bad", map[string]string{CanarySelector: "zone in lab"}, `[rollout.everynode.io/canary-selector]: Invalid value: "zone in lab": must be a label selector`, nil},
		{"deadline", map[string]string{ProgressDeadlineSeconds: "600"}, "", func(o Options) bool { return o.ProgressDeadline == 10*time.Minute }},
		{"deadline 0", map[string]string{ProgressDeadlineSeconds: "0"}, `[rollout.everynode.io/progress-deadline-seconds]: Invalid value: "0": must be a whole number of seconds from 1`, nil},
		{"deadline 1.5", map[string]string{ProgressDeadlineSeconds: "1.5"}, "must be a whole number of seconds", nil},
		{"bad revision", map[string]string{BadRevision: "5d8c9f7b6"}, "", func(o Options) bool { return o.BadRevision == "5d8c9f7b6" }},
		{"bad revision not a hash", map[string]string{BadRevision: "v1.2"}, `[rollout.everynode.io/bad-revision]: Invalid value: "v1.2": must be a controller-revision-hash`, nil},
		{"bad revision empty", map[string]string{BadRevision: ""}, "must be a controller-revision-hash", nil},
		{"bad revision too long", map[string]string{BadRevision: "bcdfghjklmn"}, "must be a controller-revision-hash", nil},
		{"unknown key", map[string]string{Prefix + "pause": "true"},
			`metadata.annotations: Unsupported value: "rollout.everynode.io/pause": supported values: "rollout.everynode.io/auto-rollback", "rollout.everynode.io/bad-revision", "rollout.everynode.io/canary-selector", "rollout.everynode.io/partition", "rollout.everynode.io/paused", "rollout.everynode.io/progress-deadline-seconds", "rollout.everynode.io/unreachable-blocks"`, nil},
		{"valid parts kept next to a bad one", map[string]string{Paused: "true", Partition: "x"}, "partition", func(o Options) bool { return o.Paused }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, errs := Parse(tt.ann)
			got := errs.ToAggregate()
			switch {
			case tt.want == "" && got != nil:
				t.Fatalf("unexpected error: %v", got)
			case tt.want != "" && got == nil:
				t.Fatalf("no error, want %q", tt.want)
			case tt.want != "" && !strings.Contains(got.Error(), tt.want):
				t.Fatalf("error %q\nwant it to contain %q", got, tt.want)
			}
			if tt.chk != nil && !tt.chk(o) {
				t.Fatalf("options %+v", o)
			}
		})
	}
}

func TestPartitionCount(t *testing.T) {
	tests := []struct {
		partition string
		desired   int
		want      int
	}{
		{"", 7, 7},
		{"3", 7, 3},
		{"9", 7, 7},
		{"0", 7, 0},
		{"10%", 15, 2}, // 1.5 rounds up, as maxUnavailable
		{"10%", 10, 1},
		{"1%", 3, 1},
		{"0%", 30, 0},
		{"100%", 30, 30},
		{"50%", 0, 0},
	}
	for _, tt := range tests {
		ann := map[string]string{}
		if tt.partition != "" {
			ann[Partition] = tt.partition
		}
		o, errs := Parse(ann)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		if got := o.PartitionCount(tt.desired); got != tt.want {
			t.Errorf("partition %q of %d nodes: %d, want %d", tt.partition, tt.desired, got, tt.want)
		}
	}
}

func TestValidateUpdateChecksOnlyChangedKeys(t *testing.T) {
	old := map[string]string{Prefix + "legacy": "x", Paused: "maybe"}
	if errs := ValidateUpdate(map[string]string{Prefix + "legacy": "x", Paused: "maybe", "other": "1"}, old); len(errs) != 0 {
		t.Fatalf("unchanged keys were checked: %v", errs)
	}
	if errs := ValidateUpdate(map[string]string{Prefix + "legacy": "x", Paused: "nope"}, old); len(errs) != 1 {
		t.Fatalf("changed key not checked: %v", errs)
	}
	if errs := ValidateUpdate(map[string]string{Prefix + "new": "x"}, old); len(errs) != 1 {
		t.Fatalf("added key not checked: %v", errs)
	}
}
