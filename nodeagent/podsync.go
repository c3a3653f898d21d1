package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/everynode/everynode/nodeagent/runtime"
	resources "github.com/everynode/everynode/resources/core"
)

// Back-off of restarts and pulls, as kubelet's.
const (
	// backoffInitial is the first restart (and pull retry) delay.
	backoffInitial = 10 * time.Second
	// backoffMax caps the doubling.
	backoffMax = 5 * time.Minute
	// backoffReset: a container that ran this long restarts with the
	// initial delay again.
	backoffReset = 10 * time.Minute
	// pullErrorShown is how long ErrImagePull stays before the pod is synced
	// again and shows ImagePullBackOff.
	pullErrorShown = time.Second
	// defaultGrace is the termination grace period when the pod gives none.
	defaultGrace = 30 * time.Second
	// mountRetry is how soon a volume that could not be set up (a hostPath
	// type check failed) is tried again.
	mountRetry = 2 * time.Second
)

// Waiting reasons, as kubelet reports them.
const (
	reasonContainerCreating  = "ContainerCreating"
	reasonCrashLoopBackOff   = "CrashLoopBackOff"
	reasonErrImagePull       = "ErrImagePull"
	reasonImagePullBackOff   = "ImagePullBackOff"
	reasonErrImageNeverPull  = "ErrImageNeverPull"
	reasonCreateConfigError  = "CreateContainerConfigError"
	reasonCreateError        = "CreateContainerError"
	reasonRunContainerError  = "RunContainerError"
	reasonContainersNotReady = "ContainersNotReady"
	reasonPodCompleted       = "PodCompleted"
	reasonPodInitializing    = "PodInitializing"
	reasonNotInitialized     = "ContainersNotInitialized"
)

// podState is what the agent remembers about one pod between syncs. It is
// touched only by the worker holding the pod's UID.
type podState struct {
	containers map[string]*containerState
	// grace is the pod's termination grace period, kept for teardown after
	// the pod object is gone.
	grace time.Duration
	// written is the last status written and base the resourceVersion of the
	// pod it was computed from: until the cache moves past base, the cache is
	// stale and written is what the API holds.
	written *corev1.PodStatus
	base    string
	// deleted is set once the pod object's deletion was requested.
	deleted bool
	// unsupportedReported is set once the UnsupportedFields event was
	// considered for this pod.
	unsupportedReported bool
}

// held is the pod status the API holds as far as the agent knows: the
// cached pod's, or the one last written while the cache has not caught up.
func (st *podState) held(pod *corev1.Pod) *corev1.PodStatus {
	if st.written != nil && st.base == pod.ResourceVersion {
		return st.written
	}
	return &pod.Status
}

func (st *podState) container(name string) *containerState {
	cs, ok := st.containers[name]
	if !ok {
		cs = &containerState{}
		st.containers[name] = cs
	}
	return cs
}

// containerState is one container's back-off and probe state.
type containerState struct {
	// crashes counts restarts since the last back-off reset.
	crashes int
	// pull back-off.
	pullFailures int
	pullRetryAt  time.Time
	pullErr      string
	// waiting is the waiting state decided by this sync, nil when none.
	waiting *corev1.ContainerStateWaiting
	// failedEvent is the message of the last Failed event, so a
	// persistent error is reported once; backOffFor is the container whose
	// crash back-off was reported.
	failedEvent, backOffFor string
	// probes, for the container probeID.
	probeID              string
	live, ready, startup probeState
}

// crashDelay is the back-off before restart n+1 after n back-off restarts.
func crashDelay(n int) time.Duration {
	d := backoffInitial
	for range n {
		d *= 2
		if d >= backoffMax {
			return backoffMax
		}
	}
	return d
}

// observed is one pod's containers, by container name, newest attempt first.
type observed map[string][]runtime.ContainerStatus

func attemptOf(labels map[string]string) int {
	n, _ := strconv.Atoi(labels[runtime.LabelAttempt])
	return n
}

