package nodeagent

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/internal/apiequal"
	resources "github.com/everynode/everynode/resources/core"
)

// mirrorState is what the mirror loop last did for one static pod.
type mirrorState struct {
	// uid is the mirror pod's UID in the API.
	uid types.UID
	// written is the status last written to that mirror pod.
	written *corev1.PodStatus
	// conflict is set while a pod that is not our mirror holds the name.
	conflict bool
}

// mirrorLoop publishes the static pods as mirror pods whenever the API is
// reachable: every ManifestPoll, and at once when the static set or a
// status changes or the pod watch saw a mirror pod change. Deleting a
// mirror pod through the API does not stop its static pod: the mirror is
// created again, as kubelet does.
func (a *Agent) mirrorLoop(ctx context.Context) {
	t := a.clock.NewTicker(a.cfg.ManifestPoll)
	defer t.Stop()
	s := a.static
	for {
		sctx, cancel := context.WithTimeout(ctx, 3*apiCallTimeout)
		err := a.syncMirrors(sctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !s.mirrorsErr:
			a.log.Warn("cannot publish mirror pods, will retry", "err", err)
		case err == nil && s.mirrorsErr:
			a.log.Info("mirror pods published")
		}
		s.mirrorsErr = err != nil
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-s.pokeC:
		}
	}
}

// syncMirrors makes the API's mirror pods match the static pods.
func (a *Agent) syncMirrors(ctx context.Context) error {
	pods, synced := a.pods.list(setStatic)
	if !synced {
		return nil
	}
	s := a.static
	var errs []error
	want := make(map[string]bool, len(pods))
	for _, p := range pods {
		want[podRef(p)] = true
		if err := a.syncMirror(ctx, p); err != nil {
			errs = append(errs, err)
		}
	}
	for key, m := range s.mirrors {
		if want[key] {
			continue
		}
		ns, name := splitRef(key)
		if err := a.deleteMirror(ctx, ns, name, m.uid); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(s.mirrors, key)
	}
	if !s.swept && len(errs) == 0 {
		// Mirrors of static pods removed while the agent was down.
		if err := a.sweepMirrors(ctx, want); err != nil {
			errs = append(errs, err)
		} else {
			s.swept = true
		}
	}
	return errors.Join(errs...)
}

// syncMirror creates, replaces or updates the mirror of one static pod.
func (a *Agent) syncMirror(ctx context.Context, p *corev1.Pod) error {
	s := a.static
	key := podRef(p)
	obj, err := a.api.Get(ctx, resources.Pods, p.Namespace, p.Name)
	if apierrors.IsNotFound(err) {
		return a.createMirror(ctx, p)
	}
	// A pod of another node holds the name: the node authorizer does not
	// let this node read it.
	held := apierrors.IsForbidden(err)
	if err != nil && !held {
		return fmt.Errorf("nodeagent: get mirror pod %s: %w", key, err)
	}
	cur, _ := obj.(*corev1.Pod)
	if !held && cur == nil {
		return fmt.Errorf("nodeagent: get mirror pod %s: got %T", key, obj)
	}
	hash, mirror := "", false
	if cur != nil {
		hash, mirror = cur.Annotations[AnnotationConfigMirror]
	}
	if !mirror {
		m := s.mirrors[key]
		if m == nil || !m.conflict {
			a.log.Warn("a pod that is not this static pod's mirror holds its name; not publishing the mirror", "pod", key)
			s.mirrors[key] = &mirrorState{conflict: true}
		}
		return nil
	}
	if hash != string(p.UID) || cur.DeletionTimestamp != nil || cur.Spec.NodeName != a.cfg.NodeName {
		// An outdated mirror (the manifest changed) or one being deleted
		// through the API: remove it now and publish it afresh.
		if err := a.deleteMirror(ctx, cur.Namespace, cur.Name, cur.UID); err != nil {
			return err
		}
		delete(s.mirrors, key)
		return a.createMirror(ctx, p)
	}
	m := s.mirrors[key]
	if m == nil || m.uid != cur.UID {
		m = &mirrorState{uid: cur.UID}
		s.mirrors[key] = m
	}
	return a.writeMirrorStatus(ctx, p, cur, m)
}

