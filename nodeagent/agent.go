// Package nodeagent is everynode's node agent: it runs the pods bound to its
// node through a container runtime and reports their status to the API.
//
// The pod sync loop is level-triggered, like kubelet's: the desired pods come
// from a PodSource (by default a watch of pods with spec.nodeName=<node>), the
// actual containers from Runtime.ListContainers by the node label, and one
// keyed work queue syncs each pod (by UID) towards its spec: pull images
// (imagePullPolicy, ErrImagePull / ImagePullBackOff), create and start
// containers, restart exited ones under the restart policy with exponential
// back-off (CrashLoopBackOff), run liveness and readiness probes, and write the
// pod status when it changed. A pod with a deletionTimestamp has its
// containers stopped with the grace period and removed, then the pod object
// is deleted. Containers of this node that belong to no desired pod are
// removed by the relist sweep.
//
// The desired pods are the merge of two sets. The API set comes from the
// watch; with a DataDir it is also kept on disk (DataDir/pods/assigned.json,
// written atomically before a change is acted on) and loaded first at start,
// so after an agent restart with the server unreachable the pods come back,
// their running containers re-adopted by label rather than recreated. Status
// writes that fail while offline are retried, recomputed from the actual
// state, and a pod deleted from the API meanwhile is stopped once the list
// succeeds again. The static set comes from the YAML manifests in
// ManifestDir, re-read every ManifestPoll: static pods run without the API,
// and while it is reachable each is published as a mirror pod carrying its
// status (deleting the mirror does not stop the pod; it is re-created).
//
// The agent also registers its Node (labels, taints, capacity, nodeInfo,
// addresses) and posts its Ready condition with a heartbeat every
// NodeStatusPeriod, re-creating the Node if it is deleted. Of the labels and
// taints it only manages those of its configuration (remembered in the
// everynode.io/managed-labels and managed-taints annotations), so what
// kubectl or the node lifecycle controller set stays.
//
// Pod events (kubelet's Pulling, Pulled, Created, Started, Killing, BackOff,
// Unhealthy, Failed, and UnsupportedFields naming the fields of a pod the
// agent does not honour) are written best-effort from a bounded queue; they
// never block or fail a pod sync.
//
// Pods reach the API server as the agent does; when that is a loopback
// address, which pods on the runtime's bridge cannot reach, Run forwards it
// to them over raw TCP from the bridge's gateway address (docs/pods.md,
// "The API forwarder").
//
// Time comes from an injected clock, so back-off and probe timing are tested
// with a fake clock. Run owns every goroutine it starts and waits for them.
package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/client/record"
	"github.com/everynode/everynode/nodeagent/runtime"
)

// Runtime is the part of the container runtime contract (package runtime,
// whose doc states thread safety and blocking) the pod sync loop calls.
type Runtime interface {
	Version(ctx context.Context) (runtime.VersionInfo, error)
	ImageStatus(ctx context.Context, ref string) (runtime.Image, error)
	PullImage(ctx context.Context, ref string) (string, error)
	CreateContainer(ctx context.Context, spec runtime.ContainerSpec) (string, error)
	StartContainer(ctx context.Context, id string) error
	StopContainer(ctx context.Context, id string, grace time.Duration) error
	RemoveContainer(ctx context.Context, id string) error
	ListContainers(ctx context.Context, filter runtime.Labels) ([]runtime.Container, error)
	ContainerStatus(ctx context.Context, id string) (runtime.ContainerStatus, error)
	Exec(ctx context.Context, id string, cmd []string) (int, []byte, error)
}

// Defaults for Config's tuning fields.
const (
	// DefaultWorkers pods are synced in parallel; a slow runtime call or
	// probe holds one worker.
	DefaultWorkers = 4
	// DefaultRelistPeriod is how often the runtime is listed to notice exits
	// and stray containers (kubelet's PLEG relists every second).
	DefaultRelistPeriod = time.Second
	// DefaultResyncPeriod bounds how long a pod goes without a sync.
	DefaultResyncPeriod = 10 * time.Second
)

