// Package fake provides Client, an in-memory client.Interface with real
// behaviour for tests of the controllers, the agent and the CLI: resourceVersions
// from one counter, AlreadyExists/NotFound/Conflict as *apierrors.StatusError,
// label and field selectors on List and Watch, Watch from a resourceVersion
// (synthetic ADDED events for rv "" or "0"), UpdateStatus that changes only the
// status, the three patch types, Delete that honours finalizers, a call log
// (Actions) and injectable per-verb errors (Fail, FailFunc), in the manner of
// client-go's fake clientset and FakePodControl.
//
// Some of the API server's registry rules are mirrored because callers rely on
// them: uid, creationTimestamp and generation are set on create; generation is
// bumped when "spec" changes; a DaemonSet's status is cleared on create and its
// deprecated.daemonset.template.generation annotation follows template changes;
// a Pod created through Create starts in phase Pending. There is no validation
// or defaulting beyond that.
//
// All methods are safe for concurrent use.
package fake

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// Interface guard.
var _ client.Interface = (*Client)(nil)

// Verbs recorded in Actions and matched by Fail.
const (
	VerbGet    = "get"
	VerbList   = "list"
	VerbWatch  = "watch"
	VerbCreate = "create"
	VerbUpdate = "update"
	VerbPatch  = "patch"
	VerbDelete = "delete"
)

// templateGenerationAnnotation mirrors the apps/v1 view of a DaemonSet's
// internal spec.templateGeneration.
const templateGenerationAnnotation = "deprecated.daemonset.template.generation"

// historyLimit is how many past events a Client keeps for Watch from a
// resourceVersion; older versions get a 410 Gone.
const historyLimit = 10000

// Action is one recorded call.
type Action struct {
	Verb        string // one of the Verb constants
	Resource    string // plural resource name ("pods")
	Subresource string // "status" for UpdateStatus and status patches, else ""
	Namespace   string
	Name        string // empty for list and watch; generateName+"" for unnamed creates
}

// String renders the action as "verb resource[/sub] ns/name".
func (a Action) String() string {
	r := a.Resource
	if a.Subresource != "" {
		r += "/" + a.Subresource
	}
	return fmt.Sprintf("%s %s %s/%s", a.Verb, r, a.Namespace, a.Name)
}

type objKey struct {
	r         *resources.Resource
	namespace string
	name      string
}

type failure struct {
	verb, resource string
	fn             func(Action) error
}

// event is one stored change, kept for Watch replay.
type event struct {
	r    *resources.Resource
	rv   int64
	typ  watch.EventType
	prev resources.Object // nil for ADDED
	obj  resources.Object
}

// Client is an in-memory client.Interface. The zero value is not usable; call New.
type Client struct {
	mu       sync.Mutex
	clock    clock.PassiveClock
	rv       int64
	seq      int64 // uid and generateName counter
	objects  map[objKey]resources.Object
	history  []event
	watchers map[*watcher]struct{}
	actions  []Action
	failures []failure
}

// New returns a Client holding copies of objs, stored as given (no create-time
// rules applied) except that a missing uid and resourceVersion are assigned.
// It panics if an object's type is not a served resource or is a duplicate,
// which is a bug in the test.
func New(objs ...resources.Object) *Client {
	c := &Client{
		clock:    clock.RealClock{},
		objects:  map[objKey]resources.Object{},
		watchers: map[*watcher]struct{}{},
	}
	for _, o := range objs {
		if err := c.Seed(o); err != nil {
			panic(err)
		}
	}
	return c
}

// SetClock sets the clock used for creationTimestamp and deletionTimestamp.
func (c *Client) SetClock(clk clock.PassiveClock) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clock = clk
}

// Seed stores a copy of obj as given (assigning only uid and resourceVersion),
// emitting an ADDED event, without recording an action or consulting Fail.
func (c *Client) Seed(obj resources.Object) error {
	r := resources.ForObject(obj)
	if r == nil {
		return fmt.Errorf("fake: seed: unknown type %T", obj)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	o := obj.DeepCopyObject().(resources.Object)
	if !r.Namespaced {
		o.SetNamespace("")
	}
	k := objKey{r, o.GetNamespace(), o.GetName()}
	if _, ok := c.objects[k]; ok {
		return fmt.Errorf("fake: seed %s %s/%s: already exists", r.Name, k.namespace, k.name)
	}
	if o.GetUID() == "" {
		o.SetUID(c.newUID())
	}
	c.store(r, k, nil, o, watch.Added)
	return nil
}

// Actions returns a copy of the call log, oldest first.
func (c *Client) Actions() []Action {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Action(nil), c.actions...)
}