// observe inspects the pod's containers.
func (a *Agent) observe(ctx context.Context, uid types.UID) (observed, error) {
	list, err := a.rt.ListContainers(ctx, a.podFilter(uid))
	if err != nil {
		return nil, fmt.Errorf("nodeagent: list containers of pod %s: %w", uid, err)
	}
	obs := make(observed)
	for _, c := range list {
		s, err := a.rt.ContainerStatus(ctx, c.ID)
		if runtime.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("nodeagent: inspect container %s: %w", c.ID, err)
		}
		name := s.Labels[runtime.LabelContainer]
		obs[name] = append(obs[name], s)
	}
	for _, l := range obs {
		slices.SortFunc(l, func(x, y runtime.ContainerStatus) int {
			if d := attemptOf(y.Labels) - attemptOf(x.Labels); d != 0 {
				return d
			}
			return y.Created.Compare(x.Created)
		})
	}
	return obs, nil
}

// syncPod drives one pod towards its spec and reports its status. It returns
// how long until the pod wants its next sync.
func (a *Agent) syncPod(ctx context.Context, uid types.UID) (time.Duration, error) {
	pod, synced := a.pods.get(uid)
	if pod == nil {
		if !synced {
			return 0, nil
		}
		return 0, a.teardown(ctx, uid)
	}
	st := a.podStateFor(uid)
	st.grace = podGrace(pod, nil)
	if pod.DeletionTimestamp != nil {
		return a.terminate(ctx, pod, st)
	}
	obs, err := a.observe(ctx, uid)
	if err != nil {
		return 0, err
	}
	now := a.clock.Now()
	wake := now.Add(a.cfg.ResyncPeriod)
	if err := a.removeUnknown(ctx, pod, obs); err != nil {
		return 0, err
	}
	held := st.held(pod)
	if held.Phase == corev1.PodSucceeded || held.Phase == corev1.PodFailed {
		// Terminal: nothing runs again and the final status stays as written.
		return 0, nil
	}
	a.reportUnsupported(pod, st)
	a.objects.use(uid, podObjectRefs(pod))
	a.refreshVolumes(ctx, pod)
	podIP := a.podIP(pod, held, obs)
	for _, cs := range st.containers {
		cs.waiting = nil
	}
	var todo []*corev1.Container
	switch {
	case !initialized(pod, obs):
		// Init containers run one at a time, in order, each to success.
		for i := range pod.Spec.InitContainers {
			ic := &pod.Spec.InitContainers[i]
			if l := obs[ic.Name]; len(l) > 0 && l[0].State == runtime.StateExited && l[0].ExitCode == 0 {
				continue
			}
			todo = append(todo, ic)
			break
		}
	default:
		for i := range pod.Spec.Containers {
			todo = append(todo, &pod.Spec.Containers[i])
		}
	}
	changed := false
	for _, c := range todo {
		w, ch, err := a.syncContainer(ctx, pod, c, st.container(c.Name), obs[c.Name], podIP, now)
		if err != nil {
			return 0, err
		}
		changed = changed || ch
		if !w.IsZero() && w.Before(wake) {
			wake = w
		}
	}
	if changed {
		if obs, err = a.observe(ctx, uid); err != nil {
			return 0, err
		}
	}
	status := a.buildStatus(pod, st, obs, now)
	wakeIn := max(wake.Sub(a.clock.Now()), 0)
	if err := a.writeStatus(ctx, pod, st, status); err != nil {
		// The containers were synced; keep their timing while the status
		// write is retried.
		return wakeIn, err
	}
	return wakeIn, nil
}

// removeUnknown removes containers whose name the spec no longer has.
func (a *Agent) removeUnknown(ctx context.Context, pod *corev1.Pod, obs observed) error {
	for name, list := range obs {
		if isInitContainer(pod, name) || slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == name }) {
			continue
		}
		for _, c := range list {
			if err := a.stopAndRemove(ctx, c, podGrace(pod, nil)); err != nil {
				return err
			}
		}
		delete(obs, name)
	}
	return nil
}