// Config configures an Agent.
type Config struct {
	// NodeName is this node's name: pods with spec.nodeName equal to it are
	// run, containers are labelled with it. Required.
	NodeName string
	// NodeIP is reported as the pods' hostIP (and podIP with host
	// networking) and as the Node's InternalIP address; may be empty.
	NodeIP string
	// LogPort is the port of the agent's log endpoint (ServeLogs), published
	// in the Node's status.daemonEndpoints.kubeletEndpoint.Port so the API
	// server can proxy pod logs; 0 publishes none.
	LogPort int32
	// Client talks to the API: status writes, pod deletion, and the default
	// Source's watch. Required.
	Client client.Interface
	// Runtime runs the containers. Required.
	Runtime Runtime
	// Clock is the time source; nil means the real clock.
	Clock clock.WithTicker
	// Logger receives the agent's logs; nil discards them.
	Logger *slog.Logger
	// DataDir holds the agent's state: the pods assigned through the API
	// (DataDir/pods/assigned.json, for restarts while the server is
	// unreachable), the pods' volumes (DataDir/pods/<uid>/volumes/<name>)
	// and the ConfigMaps, Secrets and tokens they use (DataDir/objects).
	// Empty: nothing is kept on disk and emptyDir storage is left to the
	// runtime.
	DataDir string
	// APIServer is the API server's URL as handed to pods
	// (KUBERNETES_SERVICE_HOST/PORT); empty: none. When it is a loopback
	// address and the runtime is a BridgeRuntime, pods without host
	// networking get instead the address of the agent's API forwarder,
	// which Run listens with on the bridge's gateway and the server's port.
	// ClusterCA is the CA (PEM) pods get as ca.crt beside their service
	// account token.
	APIServer string
	ClusterCA []byte
	// Tokens requests service account tokens (TokenRequest); nil: Client,
	// when it can (client.HTTP); without one, pods that need a token wait
	// with CreateContainerConfigError.
	Tokens TokenRequester
	// Source delivers the desired pods of the API set; nil means a
	// list+watch of pods with spec.nodeName=NodeName through Client, kept in
	// DataDir when one is given. A Source given here is used as is.
	Source PodSource
	// Workers is the number of pods synced in parallel (DefaultWorkers).
	Workers int
	// RelistPeriod is how often the runtime is listed (DefaultRelistPeriod).
	RelistPeriod time.Duration
	// ResyncPeriod is the longest a pod goes without a sync (DefaultResyncPeriod).
	ResyncPeriod time.Duration

	// Labels are set on the Node (--labels, see ParseLabels) besides the
	// well-known kubernetes.io/hostname, kubernetes.io/os and
	// kubernetes.io/arch, which may not be given here.
	Labels map[string]string
	// Taints are set on the Node (--taints, see ParseTaints); the
	// node.kubernetes.io/ taints belong to the node lifecycle controller and
	// may not be given here.
	Taints []corev1.Taint
	// Capacity overrides the detected capacity (cpu, memory, pods) in the
	// Node's status; allocatable equals capacity. Simulated fleets use it.
	Capacity corev1.ResourceList
	// NodeStatusPeriod is how often the Node is checked and its status and
	// heartbeat posted (DefaultNodeStatusPeriod).
	NodeStatusPeriod time.Duration

	// Images, when set, fetches an image from the servers' image store
	// when the runtime cannot pull it (docs/edge.md §4); nil: pulls only.
	Images ImageFetcher
	// PeerBlobs, when set, serves image blobs to peers on the log endpoint
	// under images.BlobsPath, authorizing requests itself.
	PeerBlobs http.Handler
	// ManifestDir holds static pod manifests (YAML or JSON, one or more
	// documents of kind Pod per file), run without the API; empty: none.
	ManifestDir string
	// ManifestPoll is how often ManifestDir is re-read and the mirror pods
	// checked (DefaultManifestPoll).
	ManifestPoll time.Duration
}

// Agent runs the pods of one node. Create it with New, then call Run once.
type Agent struct {
	cfg    Config
	clock  clock.WithTicker
	log    *slog.Logger
	rt     Runtime
	api    client.Interface
	source PodSource
	probe  prober

	pods *podCache
	// queue holds the UIDs to sync; made by Run, before any goroutine.
	queue workqueue.TypedRateLimitingInterface[types.UID]

	// scheme is the runtime's name, the containerID scheme; set by Run.
	scheme string

	mu    sync.Mutex
	state map[types.UID]*podState // touched only by the worker holding the UID

	relistMu   sync.Mutex
	lastSeen   map[types.UID]string // relist fingerprints
	relistNow  chan struct{}        // pokes the relist loop (after a full pod list)
	nodeLabels runtime.Labels       // selects this node's containers; read-only

	// facts and runtimeVersion are reported in the Node's status; set by Run.
	facts          hostFacts
	runtimeVersion string
	// health pauses the pod workers' API writes while the server is
	// unreachable.
	health *apiHealth
	// nodeMetaDone is set once the Node's managed labels and taints were
	// reconciled; touched only by the node loop.
	nodeMetaDone bool
	// static is the static pods' source and mirror pod state; nil without
	// ManifestDir.
	static *staticPods
	// objects are the ConfigMaps and Secrets the pods use, watched and kept
	// on disk.
	objects *objectCache
	// tokens are the pods' service account tokens.
	tokens *tokenManager
	// events writes the recorder's pod events; it runs under Run.
	events   *record.Broadcaster
	recorder record.EventRecorder
	// present are the images found or brought onto the node (normalized
	// name → size), reported in Node.status.images.
	present presentImages
	// prepull carries the images the Node's pre-pull annotations ask for
	// from the node loop to the pre-pull loop (latest wins).
	prepull chan []string
	// bridgeAPI is the host:port at which pods without host networking
	// reach an API server that the agent reaches on loopback (the API
	// forwarder's address); empty: they cannot. Set by Run before any
	// goroutine.
	bridgeAPI string
}