// ClearActions empties the call log.
func (c *Client) ClearActions() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.actions = nil
}

// Fail makes every later call of verb on resource return err (nil removes the
// rule). resource is a plural name ("pods"), optionally with a subresource
// ("daemonsets/status", which then matches only status writes); "*" matches any
// verb or resource. A failed call is still recorded in Actions and changes nothing.
func (c *Client) Fail(verb, resource string, err error) {
	if err == nil {
		c.FailFunc(verb, resource, nil)
		return
	}
	c.FailFunc(verb, resource, func(Action) error { return err })
}

// FailFunc is Fail with a function deciding per call (return nil to let the
// call through); fn runs with the Client's lock held and must not call it.
// A nil fn removes the rule for verb and resource.
func (c *Client) FailFunc(verb, resource string, fn func(Action) error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := c.failures[:0]
	for _, f := range c.failures {
		if f.verb != verb || f.resource != resource {
			kept = append(kept, f)
		}
	}
	c.failures = kept
	if fn != nil {
		c.failures = append(c.failures, failure{verb, resource, fn})
	}
}

// record logs a call and returns the injected error, if any. Lock held.
func (c *Client) record(a Action) error {
	c.actions = append(c.actions, a)
	for _, f := range c.failures {
		if f.verb != "*" && f.verb != a.Verb {
			continue
		}
		switch f.resource {
		case "*", a.Resource, a.Resource + "/" + a.Subresource:
		default:
			continue
		}
		if err := f.fn(a); err != nil {
			return err
		}
	}
	return nil
}

func (c *Client) newUID() types.UID {
	c.seq++
	return types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", c.seq))
}

// store writes o (which the Client then owns) under a new resourceVersion and
// broadcasts the event. Lock held.
func (c *Client) store(r *resources.Resource, k objKey, prev, o resources.Object, typ watch.EventType) {
	c.rv++
	o.SetResourceVersion(strconv.FormatInt(c.rv, 10))
	r.SetTypeMeta(o)
	if typ == watch.Deleted {
		delete(c.objects, k)
	} else {
		c.objects[k] = o
	}
	ev := event{r: r, rv: c.rv, typ: typ, prev: prev, obj: o}
	c.history = append(c.history, ev)
	if len(c.history) > historyLimit {
		c.history = append([]event(nil), c.history[len(c.history)-historyLimit/2:]...)
	}
	for w := range c.watchers {
		w.send(ev)
	}
}

func copyOut(o resources.Object) resources.Object {
	return o.DeepCopyObject().(resources.Object)
}

func resourceOf(obj client.Object) (*resources.Resource, error) {
	r := resources.ForObject(obj)
	if r == nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("fake: unknown object type %T", obj))
	}
	return r, nil
}

func (c *Client) key(r *resources.Resource, namespace, name string) objKey {
	if !r.Namespaced {
		namespace = ""
	}
	return objKey{r, namespace, name}
}

// Get implements client.Interface.
func (c *Client) Get(ctx context.Context, r *resources.Resource, namespace, name string) (client.Object, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.key(r, namespace, name)
	if err := c.record(Action{Verb: VerbGet, Resource: r.Name, Namespace: k.namespace, Name: name}); err != nil {
		return nil, err
	}
	o, ok := c.objects[k]
	if !ok {
		return nil, apierrors.NewNotFound(r.GroupResource(), name)
	}
	return copyOut(o), nil
}

// List implements client.Interface: items sorted by namespace and name.
func (c *Client) List(ctx context.Context, r *resources.Resource, namespace string, opts client.ListOptions) ([]client.Object, string, error) {
	m, err := newMatcher(r, opts)
	if err != nil {
		return nil, "", err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !r.Namespaced {
		namespace = ""
	}
	if err := c.record(Action{Verb: VerbList, Resource: r.Name, Namespace: namespace}); err != nil {
		return nil, "", err
	}
	var out []client.Object
	for k, o := range c.objects {
		if k.r != r || (namespace != "" && k.namespace != namespace) || !m.matches(o) {
			continue
		}
		out = append(out, copyOut(o))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].GetNamespace() != out[j].GetNamespace() {
			return out[i].GetNamespace() < out[j].GetNamespace()
		}
		return out[i].GetName() < out[j].GetName()
	})
	return out, strconv.FormatInt(c.rv, 10), nil
}

