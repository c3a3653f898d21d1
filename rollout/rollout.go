// Package rollout owns everynode's rollout settings: the
// rollout.everynode.io/ annotations of an apps/v1 DaemonSet, their names,
// defaults and parsing (docs/rollouts.md). The API server refuses malformed
// or unknown ones at admission with Validate; the DaemonSet controller reads
// them with Parse; the CLI's rollout verbs set them by name.
//
// Annotations rather than new spec fields keep published manifests and real
// kubectl working: an apps/v1 DaemonSet without them behaves as Kubernetes',
// except that unreachable nodes do not block its rollouts unless
// UnreachableBlocks is "true" (docs/rollouts.md §7).
package rollout

import (
	"regexp"
	"slices"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
)

// Prefix starts every rollout annotation key.
const Prefix = "rollout.everynode.io/"

// The annotation keys (docs/rollouts.md describes each with its default).
const (
	// Paused "true" holds the rollout: no pod is replaced (default "false").
	Paused = Prefix + "paused"
	// Partition "N" or "N%" updates only N nodes, or N% of the desired
	// nodes rounded up, until promoted (default: unset, every node).
	Partition = Prefix + "partition"
	// CanarySelector is a label selector: only matching nodes are updated
	// until promoted (default: unset, every node).
	CanarySelector = Prefix + "canary-selector"
	// ProgressDeadlineSeconds is how long an update may go without an
	// updated pod becoming available (default: unset, no deadline).
	ProgressDeadlineSeconds = Prefix + "progress-deadline-seconds"
	// AutoRollback "true" rolls a failed update back (default "false").
	AutoRollback = Prefix + "auto-rollback"
	// UnreachableBlocks "true" restores Kubernetes' behaviour of counting
	// pods on unreachable nodes against maxUnavailable (default "false").
	UnreachableBlocks = Prefix + "unreachable-blocks"
	// BadRevision is written by the controller when it rolls an update
	// back: the controller-revision-hash of the revision that failed. A
	// template with that hash is not rolled out again (default: unset).
	BadRevision = Prefix + "bad-revision"
)

// FullyAvailable annotates a ControllerRevision (never a DaemonSet) once
// every desired node ran an available pod of it, with that time (RFC
// 3339); automatic rollback returns only to such a revision. The
// controller writes it on DaemonSets with AutoRollback.
const FullyAvailable = Prefix + "fully-available"

// Keys returns every DaemonSet annotation key, sorted.
func Keys() []string {
	return []string{AutoRollback, BadRevision, CanarySelector, Partition, Paused, ProgressDeadlineSeconds, UnreachableBlocks}
}

// Options are a DaemonSet's parsed rollout settings. The zero value is the
// default: Kubernetes' behaviour, plus everynode's deviation for unreachable
// nodes (docs/rollouts.md §7).
type Options struct {
	// Paused holds the rollout.
	Paused bool
	// Partition limits the update to this many (or this percentage of)
	// desired nodes; nil is no limit.
	Partition *intstr.IntOrString
	// CanarySelector limits the update to matching nodes; nil is no limit.
	CanarySelector labels.Selector
	// ProgressDeadline bounds an update's progress; 0 is no deadline.
	ProgressDeadline time.Duration
	// AutoRollback rolls back an update that fails.
	AutoRollback bool
	// UnreachableBlocks counts unreachable nodes against maxUnavailable.
	UnreachableBlocks bool
	// BadRevision is the hash of a revision rolled back as failed; "" is none.
	BadRevision string
}

// Limited reports whether a partition or a canary selector holds part of
// the fleet on its old revision until promoted.
func (o Options) Limited() bool { return o.Partition != nil || o.CanarySelector != nil }

