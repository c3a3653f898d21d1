package strategy

import (
	"testing"

	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/rollout"
)

// TestValidateRolloutAnnotations: the rollout.everynode.io/ annotations
// (docs/rollouts.md) are checked on create and on every update that adds or
// changes one; an update leaving an invalid one as it was (a status write,
// an object stored before the rule) passes.
func TestValidateRolloutAnnotations(t *testing.T) {
	tests := []struct {
		key, value, want string
	}{
		{rollout.Paused, "true", ""},
		{rollout.Paused, "false", ""},
		{rollout.Paused, "yes", `metadata.annotations[rollout.everynode.io/paused]: Unsupported value: "yes": supported values: "true", "false"`},
		{rollout.Partition, "3", ""},
		{rollout.Partition, "10%", ""},
		{rollout.Partition, "ten", `metadata.annotations[rollout.everynode.io/partition]: Invalid value: "ten": must be a number of nodes or a percentage`},
		{rollout.CanarySelector, "canary=true", ""},
		{rollout.CanarySelector, "canary in x", `metadata.annotations[rollout.everynode.io/canary-selector]: Invalid value: "canary in x": must be a label selector`},
		{rollout.ProgressDeadlineSeconds, "300", ""},
		{rollout.ProgressDeadlineSeconds, "-5", `metadata.annotations[rollout.everynode.io/progress-deadline-seconds]: Invalid value: "-5"`},
		{rollout.AutoRollback, "true", ""},
		{rollout.AutoRollback, "on", `metadata.annotations[rollout.everynode.io/auto-rollback]: Unsupported value: "on"`},
		{rollout.UnreachableBlocks, "false", ""},
		{rollout.UnreachableBlocks, "no", `metadata.annotations[rollout.everynode.io/unreachable-blocks]: Unsupported value: "no"`},
		{rollout.Prefix + "canary", "x", `metadata.annotations: Unsupported value: "rollout.everynode.io/canary": supported values: "rollout.everynode.io/auto-rollback"`},
	}
	for _, tc := range tests {
		t.Run(tc.key+"="+tc.value, func(t *testing.T) {
			ds := createDS(t, manifests[0])
			ds.Annotations[tc.key] = tc.value
			errs := ValidateCreate(resources.DaemonSets, ds)
			old := createDS(t, manifests[0])
			old.ResourceVersion, ds.ResourceVersion = "5", "5"
			upd := ValidateUpdate(resources.DaemonSets, ds, old)
			if tc.want == "" {
				if len(errs)+len(upd) > 0 {
					t.Fatalf("want valid, got %v %v", errs, upd)
				}
				return
			}
			wantFieldError(t, errs, tc.want)
			wantFieldError(t, upd, tc.want)
			// Unchanged by the update: not checked again.
			old.Annotations[tc.key] = tc.value
			if errs := ValidateUpdate(resources.DaemonSets, ds, old); len(errs) > 0 {
				t.Fatalf("unchanged annotation refused: %v", errs)
			}
		})
	}
}