// New validates cfg and returns an Agent.
func New(cfg Config) (*Agent, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("nodeagent: config: NodeName is required")
	}
	if cfg.Runtime == nil {
		return nil, errors.New("nodeagent: config: Runtime is required")
	}
	if cfg.Client == nil {
		return nil, errors.New("nodeagent: config: Client is required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.RelistPeriod <= 0 {
		cfg.RelistPeriod = DefaultRelistPeriod
	}
	if cfg.ResyncPeriod <= 0 {
		cfg.ResyncPeriod = DefaultResyncPeriod
	}
	if cfg.NodeStatusPeriod <= 0 {
		cfg.NodeStatusPeriod = DefaultNodeStatusPeriod
	}
	if cfg.ManifestPoll <= 0 {
		cfg.ManifestPoll = DefaultManifestPoll
	}
	if err := validateNodeConfig(cfg); err != nil {
		return nil, err
	}
	a := &Agent{
		cfg:        cfg,
		clock:      cfg.Clock,
		log:        cfg.Logger.With("node", cfg.NodeName),
		rt:         cfg.Runtime,
		api:        cfg.Client,
		source:     cfg.Source,
		probe:      proberFor(cfg.Runtime),
		state:      make(map[types.UID]*podState),
		lastSeen:   make(map[types.UID]string),
		relistNow:  make(chan struct{}, 1),
		nodeLabels: runtime.Labels{runtime.LabelNode: cfg.NodeName},
		prepull:    make(chan []string, 1),
		health:     &apiHealth{clock: cfg.Clock},
	}
	tokens := cfg.Tokens
	if tr, ok := cfg.Client.(TokenRequester); ok && tokens == nil {
		tokens = tr
	}
	a.tokens = newTokenManager(tokens, cfg.DataDir, cfg.Clock)
	a.objects = newObjectCache(cfg.Client, cfg.DataDir, cfg.Clock, a.log, a.enqueue)
	// While the API server is unreachable, events are dropped rather than
	// queued behind client-go's retries.
	a.events = record.NewBroadcaster(cfg.Client, record.Options{
		Logger: a.log, Clock: cfg.Clock, CallTimeout: apiCallTimeout, Paused: a.health.paused,
	})
	a.recorder = a.events.NewRecorder(corev1.EventSource{Component: eventSource, Host: cfg.NodeName})
	var sets []string
	if cfg.ManifestDir != "" {
		sets = append(sets, setStatic)
		a.static = newStaticPods(cfg.ManifestDir, cfg.NodeName, a.log)
	}
	a.pods = newPodCache(a.enqueue, func() {
		select {
		case a.relistNow <- struct{}{}:
		default:
		}
	}, sets...)
	if a.source == nil {
		src := &apiSource{api: cfg.Client, node: cfg.NodeName, clock: cfg.Clock, log: a.log, onListed: a.health.answered}
		if a.static != nil {
			src.onMirror = a.static.poke
		}
		a.source = src
		if cfg.DataDir != "" {
			a.source = &diskSource{inner: src, store: newPodStore(cfg.DataDir, cfg.NodeName), log: a.log}
		}
	}
	return a, nil
}

// validateNodeConfig checks the configured labels and taints.
func validateNodeConfig(cfg Config) error {
	wellKnown := map[string]bool{corev1.LabelHostname: true, corev1.LabelOSStable: true, corev1.LabelArchStable: true}
	for k, v := range cfg.Labels {
		if wellKnown[k] {
			return fmt.Errorf("nodeagent: config: label %s is set by the agent itself", k)
		}
		if err := checkLabel(k, v); err != nil {
			return fmt.Errorf("nodeagent: config: label %s: %w", k, err)
		}
	}
	seen := map[string]bool{}
	for _, t := range cfg.Taints {
		if strings.HasPrefix(t.Key, ReservedTaintPrefix) {
			return fmt.Errorf("nodeagent: config: taint %s: the %s taints belong to the node lifecycle controller", t.Key, ReservedTaintPrefix)
		}
		if err := checkTaint(t); err != nil {
			return fmt.Errorf("nodeagent: config: taint %s: %w", taintID(t), err)
		}
		if seen[taintID(t)] {
			return fmt.Errorf("nodeagent: config: taint %s given twice", taintID(t))
		}
		seen[taintID(t)] = true
	}
	return nil
}

