// Package fake provides Client, an in-memory client.Interface for tests of the
// controllers, the agent and the CLI, in the manner of client-go's fake
// clientset: resourceVersions from one counter, Watch from a resourceVersion
// (synthetic ADDED events for rv "" or "0"), a call log (Actions),
// injectable per-verb errors (Fail, FailFunc) and Cuttable, a Client behind a
// link the test can cut.
//
// Every write and read runs the API server's own rules from
// apiserver/strategy, so the fake answers as the server does: decoding,
// defaults, validation (422 Invalid with the same causes), server-set
// metadata (uid, creationTimestamp, generation that moves on spec changes
// only), managedFields, optimistic concurrency (409 Conflict), the three patch
// types and server-side apply, label and field selectors (400 for fields the
// server does not index), dry runs, and deletion with finalizers, propagation
// policies and pod grace periods. The contract test in apiserver
// (contract_test.go) sends the same requests to the fake, the in-process
// client and the HTTP server and requires the same answers.
//
// What the fake does not do: authorization and admission (a namespace need
// not exist before objects are created in it), and the garbage collector and
// node agents that finish marked deletions (tests delete with
// GracePeriodSeconds 0 or update finalizers away, as those would).
//
// All methods are safe for concurrent use.
package fake

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"

	"github.com/everynode/everynode/apiserver/strategy"
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

// DefaultManager is the field manager of writes without
// WriteOptions.FieldManager.
const DefaultManager = "fake"

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
	writer   *strategy.Writer // built by rules on first use
}

// New returns a Client holding copies of objs, stored as Seed stores them.
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

// SetClock sets the clock used for creationTimestamp, deletionTimestamp and
// managedFields times.
func (c *Client) SetClock(clk clock.PassiveClock) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clock = clk
}

// Seed stores a copy of obj as an object the API server stored earlier would
// be: defaulted (strategy.Default), with apiVersion and kind, a uid when it
// has none, and a new resourceVersion; metadata and status are kept as given
// and nothing is validated, so a test can start from any state. It emits an
// ADDED event, without recording an action or consulting Fail.
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
	strategy.Default(r, o)
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

func (c *Client) key(r *resources.Resource, namespace, name string) objKey {
	if !r.Namespaced {
		namespace = ""
	}
	return objKey{r, namespace, name}
}

// rules returns the shared write rules, building the field managers on first
// use (they take a few milliseconds, which tests that never write skip).
// Lock held.
func (c *Client) rules() (*strategy.Writer, error) {
	if c.writer != nil {
		return c.writer, nil
	}
	fields, err := strategy.NewFieldManagers(nil)
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("fake: %w", err))
	}
	c.writer = &strategy.Writer{
		Now:    func() time.Time { return c.clock.Now() }, // called with c.mu held
		NewUID: c.newUID,
		Fields: fields,
	}
	return c.writer, nil
}

// op is a write's strategy.Op; the field manager defaults to DefaultManager.
func op(r *resources.Resource, sub string, opts client.WriteOptions) strategy.Op {
	m := opts.FieldManager
	if m == "" {
		m = DefaultManager
	}
	return strategy.Op{Resource: r, Subresource: sub, Manager: m}
}

func hasSubresource(r *resources.Resource, sub string) bool {
	return slices.Contains(r.Subresources, sub)
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
	r, o, err := strategy.ClientInput(obj)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	generated, keyErr := strategy.CreateKey(r, strategy.WriteNamespace(r, o), o)
	if err := c.record(Action{Verb: VerbCreate, Resource: r.Name, Namespace: o.GetNamespace(), Name: o.GetName()}); err != nil {
		return nil, err
	}
	if keyErr != nil {
		return nil, keyErr
	}
	return c.create(op(r, "", opts), o, generated, opts.DryRun)
}

// create runs the create rules on o (owned by the call) and stores it. Lock held.
func (c *Client) create(op strategy.Op, o resources.Object, generated, dryRun bool) (client.Object, error) {
	r := op.Resource
	w, err := c.rules()
	if err != nil {
		return nil, err
	}
	if o, err = w.Create(op, o); err != nil {
		return nil, err
	}
	if err := strategy.AdmitPodPriority(o, c.priorityClasses()); err != nil {
		return nil, err
	}
	k := c.key(r, o.GetNamespace(), o.GetName())
	for try := 1; ; try++ {
		if _, taken := c.objects[k]; !taken {
			break
		}
		if !generated || try == maxGenerateNameTries {
			return nil, apierrors.NewAlreadyExists(r.GroupResource(), o.GetName())
		}
		o.SetName(strategy.GenerateName(o))
		k = c.key(r, o.GetNamespace(), o.GetName())
	}
	if dryRun {
		return o, nil
	}
	c.store(r, k, nil, o, watch.Added)
	return copyOut(o), nil
}