// Create implements client.Interface.
func (c *Client) Create(ctx context.Context, obj client.Object, opts client.WriteOptions) (client.Object, error) {
	r, err := resourceOf(obj)
	if err != nil {
		return nil, err
	}
	o := copyOut(obj)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !r.Namespaced {
		o.SetNamespace("")
	}
	name := o.GetName()
	if name == "" && o.GetGenerateName() != "" {
		c.seq++
		name = o.GetGenerateName() + utilrand.SafeEncodeString(fmt.Sprintf("%05d", c.seq%100000))
	}
	if err := c.record(Action{Verb: VerbCreate, Resource: r.Name, Namespace: o.GetNamespace(), Name: name}); err != nil {
		return nil, err
	}
	if name == "" {
		return nil, apierrors.NewBadRequest("fake: name or generateName is required")
	}
	if r.Namespaced && o.GetNamespace() == "" {
		return nil, apierrors.NewBadRequest("fake: namespace is required for " + r.Name)
	}
	o.SetName(name)
	k := c.key(r, o.GetNamespace(), name)
	if _, ok := c.objects[k]; ok {
		return nil, apierrors.NewAlreadyExists(r.GroupResource(), name)
	}
	o.SetUID(c.newUID())
	o.SetCreationTimestamp(metav1.NewTime(c.clock.Now().Truncate(time.Second)))
	o.SetDeletionTimestamp(nil)
	o.SetGeneration(1)
	o.SetResourceVersion("")
	switch t := o.(type) {
	case *appsv1.DaemonSet:
		t.Status = appsv1.DaemonSetStatus{}
		setTemplateGeneration(t, 1)
	case *corev1.Pod:
		t.Status = corev1.PodStatus{Phase: corev1.PodPending}
	}
	if opts.DryRun {
		r.SetTypeMeta(o)
		return o, nil
	}
	c.store(r, k, nil, o, watch.Added)
	return copyOut(o), nil
}

func setTemplateGeneration(ds *appsv1.DaemonSet, gen int64) {
	if ds.Annotations == nil {
		ds.Annotations = map[string]string{}
	}
	ds.Annotations[templateGenerationAnnotation] = strconv.FormatInt(gen, 10)
}

// Update implements client.Interface. The stored status is kept for resources
// with a status subresource.
func (c *Client) Update(ctx context.Context, obj client.Object, opts client.WriteOptions) (client.Object, error) {
	r, err := resourceOf(obj)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.key(r, obj.GetNamespace(), obj.GetName())
	if err := c.record(Action{Verb: VerbUpdate, Resource: r.Name, Namespace: k.namespace, Name: k.name}); err != nil {
		return nil, err
	}
	return c.update(r, k, copyOut(obj), "", opts)
}

// UpdateStatus implements client.Interface: only the status of obj is stored.
func (c *Client) UpdateStatus(ctx context.Context, obj client.Object, opts client.WriteOptions) (client.Object, error) {
	r, err := resourceOf(obj)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.key(r, obj.GetNamespace(), obj.GetName())
	if err := c.record(Action{Verb: VerbUpdate, Resource: r.Name, Subresource: "status", Namespace: k.namespace, Name: k.name}); err != nil {
		return nil, err
	}
	return c.update(r, k, copyOut(obj), "status", opts)
}