// syncContainer starts, restarts or probes one container. It returns when
// it wants the next sync (zero: no wish) and whether it changed anything.
func (a *Agent) syncContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, cs *containerState,
	list []runtime.ContainerStatus, podIP string, now time.Time) (time.Time, bool, error) {
	// Keep the newest container and its predecessor (lastState, previous logs).
	if len(list) > 2 {
		for _, old := range list[2:] {
			if err := a.stopAndRemove(ctx, old, 0); err != nil {
				return time.Time{}, false, err
			}
		}
	}
	if len(list) == 0 {
		return a.startContainer(ctx, pod, c, cs, 0, now)
	}
	cur := list[0]
	if cur.Image != c.Image {
		// The spec's image changed (the one mutable container field): replace
		// the container now, without back-off, as kubelet does.
		a.log.Info("container image changed, replacing container", "pod", podRef(pod), "container", c.Name,
			"from", cur.Image, "to", c.Image)
		if cur.State == runtime.StateRunning {
			a.event(pod, c.Name, corev1.EventTypeNormal, eventKilling, "Container %s definition changed, will be restarted", c.Name)
			if err := a.rt.StopContainer(ctx, cur.ID, podGrace(pod, nil)); err != nil && !runtime.IsNotFound(err) {
				return time.Time{}, false, fmt.Errorf("nodeagent: stop container %s: %w", cur.ID, err)
			}
		}
		return a.startContainer(ctx, pod, c, cs, attemptOf(cur.Labels)+1, now)
	}
	switch cur.State {
	case runtime.StateRunning:
		return a.probeContainer(ctx, pod, c, cs, cur, podIP, now)
	case runtime.StateCreated:
		// Created but never started (the agent was interrupted): start it.
		if err := a.rt.StartContainer(ctx, cur.ID); err != nil {
			if ctx.Err() != nil {
				return time.Time{}, false, err
			}
			cs.waiting = &corev1.ContainerStateWaiting{Reason: reasonRunContainerError, Message: err.Error()}
			return time.Time{}, true, a.stopAndRemove(ctx, cur, 0)
		}
		return time.Time{}, true, nil
	}
	policy := pod.Spec.RestartPolicy
	if isInitContainer(pod, c.Name) && policy == corev1.RestartPolicyAlways {
		policy = corev1.RestartPolicyOnFailure // an init container that succeeded is done
	}
	if !shouldRestart(policy, cur.ExitCode) {
		return time.Time{}, false, nil
	}
	finished := cur.Finished
	if finished.IsZero() {
		finished = now
	}
	if !cur.Started.IsZero() && finished.Sub(cur.Started) >= backoffReset {
		cs.crashes = 0
	}
	delay := crashDelay(cs.crashes)
	if until := finished.Add(delay); now.Before(until) {
		cs.waiting = &corev1.ContainerStateWaiting{
			Reason: reasonCrashLoopBackOff,
			Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)",
				delay, c.Name, pod.Name, pod.Namespace, pod.UID),
		}
		if cs.backOffFor != cur.ID {
			cs.backOffFor = cur.ID
			a.event(pod, c.Name, corev1.EventTypeWarning, eventBackOff, "Back-off restarting failed container %s in pod %s_%s(%s)",
				c.Name, pod.Name, pod.Namespace, pod.UID)
		}
		return until, false, nil
	}
	wake, changed, err := a.startContainer(ctx, pod, c, cs, attemptOf(cur.Labels)+1, now)
	if changed {
		cs.crashes++
	}
	return wake, changed, err
}

// initialized reports whether the pod's init containers have all succeeded
// (or an app container exists, so they did once).
func initialized(pod *corev1.Pod, obs observed) bool {
	for _, c := range pod.Spec.Containers {
		if len(obs[c.Name]) > 0 {
			return true
		}
	}
	for _, c := range pod.Spec.InitContainers {
		l := obs[c.Name]
		if len(l) == 0 || l[0].State != runtime.StateExited || l[0].ExitCode != 0 {
			return false
		}
	}
	return true
}

func isInitContainer(pod *corev1.Pod, name string) bool {
	return slices.ContainsFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == name })
}

func shouldRestart(policy corev1.RestartPolicy, exitCode int) bool {
	switch policy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return exitCode != 0
	default:
		return true
	}
}