// priorityClasses are the stored PriorityClasses and the system ones, which
// the API server always has. Lock held.
func (c *Client) priorityClasses() []*schedulingv1.PriorityClass {
	var out []*schedulingv1.PriorityClass
	have := make(map[string]bool)
	for k, o := range c.objects {
		if pc, ok := o.(*schedulingv1.PriorityClass); ok && k.r == resources.PriorityClasses {
			out = append(out, pc)
			have[pc.Name] = true
		}
	}
	for _, pc := range strategy.SystemPriorityClasses() {
		if !have[pc.Name] {
			out = append(out, pc)
		}
	}
	return out
}

// maxGenerateNameTries bounds retries when a generated name is taken, as the
// API server does.
const maxGenerateNameTries = 5

// Update implements client.Interface.
func (c *Client) Update(ctx context.Context, obj client.Object, opts client.WriteOptions) (client.Object, error) {
	return c.updateVerb(obj, opts, "")
}

// UpdateStatus implements client.Interface.
func (c *Client) UpdateStatus(ctx context.Context, obj client.Object, opts client.WriteOptions) (client.Object, error) {
	return c.updateVerb(obj, opts, "status")
}

func (c *Client) updateVerb(obj client.Object, opts client.WriteOptions, sub string) (client.Object, error) {
	r, o, err := strategy.ClientInput(obj)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.key(r, strategy.WriteNamespace(r, o), o.GetName())
	if err := c.record(Action{Verb: VerbUpdate, Resource: r.Name, Subresource: sub, Namespace: k.namespace, Name: k.name}); err != nil {
		return nil, err
	}
	if sub != "" && !hasSubresource(r, sub) {
		return nil, apierrors.NewNotFound(r.GroupResource(), k.name+"/"+sub)
	}
	if err := strategy.CheckKey(r, k.namespace, k.name, o); err != nil {
		return nil, err
	}
	return c.update(k, op(r, sub, opts), opts.DryRun, func(cur resources.Object) (resources.Object, error) {
		if err := strategy.CheckUIDPrecondition(r, o, cur); err != nil {
			return nil, err
		}
		if err := strategy.CheckResourceVersion(r, o, cur); err != nil {
			return nil, err
		}
		return o, nil
	})
}

// update is the fake's GuaranteedUpdate: mutate turns the stored object into
// the next state, which then runs the update rules. A result equal to the
// stored object writes nothing; one that finished deleting is removed. Lock held.
func (c *Client) update(k objKey, op strategy.Op, dryRun bool, mutate func(cur resources.Object) (resources.Object, error)) (client.Object, error) {
	r := k.r
	cur, ok := c.objects[k]
	if !ok {
		return nil, apierrors.NewNotFound(r.GroupResource(), k.name)
	}
	w, err := c.rules()
	if err != nil {
		return nil, err
	}
	next, err := mutate(copyOut(cur))
	if err != nil {
		return nil, err
	}
	if next, err = w.Update(op, next, copyOut(cur)); err != nil {
		return nil, err
	}
	if dryRun {
		return next, nil
	}
	if equality.Semantic.DeepEqual(next, cur) {
		return copyOut(cur), nil
	}
	if strategy.FinishedDeleting(next) {
		c.store(r, k, cur, next, watch.Deleted)
		return copyOut(next), nil
	}
	c.store(r, k, cur, next, watch.Modified)
	return copyOut(next), nil
}

// Patch implements client.Interface: JSON patch, JSON merge patch, strategic
// merge patch, and server-side apply (types.ApplyYAMLPatchType, without
// force) on the main resource; subresource "status" changes only the status.
func (c *Client) Patch(ctx context.Context, r *resources.Resource, namespace, name string, pt types.PatchType, data []byte, opts client.WriteOptions, subresource string) (client.Object, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.key(r, namespace, name)
	if err := c.record(Action{Verb: VerbPatch, Resource: r.Name, Subresource: subresource, Namespace: k.namespace, Name: name}); err != nil {
		return nil, err
	}
	if subresource != "" && !hasSubresource(r, subresource) {
		return nil, apierrors.NewNotFound(r.GroupResource(), name+"/"+subresource)
	}
	if pt == types.ApplyYAMLPatchType && subresource == "" {
		return c.apply(k, data, opts)
	}
	return c.update(k, op(r, subresource, opts), opts.DryRun, func(cur resources.Object) (resources.Object, error) {
		next, err := strategy.ApplyPatch(r, cur, pt, data)
		if err != nil {
			return nil, err
		}
		if err := strategy.CheckKey(r, k.namespace, k.name, next); err != nil {
			return nil, err
		}
		if err := strategy.CheckResourceVersion(r, next, cur); err != nil {
			return nil, err
		}
		return next, nil
	})
}