// PartitionCount is the number of nodes the partition lets update out of
// desired, percentages rounded up as Kubernetes rounds maxUnavailable;
// desired when there is no partition.
func (o Options) PartitionCount(desired int) int {
	if o.Partition == nil {
		return desired
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(o.Partition, desired, true)
	if err != nil { // Parse admits only valid values
		return 0
	}
	return min(n, desired)
}

var boolValues = []string{"true", "false"}

// partitionRE is a non-negative integer, optionally a percentage.
var partitionRE = regexp.MustCompile(`^[0-9]+%?$`)

// hashRE is a controller-revision-hash as the controller writes it
// (k8s.io/apimachinery's rand.SafeEncodeString of a 32-bit FNV hash).
var hashRE = regexp.MustCompile(`^[bcdfghjklmnpqrstvwxz2456789]{1,10}$`)

// maxDeadlineSeconds keeps the deadline a valid time.Duration with room to spare.
const maxDeadlineSeconds = 1 << 31

var annotationsPath = field.NewPath("metadata", "annotations")

// Parse reads the rollout annotations among annotations. Every malformed
// or unknown rollout.everynode.io/ key is one error, naming the key and
// its valid values; the valid ones are parsed regardless.
func Parse(annotations map[string]string) (Options, field.ErrorList) {
	var o Options
	var errs field.ErrorList
	keys := make([]string, 0, len(annotations))
	for k := range annotations {
		if len(k) >= len(Prefix) && k[:len(Prefix)] == Prefix {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys) // one order of errors
	for _, k := range keys {
		v, p := annotations[k], annotationsPath.Key(k)
		switch k {
		case Paused:
			o.Paused, errs = parseBool(p, v, errs)
		case AutoRollback:
			o.AutoRollback, errs = parseBool(p, v, errs)
		case UnreachableBlocks:
			o.UnreachableBlocks, errs = parseBool(p, v, errs)
		case Partition:
			if !partitionRE.MatchString(v) {
				errs = append(errs, field.Invalid(p, v, `must be a number of nodes or a percentage of the desired nodes from 0% to 100%, e.g. "3" or "10%"`))
				continue
			}
			if v[len(v)-1] == '%' {
				if n, err := strconv.Atoi(v[:len(v)-1]); err != nil || n > 100 {
					errs = append(errs, field.Invalid(p, v, `a percentage must be from 0% to 100%, e.g. "10%"`))
					continue
				}
				o.Partition = ptr.To(intstr.FromString(v))
				continue
			}
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil {
				errs = append(errs, field.Invalid(p, v, "must be a number of nodes from 0 to 2147483647"))
				continue
			}
			o.Partition = ptr.To(intstr.FromInt32(int32(n)))
		case CanarySelector:
			if v == "" {
				errs = append(errs, field.Invalid(p, v, `must be a non-empty label selector, e.g. "canary=true" or "zone in (lab),!gpu"`))
				continue
			}
			sel, err := labels.Parse(v)
			if err != nil {
				errs = append(errs, field.Invalid(p, v, `must be a label selector, e.g. "canary=true" or "zone in (lab),!gpu": `+err.Error()))
				continue
			}
			o.CanarySelector = sel
		case ProgressDeadlineSeconds:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1 || n > maxDeadlineSeconds {
				errs = append(errs, field.Invalid(p, v, "must be a whole number of seconds from 1 to 2147483648"))
				continue
			}
			o.ProgressDeadline = time.Duration(n) * time.Second
		case BadRevision:
			if !hashRE.MatchString(v) {
				errs = append(errs, field.Invalid(p, v, `must be a controller-revision-hash as the controller writes it (1 to 10 of "bcdfghjklmnpqrstvwxz2456789"), e.g. "5d8c9f7b6"; remove the annotation to let that revision roll out again`))
				continue
			}
			o.BadRevision = v
		default:
			errs = append(errs, field.NotSupported(annotationsPath, k, Keys()))
		}
	}
	return o, errs
}

func parseBool(p *field.Path, v string, errs field.ErrorList) (bool, field.ErrorList) {
	switch v {
	case "true":
		return true, errs
	case "false":
		return false, errs
	}
	return false, append(errs, field.NotSupported(p, v, boolValues))
}

// Validate is Parse's errors: the admission check of a DaemonSet's
// annotations.
func Validate(annotations map[string]string) field.ErrorList {
	_, errs := Parse(annotations)
	return errs
}

// ValidateUpdate checks only the rollout annotations an update adds or
// changes, so an object stored before a rule existed can still have its
// status written and its other fields edited.
func ValidateUpdate(annotations, old map[string]string) field.ErrorList {
	changed := map[string]string{}
	for k, v := range annotations {
		if ov, ok := old[k]; !ok || ov != v {
			changed[k] = v
		}
	}
	return Validate(changed)
}
