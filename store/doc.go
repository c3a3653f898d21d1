// Package store is everynode's object storage: Kubernetes API objects in
// etcd, in kube-apiserver's protobuf storage format, with one watch cache per
// resource.
//
// # Lifecycle
//
//  1. Open starts an embedded single-member etcd in Config.DataDir/etcd (or
//     connects to Config.Endpoints), then starts one watch cache per resource
//     of resources.All, each loading the current state and following a single
//     etcd watch on the resource's key prefix. Open returns once every cache
//     is loaded. The store reads and writes the embedded etcd in process;
//     etcd serves other clients only on a unix socket, 0600 in the 0700
//     directory DataDir/run (SocketURL), never on TCP, and runs no peer
//     listener (docs/security.md, "Local users").
//  2. A compactor discards etcd history every Config.CompactInterval, up to
//     the revision it saw one interval earlier. If the embedded etcd fails
//     while the store is open, the failure is sent on Err for the owner to
//     shut down.
//  3. Close stops the compactor, closes every watcher, stops the caches, the
//     etcd client and the embedded etcd, and waits for all of their
//     goroutines. It is idempotent.
//
// # Storage
//
// Objects live under /registry/<resource>/<namespace>/<name> (cluster-scoped:
// /registry/<resource>/<name>) as kube-apiserver stores them: "k8s\x00" and
// a runtime.Unknown envelope (apiVersion, kind) around the object's protobuf;
// JSON values an earlier version wrote are still read.
// metadata.resourceVersion is not stored: it is the key's etcd mod revision,
// set on every object the store returns. The store neither defaults nor
// validates objects beyond their key; that is the API server's job.
//
// Writes are optimistic: Update and Delete compare the stored mod revision in
// an etcd transaction, and GuaranteedUpdate retries its update function until
// its write lands on the revision it read. Failures are *Error values whose
// Kind (NotFound, AlreadyExists, Conflict, Gone, Invalid, Internal) callers
// test with IsNotFound and friends, through any wrapping.
//
// # Reads
//
// Get reads etcd (linearizable). List and Watch are served by the watch cache:
// List first waits until the cache has applied everything etcd had committed
// when List was called, so a List after a completed write includes it. Watch
// resumes from a resourceVersion out of a bounded ring of recent events per
// resource, and answers Gone for one it no longer holds. The cache holds one
// decoded copy of each object's current version only: the ring keeps what
// selectors match for replaced versions, and a resuming watch reads those
// versions back from etcd's history. The Events cache keeps no objects at
// all, only what selectors match: Events are the most numerous objects and
// only people read them, so their lists and watches read them from etcd. Watchers whose field
// selector requires an exact spec.nodeName are indexed by that node, so a
// pod change is offered only to the watchers of the pod's old and new node
// (plus unindexed watchers), not to every agent's watcher.
//
// # Concurrency
//
// Store's methods are safe for concurrent use. Objects passed in are not
// modified. Objects returned by Get, Create, Update, GuaranteedUpdate and
// Delete belong to the caller; objects returned by List and carried by watch
// events are shared with the cache and other readers and must not be
// modified (DeepCopy them first). A slow watcher never blocks the cache or
// other watchers: it is closed when its buffer overflows.
package store
