// Package daemonset is everynode's DaemonSet controller: Kubernetes'
// pkg/controller/daemon behaviour (docs/controller-rules.md) on the
// sample-controller skeleton, speaking to the API only through client.Interface.
//
// Files by concern (with the sections of docs/controller-rules.md they follow):
//   - controller.go: Config, New, Run, the work queue and workers.
//   - listwatch.go:  index names of the informers (controller/internal/informer;
//     shared with the other controllers under controller.RunAll).
//   - handlers.go:   informer event handlers; they only enqueue keys (§2.1).
//   - sync.go:       the level-triggered sync of one DaemonSet (§2.2).
//   - pace.go:       status-only syncs at most once a StatusOnlyInterval (§2.2 step 6).
//   - eligibility.go: NodeShouldRunDaemonPod and the automatic tolerations (§1).
//   - pods.go:       readiness, availability, the created pod's shape (§2.7, §3.1–3.2).
//   - claim.go:      adoption and release by selector and ownerReference (§2.3–2.4).
//   - manage.go:     podsShouldBeOnNode, burst cap, slow start, expectations use (§2.5–2.6).
//   - expectations.go: the stale-cache guard (§2.8).
//   - rolling.go:    RollingUpdate budgets and plans (§3).
//   - rollout.go:    everynode's rollout settings (pause, partition, canary
//     selector; docs/rollouts.md): which nodes may update, the old revision
//     held-back nodes get, the Progressing condition.
//   - rollback.go:   automatic rollback and the fully-available mark (docs/rollouts.md §6).
//   - unreachable.go: nodes NotReady/Unknown for longer than a grace, set
//     aside by a RollingUpdate (docs/rollouts.md §7).
//   - plan.go:       what applying a DaemonSet would do to each node (everynode
//     plan) and each node's rollout progress (rollout status --nodes), from
//     the rules above, changing nothing (docs/rollouts.md §8, §9).
//   - history.go:    ControllerRevisions: hash, data, dedup, cleanup (§4).
//   - status.go:     status counters and the write (§5).
//   - control.go:    podControl over the client, and the event reasons (events are
//     recorded through client/record, client-go's recorder).
//
// Deliberate differences from Kubernetes:
//   - Created pods are bound directly: spec.nodeName is set (there is no
//     scheduler), next to the matchFields node affinity Kubernetes writes.
//   - Nodes, and during rolling updates node-to-pod maps, are visited in name
//     order instead of Go map order, so every decision is deterministic.
//   - Node deletion re-syncs the DaemonSets that ran or wanted a pod there, so
//     status follows at once (Kubernetes waits for pod GC events).
//   - The rollout.everynode.io/ annotations (docs/rollouts.md) hold a
//     RollingUpdate back: paused, or limited to a partition or canary nodes.
//     Without them the controller behaves as Kubernetes', except:
//   - A RollingUpdate sets aside nodes NotReady or Unknown for longer than
//     Config.UnreachableGrace: they count against no budget, their pods are
//     left alone and the status counters skip them (unless annotation
//     unreachable-blocks is "true"; docs/rollouts.md §7).
//   - A node going down or coming back re-syncs the DaemonSets that run there.
//   - Events are written one by one from a bounded queue (no aggregation or
//     spam filtering as in client-go's broadcaster).
//   - While expectations are unsatisfied, a DaemonSet's status is recounted
//     at most once a StatusOnlyInterval (Kubernetes: on every sync).
//
// The controller is safe for concurrent use; Run may be called once.
package daemonset