// startContainer pulls as the policy says, then creates and starts attempt.
func (a *Agent) startContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, cs *containerState,
	attempt int, now time.Time) (time.Time, bool, error) {
	if wait, wake, err := a.ensureImage(ctx, pod, c, cs, now); err != nil || wait != nil {
		cs.waiting = wait
		return wake, false, err
	}
	if err := a.checkNonRoot(ctx, pod, c); err != nil {
		if ctx.Err() != nil {
			return time.Time{}, false, err
		}
		cs.waiting = &corev1.ContainerStateWaiting{Reason: reasonCreateConfigError, Message: err.Error()}
		a.failedEvent(pod, c.Name, cs, err)
		return time.Time{}, false, nil
	}
	spec, err := a.containerSpec(ctx, pod, c, attempt)
	if err != nil {
		if re := (*runtime.Error)(nil); errors.As(err, &re) && re.Kind == runtime.MountFailed {
			return a.mountFailed(pod, c, cs, re, now), false, nil
		}
		cs.waiting = &corev1.ContainerStateWaiting{Reason: reasonCreateConfigError, Message: err.Error()}
		a.failedEvent(pod, c.Name, cs, err)
		return time.Time{}, false, nil
	}
	log := a.log.With("pod", podRef(pod), "container", c.Name, "attempt", attempt)
	id, err := a.rt.CreateContainer(ctx, spec)
	if err != nil {
		if ctx.Err() != nil {
			return time.Time{}, false, err
		}
		if re := (*runtime.Error)(nil); errors.As(err, &re) && re.Kind == runtime.MountFailed {
			return a.mountFailed(pod, c, cs, re, now), false, nil
		}
		log.Warn("create container failed", "err", err)
		cs.waiting = &corev1.ContainerStateWaiting{Reason: reasonCreateError, Message: err.Error()}
		a.failedEvent(pod, c.Name, cs, err)
		cs.crashes++
		return now.Add(crashDelay(cs.crashes - 1)), false, nil
	}
	a.event(pod, c.Name, corev1.EventTypeNormal, eventCreated, "Created container: %s", c.Name)
	if err := a.rt.StartContainer(ctx, id); err != nil {
		if ctx.Err() != nil {
			return time.Time{}, true, err
		}
		log.Warn("start container failed", "err", err)
		cs.waiting = &corev1.ContainerStateWaiting{Reason: reasonRunContainerError, Message: err.Error()}
		a.failedEvent(pod, c.Name, cs, err)
		_ = a.rt.RemoveContainer(ctx, id)
		cs.crashes++
		return now.Add(crashDelay(cs.crashes - 1)), false, nil
	}
	log.Info("container started", "id", id, "image", c.Image)
	cs.failedEvent = ""
	a.event(pod, c.Name, corev1.EventTypeNormal, eventStarted, "Started container %s", c.Name)
	return time.Time{}, true, nil
}

// checkNonRoot refuses, as kubelet, a runAsNonRoot container that would run
// as root; without runAsUser the image's user decides.
func (a *Agent) checkNonRoot(ctx context.Context, pod *corev1.Pod, c *corev1.Container) error {
	uid, _, nonRoot := effectiveUser(pod, c)
	if nonRoot == nil || !*nonRoot {
		return nil
	}
	var img runtime.Image
	if uid == nil {
		var err error
		if img, err = a.rt.ImageStatus(ctx, c.Image); err != nil {
			return fmt.Errorf("nodeagent: image status %s: %w", c.Image, err)
		}
	}
	return verifyNonRoot(pod, c, img)
}

// mountFailed reports a volume the runtime could not set up as kubelet
// does: the container keeps waiting (ContainerCreating, PodInitializing for
// an init container), a FailedMount warning says why, and the mount is
// retried after mountRetry.
func (a *Agent) mountFailed(pod *corev1.Pod, c *corev1.Container, cs *containerState, re *runtime.Error, now time.Time) time.Time {
	reason := reasonContainerCreating
	if isInitContainer(pod, c.Name) {
		reason = reasonPodInitializing
	}
	cs.waiting = &corev1.ContainerStateWaiting{Reason: reason}
	msg := fmt.Sprintf("MountVolume.SetUp failed for volume %q : %v", re.Subject, re.Err)
	if msg != cs.failedEvent {
		cs.failedEvent = msg
		a.log.Warn("volume setup failed", "pod", podRef(pod), "container", c.Name, "volume", re.Subject, "err", re.Err)
		a.event(pod, "", corev1.EventTypeWarning, eventFailedMount, "%s", msg)
	}
	return now.Add(mountRetry)
}