// Run syncs pods until ctx ends, then stops every goroutine it started and
// returns nil. It returns an error without starting anything when the runtime
// does not answer, and stops (containers keep running) with the source's
// error when the pod source fails. Run may be called once.
func (a *Agent) Run(ctx context.Context) error {
	v, err := a.rt.Version(ctx)
	if err != nil {
		return fmt.Errorf("nodeagent: runtime version: %w", err)
	}
	a.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](500*time.Millisecond, 30*time.Second),
		workqueue.TypedRateLimitingQueueConfig[types.UID]{Clock: a.clock})
	a.scheme = v.Name
	a.runtimeVersion = v.Name + "://" + v.Version
	a.facts = readHostFacts(hostSysFiles())
	a.log.Info("agent starting", "runtime", v.Name, "runtimeVersion", v.Version, "workers", a.cfg.Workers)

	a.events.Start()
	defer a.events.Shutdown() // after every goroutine below has stopped
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fwd := a.bridgeAPIForwarder(ctx) // before any pod sync reads bridgeAPI
	a.objects.start(ctx)
	defer a.objects.wait() // after cancel: the watches end with ctx
	var wg sync.WaitGroup
	if fwd != nil {
		wg.Add(2)
		go func() {
			defer wg.Done()
			fwd.Run(ctx)
		}()
		go func() {
			defer wg.Done()
			a.checkServingCert(ctx)
		}()
	}
	srcErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := a.source.Run(ctx, a.pods); err != nil && ctx.Err() == nil {
			srcErr <- fmt.Errorf("nodeagent: pod source: %w", err)
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.relistLoop(ctx)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.nodeLoop(ctx)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.prePullLoop(ctx)
	}()
	if a.static != nil {
		wg.Add(2)
		go func() {
			defer wg.Done()
			a.static.run(ctx, a.clock, a.cfg.ManifestPoll, a.pods.sink(setStatic))
		}()
		go func() {
			defer wg.Done()
			a.mirrorLoop(ctx)
		}()
	}
	for range a.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for a.processNext(ctx) {
			}
		}()
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-srcErr:
		a.log.Error("pod source failed, stopping", "err", runErr)
	}
	cancel()
	a.queue.ShutDown()
	wg.Wait()
	a.log.Info("agent stopped")
	return runErr
}

// enqueue asks for a sync of uid; before Run there is no queue and nothing
// to do (the first list enqueues every pod).
func (a *Agent) enqueue(uid types.UID) {
	if a.queue != nil {
		a.queue.Add(uid)
	}
}

func (a *Agent) processNext(ctx context.Context) bool {
	uid, quit := a.queue.Get()
	if quit {
		return false
	}
	defer a.queue.Done(uid)
	if ctx.Err() != nil {
		return true // shutting down: drain without syncing
	}
	wake, err := a.syncPod(ctx, uid)
	if err != nil {
		if ctx.Err() == nil {
			lvl := slog.LevelWarn
			if a.queue.NumRequeues(uid) > 0 {
				lvl = slog.LevelDebug // already reported; retrying (e.g. offline)
			}
			a.log.Log(ctx, lvl, "pod sync failed, will retry", "uid", uid, "err", err)
			a.queue.AddRateLimited(uid)
			if wake > 0 {
				// The pod's own timing (a restart after back-off) does not
				// wait for the failing part (a status write while offline).
				a.queue.AddAfter(uid, wake)
			}
		}
		return true
	}
	a.queue.Forget(uid)
	if wake > 0 {
		a.queue.AddAfter(uid, wake)
	}
	return true
}

// podStateFor returns the UID's sync state, made on first use.
func (a *Agent) podStateFor(uid types.UID) *podState {
	a.mu.Lock()
	defer a.mu.Unlock()
	st, ok := a.state[uid]
	if !ok {
		st = &podState{containers: make(map[string]*containerState)}
		a.state[uid] = st
	}
	return st
}

func (a *Agent) forget(uid types.UID) {
	a.mu.Lock()
	delete(a.state, uid)
	a.mu.Unlock()
	a.pods.forget(uid)
	a.objects.use(uid, nil)
	a.tokens.forget(string(uid))
}

func (a *Agent) knownState(uid types.UID) *podState {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state[uid]
}

// podFilter selects one pod's containers on this node.
func (a *Agent) podFilter(uid types.UID) runtime.Labels {
	return runtime.Labels{runtime.LabelNode: a.cfg.NodeName, runtime.LabelPodUID: string(uid)}
}

func podRef(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }
