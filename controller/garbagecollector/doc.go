// Package garbagecollector deletes what has lost its owner, the way
// Kubernetes' garbage collector and pod GC do for everynode's resources:
//
//   - A dependent (pod or ControllerRevision) whose controller and other
//     owners are all gone (not found, or re-created with another UID) is
//     deleted: background cascading deletion, the default.
//   - While an owner is being deleted with the "foregroundDeletion"
//     finalizer, its dependents are deleted; the finalizer is removed (and
//     the API then removes the owner) once no dependent with
//     blockOwnerDeletion references it any more.
//   - While an owner is being deleted with the "orphan" finalizer, its
//     ownerReference is removed from every dependent (which keeps running);
//     then the finalizer is removed.
//   - Ownerreferences to owners that are gone are removed from dependents
//     that still have a live owner.
//   - A pod bound to a Node that no longer exists is deleted (pod GC), as
//     Kubernetes' pod GC does: once the Node has been missing for the
//     quarantine (40 s), so a Node re-registered at once keeps its pods;
//     the pod is marked Failed with a DisruptionTarget condition first.
//
// Absence is always confirmed with a live GET before anything is deleted, so
// a stale cache never deletes a living object's dependents. Handlers only
// enqueue keys; a periodic resync re-checks everything.
//
// The collector is safe for concurrent use; Run may be called once.
package garbagecollector