// update stores o over the object at k. For subresource "status" only o's
// status is taken; otherwise o's status is replaced by the stored one when the
// resource has a status subresource. Lock held.
func (c *Client) update(r *resources.Resource, k objKey, o resources.Object, subresource string, opts client.WriteOptions) (client.Object, error) {
	cur, ok := c.objects[k]
	if !ok {
		return nil, apierrors.NewNotFound(r.GroupResource(), k.name)
	}
	if rv := o.GetResourceVersion(); rv != "" && rv != cur.GetResourceVersion() {
		return nil, apierrors.NewConflict(r.GroupResource(), k.name,
			fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
	}
	var next resources.Object
	var err error
	if subresource == "status" {
		next, err = withField(r, cur, o, "status")
	} else {
		next, err = withField(r, o, cur, "status")
		if err == nil {
			// Immutable metadata stays as stored.
			next.SetUID(cur.GetUID())
			next.SetCreationTimestamp(cur.GetCreationTimestamp())
			next.SetGeneration(cur.GetGeneration())
			if cur.GetDeletionTimestamp() != nil {
				next.SetDeletionTimestamp(cur.GetDeletionTimestamp())
			} else {
				next.SetDeletionTimestamp(nil)
			}
			bumpGeneration(cur, next)
		}
	}
	if err != nil {
		return nil, err
	}
	next.SetNamespace(k.namespace)
	next.SetName(k.name)
	next.SetResourceVersion(cur.GetResourceVersion())
	r.SetTypeMeta(next)
	if equality.Semantic.DeepEqual(next, cur) || opts.DryRun {
		return copyOut(next), nil
	}
	if next.GetDeletionTimestamp() != nil && len(next.GetFinalizers()) == 0 {
		c.store(r, k, cur, next, watch.Deleted)
		return copyOut(next), nil
	}
	c.store(r, k, cur, next, watch.Modified)
	return copyOut(next), nil
}

// bumpGeneration increments next's generation when its spec differs from
// cur's, and for DaemonSets the template generation when the template does.
func bumpGeneration(cur, next resources.Object) {
	switch n := next.(type) {
	case *appsv1.DaemonSet:
		c := cur.(*appsv1.DaemonSet)
		if !equality.Semantic.DeepEqual(c.Spec, n.Spec) {
			n.Generation = c.Generation + 1
		}
		gen, _ := strconv.ParseInt(c.Annotations[templateGenerationAnnotation], 10, 64)
		if !equality.Semantic.DeepEqual(c.Spec.Template, n.Spec.Template) {
			gen++
		}
		setTemplateGeneration(n, max(gen, 1))
	default:
		a, errA := fieldJSON(cur, "spec")
		b, errB := fieldJSON(next, "spec")
		if errA == nil && errB == nil && string(a) != string(b) {
			next.SetGeneration(cur.GetGeneration() + 1)
		}
	}
}

// withField returns a copy of base with field taken from src (through JSON,
// so it works for every type).
func withField(r *resources.Resource, base, src resources.Object, field string) (resources.Object, error) {
	var bm, sm map[string]json.RawMessage
	if err := roundTrip(base, &bm); err != nil {
		return nil, err
	}
	if err := roundTrip(src, &sm); err != nil {
		return nil, err
	}
	if v, ok := sm[field]; ok {
		bm[field] = v
	} else {
		delete(bm, field)
	}
	data, err := json.Marshal(bm)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	out := r.New()
	if err := json.Unmarshal(data, out); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return out, nil
}

func fieldJSON(o resources.Object, field string) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := roundTrip(o, &m); err != nil {
		return nil, err
	}
	return m[field], nil
}

func roundTrip(o any, into any) error {
	data, err := json.Marshal(o)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if err := json.Unmarshal(data, into); err != nil {
		return apierrors.NewInternalError(err)
	}
	return nil
}

// Delete implements client.Interface. An object with finalizers (after adding
// "orphan" or "foregroundDeletion" for those propagation policies) only gets a
// deletionTimestamp; it is removed when an update empties its finalizers.
func (c *Client) Delete(ctx context.Context, r *resources.Resource, namespace, name string, opts metav1.DeleteOptions) (client.Object, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.key(r, namespace, name)
	if err := c.record(Action{Verb: VerbDelete, Resource: r.Name, Namespace: k.namespace, Name: name}); err != nil {
		return nil, err
	}
	cur, ok := c.objects[k]
	if !ok {
		return nil, apierrors.NewNotFound(r.GroupResource(), name)
	}
	if p := opts.Preconditions; p != nil {
		if p.UID != nil && *p.UID != cur.GetUID() {
			return nil, apierrors.NewConflict(r.GroupResource(), name,
				fmt.Errorf("precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, cur.GetUID()))
		}
		if p.ResourceVersion != nil && *p.ResourceVersion != cur.GetResourceVersion() {
			return nil, apierrors.NewConflict(r.GroupResource(), name,
				fmt.Errorf("precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p.ResourceVersion, cur.GetResourceVersion()))
		}
	}
	next := copyOut(cur)
	fin := next.GetFinalizers()
	if opts.PropagationPolicy != nil {
		switch *opts.PropagationPolicy {
		case metav1.DeletePropagationOrphan:
			fin = addString(fin, metav1.FinalizerOrphanDependents)
		case metav1.DeletePropagationForeground:
			fin = addString(fin, metav1.FinalizerDeleteDependents)
		}
	}
	if opts.DryRun != nil && len(opts.DryRun) > 0 {
		return next, nil
	}
	if len(fin) > 0 {
		if cur.GetDeletionTimestamp() != nil && len(fin) == len(cur.GetFinalizers()) {
			return next, nil
		}
		next.SetFinalizers(fin)
		if next.GetDeletionTimestamp() == nil {
			now := metav1.NewTime(c.clock.Now().Truncate(time.Second))
			next.SetDeletionTimestamp(&now)
			var grace int64
			next.SetDeletionGracePeriodSeconds(&grace)
		}
		c.store(r, k, cur, next, watch.Modified)
		return copyOut(next), nil
	}
	c.store(r, k, cur, next, watch.Deleted)
	return copyOut(next), nil
}

func addString(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(append([]string(nil), list...), s)
}