// ensureImage makes the container's image present as imagePullPolicy says.
// A non-nil waiting state means the container cannot start yet.
func (a *Agent) ensureImage(ctx context.Context, pod *corev1.Pod, c *corev1.Container, cs *containerState, now time.Time) (*corev1.ContainerStateWaiting, time.Time, error) {
	if now.Before(cs.pullRetryAt) {
		return &corev1.ContainerStateWaiting{
			Reason:  reasonImagePullBackOff,
			Message: fmt.Sprintf("Back-off pulling image %q: %s", c.Image, cs.pullErr),
		}, cs.pullRetryAt, nil
	}
	img, err := a.rt.ImageStatus(ctx, c.Image)
	present := err == nil
	if present {
		a.present.add(c.Image, img.Size)
	}
	if err != nil && !runtime.IsImageNotFound(err) {
		return nil, time.Time{}, fmt.Errorf("nodeagent: image status %s: %w", c.Image, err)
	}
	switch pullPolicy(c) {
	case corev1.PullNever:
		if !present {
			return &corev1.ContainerStateWaiting{
				Reason:  reasonErrImageNeverPull,
				Message: fmt.Sprintf("Container image %q is not present with pull policy of Never", c.Image),
			}, time.Time{}, nil
		}
		return nil, time.Time{}, nil
	case corev1.PullIfNotPresent:
		if present {
			a.event(pod, c.Name, corev1.EventTypeNormal, eventPulled, "Container image %q already present on machine", c.Image)
			return nil, time.Time{}, nil
		}
	}
	a.event(pod, c.Name, corev1.EventTypeNormal, eventPulling, "Pulling image %q", c.Image)
	pullStart := a.clock.Now()
	if _, err := a.rt.PullImage(ctx, c.Image); err != nil {
		if ctx.Err() != nil {
			return nil, time.Time{}, err
		}
		if ok, ferr := a.fetchImage(ctx, pod, c); ok {
			cs.pullFailures, cs.pullRetryAt, cs.pullErr = 0, time.Time{}, ""
			return nil, time.Time{}, nil
		} else if ferr != nil {
			err = ferr
		}
		cs.pullFailures++
		cs.pullRetryAt = now.Add(crashDelay(cs.pullFailures - 1))
		cs.pullErr = err.Error()
		a.log.Warn("image pull failed", "image", c.Image, "err", err, "retryIn", crashDelay(cs.pullFailures-1))
		a.event(pod, c.Name, corev1.EventTypeWarning, eventFailed, "Failed to pull image %q: %v", c.Image, err)
		return &corev1.ContainerStateWaiting{Reason: reasonErrImagePull, Message: err.Error()}, now.Add(pullErrorShown), nil
	}
	cs.pullFailures, cs.pullRetryAt, cs.pullErr = 0, time.Time{}, ""
	a.event(pod, c.Name, corev1.EventTypeNormal, eventPulled, "Successfully pulled image %q in %s", c.Image, a.clock.Since(pullStart))
	return nil, time.Time{}, nil
}

// pullPolicy is the container's policy, defaulted as the API does: Always
// for ":latest" or untagged images, IfNotPresent otherwise.
func pullPolicy(c *corev1.Container) corev1.PullPolicy {
	if c.ImagePullPolicy != "" {
		return c.ImagePullPolicy
	}
	ref := c.Image
	if strings.Contains(ref, "@") {
		return corev1.PullIfNotPresent
	}
	last := ref[strings.LastIndex(ref, "/")+1:]
	if i := strings.LastIndex(last, ":"); i >= 0 && last[i+1:] != "latest" {
		return corev1.PullIfNotPresent
	}
	return corev1.PullAlways
}