// createMirror creates the mirror pod, owned by this Node, and writes the
// static pod's status to it.
func (a *Agent) createMirror(ctx context.Context, p *corev1.Pod) error {
	s := a.static
	key := podRef(p)
	nodeObj, err := a.api.Get(ctx, resources.Nodes, "", a.cfg.NodeName)
	if err != nil {
		return fmt.Errorf("nodeagent: mirror pod %s: get node: %w", key, err)
	}
	m := p.DeepCopy()
	m.UID, m.ResourceVersion = "", ""
	m.Status = corev1.PodStatus{}
	m.Annotations[AnnotationConfigMirror] = string(p.UID)
	// NodeRestriction admits a node's mirror pod only with its Node as
	// its one controller owner (docs/security.md §3).
	controller := true
	m.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "Node", Name: a.cfg.NodeName, UID: nodeObj.GetUID(), Controller: &controller,
	}}
	obj, err := a.api.Create(ctx, m, client.WriteOptions{FieldManager: agentFieldManager})
	if apierrors.IsAlreadyExists(err) {
		s.poke() // someone was faster; look again
		return nil
	}
	if err != nil {
		return fmt.Errorf("nodeagent: create mirror pod %s: %w", key, err)
	}
	cur, ok := obj.(*corev1.Pod)
	if !ok {
		return fmt.Errorf("nodeagent: create mirror pod %s: got %T", key, obj)
	}
	a.log.Info("mirror pod created", "pod", key)
	st := &mirrorState{uid: cur.UID}
	s.mirrors[key] = st
	return a.writeMirrorStatus(ctx, p, cur, st)
}

// writeMirrorStatus writes the static pod's latest status to its mirror
// when it differs from the one last written there.
func (a *Agent) writeMirrorStatus(ctx context.Context, p, cur *corev1.Pod, m *mirrorState) error {
	status, ok := a.static.statusOf(p.UID)
	if !ok {
		return nil
	}
	status.QOSClass = cur.Status.QOSClass // the server's to set
	if m.written != nil && apiequal.Equal(m.written, &status) {
		return nil
	}
	next := cur.DeepCopy()
	next.Status = status
	if _, err := a.api.UpdateStatus(ctx, next, client.WriteOptions{FieldManager: agentFieldManager}); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			a.static.poke() // gone or changed meanwhile: look again
			return nil
		}
		return fmt.Errorf("nodeagent: update status of mirror pod %s: %w", podRef(p), err)
	}
	m.written = &status
	return nil
}

// deleteMirror deletes a mirror pod at once (grace 0), only if it still has
// uid (when given).
func (a *Agent) deleteMirror(ctx context.Context, ns, name string, uid types.UID) error {
	zero := int64(0)
	opts := metav1.DeleteOptions{GracePeriodSeconds: &zero}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	_, err := a.api.Delete(ctx, resources.Pods, ns, name, opts)
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("nodeagent: delete mirror pod %s/%s: %w", ns, name, err)
	}
	if err == nil {
		a.log.Info("mirror pod deleted", "pod", ns+"/"+name)
	}
	return nil
}

// sweepMirrors deletes this node's mirror pods whose static pod is gone.
func (a *Agent) sweepMirrors(ctx context.Context, want map[string]bool) error {
	objs, _, err := a.api.List(ctx, resources.Pods, "", client.ListOptions{FieldSelector: "spec.nodeName=" + a.cfg.NodeName})
	if err != nil {
		return fmt.Errorf("nodeagent: list mirror pods: %w", err)
	}
	for _, o := range objs {
		p, ok := o.(*corev1.Pod)
		if !ok || !isMirrorPod(p) || want[podRef(p)] {
			continue
		}
		if err := a.deleteMirror(ctx, p.Namespace, p.Name, p.UID); err != nil {
			return err
		}
	}
	return nil
}

func splitRef(key string) (namespace, name string) {
	for i := range len(key) {
		if key[i] == '/' {
			return key[:i], key[i+1:]
		}
	}
	return "", key
}