// apply is a server-side apply by opts.FieldManager: it creates a missing
// object or merges into the stored one. Lock held.
func (c *Client) apply(k objKey, data []byte, opts client.WriteOptions) (client.Object, error) {
	r := k.r
	if err := strategy.CheckManager(opts.FieldManager); err != nil {
		return nil, err
	}
	applied, err := strategy.DecodeApplied(r, k.namespace, k.name, data, false)
	if err != nil {
		return nil, err
	}
	w, err := c.rules()
	if err != nil {
		return nil, err
	}
	o := strategy.Op{Resource: r, Manager: opts.FieldManager, Applying: true}
	if _, ok := c.objects[k]; !ok {
		obj, err := w.Fields.Apply(r, nil, applied, opts.FieldManager, false)
		if err != nil {
			return nil, err
		}
		if _, err := strategy.CreateKey(r, k.namespace, obj); err != nil {
			return nil, err
		}
		return c.create(o, obj, false, opts.DryRun)
	}
	return c.update(k, o, opts.DryRun, func(cur resources.Object) (resources.Object, error) {
		next, err := w.Fields.Apply(r, cur, applied, opts.FieldManager, false)
		if err != nil {
			return nil, err
		}
		next.SetResourceVersion(cur.GetResourceVersion())
		return next, nil
	})
}

// Delete implements client.Interface with the API server's deletion rules
// (strategy.DeletionPlan): an object with finalizers, or a pod bound to a
// node with a grace period, is only marked with a deletionTimestamp; it is
// removed when an update empties its finalizers or a delete with
// GracePeriodSeconds 0 follows. Deleting a namespace deletes its content.
func (c *Client) Delete(ctx context.Context, r *resources.Resource, namespace, name string, opts metav1.DeleteOptions) (client.Object, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.key(r, namespace, name)
	if err := c.record(Action{Verb: VerbDelete, Resource: r.Name, Namespace: k.namespace, Name: name}); err != nil {
		return nil, err
	}
	dryRun, err := strategy.ValidateDeleteOptions(&opts)
	if err != nil {
		return nil, err
	}
	if r == resources.Namespaces && strategy.ImmortalNamespace(name) {
		return nil, apierrors.NewForbidden(r.GroupResource(), name, fmt.Errorf("this namespace may not be deleted"))
	}
	cur, ok := c.objects[k]
	if !ok {
		return nil, apierrors.NewNotFound(r.GroupResource(), name)
	}
	if err := strategy.CheckPreconditions(r, cur, opts.Preconditions); err != nil {
		return nil, err
	}
	if r == resources.Namespaces {
		if dryRun {
			return copyOut(cur), nil
		}
		c.deleteNamespaceContent(name)
		c.store(r, k, cur, copyOut(cur), watch.Deleted)
		return copyOut(cur), nil
	}
	next, remove := strategy.DeletionPlan(r, cur, &opts, c.clock.Now())
	switch {
	case dryRun && remove:
		return copyOut(cur), nil
	case dryRun && next != nil:
		return next, nil
	case next == nil && !remove:
		return copyOut(cur), nil // already marked as asked
	case remove:
		c.store(r, k, cur, copyOut(cur), watch.Deleted)
		return copyOut(cur), nil
	}
	r.SetTypeMeta(next)
	c.store(r, k, cur, next, watch.Modified)
	return copyOut(next), nil
}

// deleteNamespaceContent removes every object in namespace, as the API
// server's namespace deletion does. Lock held.
func (c *Client) deleteNamespaceContent(namespace string) {
	var keys []objKey
	for k := range c.objects {
		if k.r.Namespaced && k.namespace == namespace {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].r.Name != keys[j].r.Name {
			return keys[i].r.Name < keys[j].r.Name
		}
		return keys[i].name < keys[j].name
	})
	for _, k := range keys {
		cur := c.objects[k]
		c.store(k.r, k, cur, copyOut(cur), watch.Deleted)
	}
}