// podGrace is the pod's termination grace period (probe overrides it for
// liveness kills).
func podGrace(pod *corev1.Pod, probe *corev1.Probe) time.Duration {
	switch {
	case probe != nil && probe.TerminationGracePeriodSeconds != nil:
		return time.Duration(*probe.TerminationGracePeriodSeconds) * time.Second
	case pod.DeletionGracePeriodSeconds != nil:
		return time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return defaultGrace
}

// failedEvent records a Failed warning for container name, unless the
// last one said the same.
func (a *Agent) failedEvent(pod *corev1.Pod, name string, cs *containerState, err error) {
	msg := "Error: " + err.Error()
	if msg == cs.failedEvent {
		return
	}
	cs.failedEvent = msg
	a.event(pod, name, corev1.EventTypeWarning, eventFailed, "%s", msg)
}

func (a *Agent) stopAndRemove(ctx context.Context, c runtime.ContainerStatus, grace time.Duration) error {
	if c.State == runtime.StateRunning {
		if err := a.rt.StopContainer(ctx, c.ID, grace); err != nil && !runtime.IsNotFound(err) {
			return fmt.Errorf("nodeagent: stop container %s: %w", c.ID, err)
		}
	}
	if err := a.rt.RemoveContainer(ctx, c.ID); err != nil && !runtime.IsNotFound(err) {
		return fmt.Errorf("nodeagent: remove container %s: %w", c.ID, err)
	}
	return nil
}

// removePodContainers stops (with grace) and removes every container of uid;
// with the pod, a Killing event is recorded for each running container.
func (a *Agent) removePodContainers(ctx context.Context, pod *corev1.Pod, uid types.UID, grace time.Duration) error {
	return a.endPodContainers(ctx, pod, uid, grace, true)
}

// endPodContainers stops (with grace) every container of uid, and removes
// them and the pod's directory when remove is set; with the pod, a Killing
// event is recorded for each running container.
func (a *Agent) endPodContainers(ctx context.Context, pod *corev1.Pod, uid types.UID, grace time.Duration, remove bool) error {
	list, err := a.rt.ListContainers(ctx, a.podFilter(uid))
	if err != nil {
		return fmt.Errorf("nodeagent: list containers of pod %s: %w", uid, err)
	}
	for _, c := range list {
		s := runtime.ContainerStatus{ID: c.ID, State: c.State}
		if pod != nil && c.State == runtime.StateRunning {
			name := c.Labels[runtime.LabelContainer]
			a.event(pod, name, corev1.EventTypeNormal, eventKilling, "Stopping container %s", name)
		}
		if !remove {
			if c.State == runtime.StateRunning {
				if err := a.rt.StopContainer(ctx, c.ID, grace); err != nil && !runtime.IsNotFound(err) {
					return fmt.Errorf("nodeagent: stop container %s: %w", c.ID, err)
				}
			}
			continue
		}
		if err := a.stopAndRemove(ctx, s, grace); err != nil {
			return err
		}
	}
	if !remove {
		return nil
	}
	if a.cfg.DataDir != "" && uid != "" {
		if err := os.RemoveAll(a.podDir(uid)); err != nil {
			return fmt.Errorf("nodeagent: remove pod dir: %w", err)
		}
	}
	return nil
}

// terminate runs a pod's graceful deletion: stop its containers, delete
// the pod object, then remove the stopped containers and the pod's
// directory. Removing them before the delete kept an engine round trip
// (about 0.1 s) between the old container's exit and the replacement pod's
// creation in every rollout (docs/benchmarks.md, "Real Docker"); kubelet
// too leaves removal for later. An agent that stops in between removes
// them at its next start (stray containers of pods it does not have).
func (a *Agent) terminate(ctx context.Context, pod *corev1.Pod, st *podState) (time.Duration, error) {
	if !st.deleted {
		grace := podGrace(pod, nil)
		a.log.Info("terminating pod", "pod", podRef(pod), "grace", grace)
		if err := a.endPodContainers(ctx, pod, pod.UID, grace, false); err != nil {
			return 0, err
		}
	}
	if a.health.paused() {
		return 0, fmt.Errorf("nodeagent: delete pod %s: %w", podRef(pod), errAPIPaused)
	}
	zero := int64(0)
	uid := pod.UID
	dctx, cancel := context.WithTimeout(ctx, apiCallTimeout)
	defer cancel()
	_, err := a.api.Delete(dctx, resources.Pods, pod.Namespace, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero,
		Preconditions:      &metav1.Preconditions{UID: &uid},
	})
	a.health.observe(err)
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return 0, fmt.Errorf("nodeagent: delete pod %s: %w", podRef(pod), err)
	}
	st.deleted = true
	// Now that the replacement can be made, remove what was stopped (and
	// again after a failure: the pod object may outlive the deletion, held
	// by a finalizer).
	if err := a.removePodContainers(ctx, nil, pod.UID, 0); err != nil {
		return 0, err
	}
	return a.cfg.ResyncPeriod, nil
}

// teardown removes the containers of a pod that is no longer desired.
func (a *Agent) teardown(ctx context.Context, uid types.UID) error {
	grace := time.Duration(0)
	if st := a.knownState(uid); st != nil {
		grace = st.grace
	}
	if err := a.removePodContainers(ctx, nil, uid, grace); err != nil {
		return err
	}
	a.forget(uid)
	return nil
}

func (a *Agent) podDir(uid types.UID) string {
	return filepath.Join(a.cfg.DataDir, "pods", string(uid))
}
