package cli

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/resources"
)

func TestParseLabel(t *testing.T) {
	tests := []struct {
		args     string
		annotate bool
		r        *resources.Resource
		names    []string
		set      map[string]string
		remove   []string
		wantErr  string
	}{
		{args: "node n1 disk=ssd", r: resources.Nodes, names: []string{"n1"}, set: map[string]string{"disk": "ssd"}},
		{args: "ds/agent tier=edge old- --overwrite", r: resources.DaemonSets, names: []string{"agent"}, set: map[string]string{"tier": "edge"}, remove: []string{"old"}},
		{args: "nodes --all example.com/role=", r: resources.Nodes, set: map[string]string{"example.com/role": ""}},
		{args: "ds agent note=hello other", annotate: true, r: resources.DaemonSets, names: []string{"agent", "other"}, set: map[string]string{"note": "hello"}},
		{args: "ds agent note=hello,world", annotate: true, r: resources.DaemonSets, names: []string{"agent"}, set: map[string]string{"note": "hello,world"}},
		{args: "node n1", wantErr: "at least one label update is required"},
		{args: "node n1", annotate: true, wantErr: "at least one annotation update is required"},
		{args: "node n1 bad=a,b", wantErr: "invalid label value"},
		{args: "node n1 =x", wantErr: "invalid label spec"},
		{args: "node n1 a=1 a-", wantErr: "can not both modify and remove"},
		{args: "node a=1", wantErr: "no name was specified"},
		{args: "node n1 --all a=1", wantErr: "name cannot be provided"},
	}
	for _, tt := range tests {
		t.Run(tt.args, func(t *testing.T) {
			c := &LabelCommand{main: NewMain(), annotate: tt.annotate}
			err := parse(c, strings.Fields(tt.args))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.r != tt.r || !slices.Equal(c.names, tt.names) || !mapsEqual(c.set, tt.set) || !slices.Equal(c.remove, tt.remove) {
				t.Fatalf("parsed r=%v names=%q set=%v remove=%q", c.r.Name, c.names, c.set, c.remove)
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestLabelPatch(t *testing.T) {
	cur := map[string]string{"tier": "edge", "keep": "1"}
	tests := []struct {
		name      string
		annotate  bool
		overwrite bool
		set       map[string]string
		remove    []string
		patch     string
		msg       string
		printed   string
		wantErr   string
	}{
		{name: "add", set: map[string]string{"disk": "ssd"}, patch: `{"metadata":{"labels":{"disk":"ssd"}}}`, msg: "labeled"},
		{name: "remove", remove: []string{"tier"}, patch: `{"metadata":{"labels":{"tier":null}}}`, msg: "unlabeled"},
		{name: "same value", set: map[string]string{"tier": "edge"}, msg: "not labeled"},
		{name: "remove missing", remove: []string{"nope"}, msg: "not labeled", printed: "label \"nope\" not found.\n"},
		{name: "refuse overwrite", set: map[string]string{"tier": "core"}, wantErr: "'tier' already has a value (edge), and --overwrite is false"},
		{name: "overwrite", overwrite: true, set: map[string]string{"tier": "core"}, patch: `{"metadata":{"labels":{"tier":"core"}}}`, msg: "labeled"},
		{name: "overwrite remove", overwrite: true, remove: []string{"keep"}, patch: `{"metadata":{"labels":{"keep":null}}}`, msg: "labeled"},
		{name: "annotate", annotate: true, set: map[string]string{"note": "hi"}, patch: `{"metadata":{"annotations":{"note":"hi"}}}`, msg: "annotated"},
		{name: "annotate refuse", annotate: true, set: map[string]string{"tier": "x"}, wantErr: "--overwrite is false but found the following declared annotation(s): 'tier' already has a value (edge)"},
		{name: "change-cause always", annotate: true, set: map[string]string{changeCauseAnnotation: "x"}, patch: `{"metadata":{"annotations":{"kubernetes.io/change-cause":"x"}}}`, msg: "annotated"},
		{name: "annotate remove", annotate: true, remove: []string{"tier"}, patch: `{"metadata":{"annotations":{"tier":null}}}`, msg: "annotated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &LabelCommand{annotate: tt.annotate, overwrite: tt.overwrite, set: tt.set, remove: tt.remove}
			if c.set == nil {
				c.set = map[string]string{}
			}
			var out bytes.Buffer
			patch, msg, err := c.patch(cur, &out)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || string(patch) != tt.patch || msg != tt.msg || out.String() != tt.printed {
				t.Fatalf("got patch %s msg %q printed %q err %v; want %s %q %q", patch, msg, out.String(), err, tt.patch, tt.msg, tt.printed)
			}
		})
	}
}

func TestParseTaints(t *testing.T) {
	tests := []struct {
		specs   string
		add     []corev1.Taint
		remove  []corev1.Taint
		wantErr string
	}{
		{specs: "node-role.kubernetes.io/master:NoSchedule", add: []corev1.Taint{{Key: "node-role.kubernetes.io/master", Effect: "NoSchedule"}}},
		{specs: "k=v:NoExecute k2:PreferNoSchedule", add: []corev1.Taint{{Key: "k", Value: "v", Effect: "NoExecute"}, {Key: "k2", Effect: "PreferNoSchedule"}}},
		{specs: "k:NoSchedule- k2- k3=v:NoExecute-", remove: []corev1.Taint{{Key: "k", Effect: "NoSchedule"}, {Key: "k2"}, {Key: "k3", Effect: "NoExecute"}}},
		{specs: "k=v", wantErr: "invalid taint spec: k=v"},
		{specs: "k:Sometimes", wantErr: "invalid taint effect: Sometimes, unsupported taint effect"},
		{specs: "k:NoSchedule k=v:NoSchedule", wantErr: "duplicated taints"},
		{specs: "k:NoSchedule k-", wantErr: "can not both modify and remove"},
		{specs: "bad key:NoSchedule", wantErr: "invalid taint spec"},
	}
	for _, tt := range tests {
		t.Run(tt.specs, func(t *testing.T) {
			add, remove, err := parseTaints(strings.Split(tt.specs, " "))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(add, tt.add) || !slices.Equal(remove, tt.remove) {
				t.Fatalf("got add %v remove %v err %v", add, remove, err)
			}
		})
	}
}

func TestParseTaintCommand(t *testing.T) {
	c := &TaintCommand{main: NewMain()}
	if err := parse(c, strings.Fields("nodes n1 k=v:NoSchedule")); err != nil || !slices.Equal(c.names, []string{"n1"}) {
		t.Fatalf("parse: %v %q", err, c.names)
	}
	c = &TaintCommand{main: NewMain()}
	if err := parse(c, strings.Fields("node/n1 k-")); err != nil || !slices.Equal(c.names, []string{"n1"}) {
		t.Fatalf("parse node/n1: %v %q", err, c.names)
	}
	c = &TaintCommand{main: NewMain()}
	if err := parse(c, strings.Fields("ds agent k:NoSchedule")); err == nil || !strings.Contains(err.Error(), "taint applies only to nodes") {
		t.Fatalf("ds: %v", err)
	}
}

func TestReorganizeTaints(t *testing.T) {
	master := corev1.Taint{Key: "node-role.kubernetes.io/master", Effect: "NoSchedule"}
	other := corev1.Taint{Key: "other", Value: "x", Effect: "NoExecute"}
	node := func(ts ...corev1.Taint) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Taints: ts}}
	}
	tests := []struct {
		name      string
		node      *corev1.Node
		overwrite bool
		add, rm   []corev1.Taint
		op        string
		patch     string
		wantErr   string
	}{
		{name: "taint", node: node(other), add: []corev1.Taint{master}, op: "tainted",
			patch: `{"spec":{"taints":[{"key":"node-role.kubernetes.io/master","effect":"NoSchedule"},{"key":"other","value":"x","effect":"NoExecute"}]}}`},
		{name: "untaint", node: node(master, other), rm: []corev1.Taint{{Key: master.Key, Effect: "NoSchedule"}}, op: "untainted",
			patch: `{"spec":{"taints":[{"key":"other","value":"x","effect":"NoExecute"}]}}`},
		{name: "untaint by key", node: node(other), rm: []corev1.Taint{{Key: "other"}}, op: "untainted", patch: `{"spec":{"taints":null}}`},
		{name: "both", node: node(other), add: []corev1.Taint{master}, rm: []corev1.Taint{{Key: "other"}}, op: "modified",
			patch: `{"spec":{"taints":[{"key":"node-role.kubernetes.io/master","effect":"NoSchedule"}]}}`},
		{name: "exists", node: node(master), add: []corev1.Taint{{Key: master.Key, Value: "v", Effect: "NoSchedule"}},
			wantErr: "node n1 already has node-role.kubernetes.io/master taint(s) with same effect(s) and --overwrite is false"},
		{name: "overwrite", node: node(master), overwrite: true, add: []corev1.Taint{{Key: master.Key, Value: "v", Effect: "NoSchedule"}}, op: "modified",
			patch: `{"spec":{"taints":[{"key":"node-role.kubernetes.io/master","value":"v","effect":"NoSchedule"}]}}`},
		{name: "missing", node: node(other), rm: []corev1.Taint{{Key: "nope", Effect: "NoSchedule"}}, wantErr: `taint "nope:NoSchedule" not found`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op, taints, err := reorganizeTaints(tt.node, tt.overwrite, tt.add, tt.rm)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			patch, err := taintPatch(taints)
			if err != nil || op != tt.op || string(patch) != tt.patch {
				t.Fatalf("got %q %s %v; want %q %s", op, patch, err, tt.op, tt.patch)
			}
		})
	}
}

func TestCordon(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	resources.Nodes.SetTypeMeta(n)
	c := fake.New(n)
	ctx := context.Background()
	var out bytes.Buffer
	for _, step := range []struct {
		cordon bool
		want   string
	}{
		{true, "node/n1 cordoned\n"},
		{true, "node/n1 already cordoned\n"},
		{false, "node/n1 uncordoned\n"},
		{false, "node/n1 already uncordoned\n"},
	} {
		out.Reset()
		if err := setUnschedulable(ctx, c, "n1", step.cordon, &out); err != nil || out.String() != step.want {
			t.Fatalf("got %q %v, want %q", out.String(), err, step.want)
		}
		obj, _ := c.Get(ctx, resources.Nodes, "", "n1")
		if obj.(*corev1.Node).Spec.Unschedulable != step.cordon {
			t.Fatalf("unschedulable = %v after %q", !step.cordon, step.want)
		}
	}
	if string(cordonPatch(false)) != `{"spec":{"unschedulable":null}}` {
		t.Fatalf("uncordon patch %s", cordonPatch(false))
	}
}

func TestParseNodeNames(t *testing.T) {
	tests := []struct {
		args    string
		want    []string
		wantErr string
	}{
		{args: "n1", want: []string{"n1"}},
		{args: "node/n1", want: []string{"n1"}},
		{args: "node n1 n2", want: []string{"n1", "n2"}},
		{args: "nodes/n1 no/n2", want: []string{"n1", "n2"}},
		{args: "pod/x", wantErr: `"pod/x" is not a node`},
	}
	for _, tt := range tests {
		t.Run(tt.args, func(t *testing.T) {
			got, err := nodeNamesArg(strings.Fields(tt.args))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("got %q %v", got, err)
			}
		})
	}
	c := &DrainCommand{main: NewMain()}
	if err := parse(c, strings.Fields("n1 --ignore-daemonsets --force --delete-emptydir-data --timeout=30s")); err != nil ||
		!c.ignoreDaemonSets || !c.force || !c.deleteEmptyDirData || c.timeout.Seconds() != 30 || !slices.Equal(c.names, []string{"n1"}) {
		t.Fatalf("drain parse: %v %+v", err, c)
	}
	if err := parse(&DrainCommand{main: NewMain()}, nil); err == nil {
		t.Fatal("drain without a node parsed")
	}
}

func TestDrainPlan(t *testing.T) {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default", UID: "ds-uid"}}
	resources.DaemonSets.SetTypeMeta(ds)
	c := fake.New(ds)
	owned := func(kind, name string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: "u", Controller: ptr.To(true)}}
	}
	pod := func(name string, refs []metav1.OwnerReference, mutate func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", OwnerReferences: refs}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		if mutate != nil {
			mutate(p)
		}
		return p
	}
	emptyDir := func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	}
	pods := []*corev1.Pod{
		pod("ds-pod", owned("DaemonSet", "agent"), nil),
		pod("gone-ds-pod", owned("DaemonSet", "gone"), nil),
		pod("bare", nil, nil),
		pod("done", nil, func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
		pod("static", nil, func(p *corev1.Pod) { p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"} }),
		pod("scratch", owned("ReplicaSet", "rs"), emptyDir),
		pod("managed", owned("ReplicaSet", "rs"), nil),
	}
	tests := []struct {
		name     string
		cmd      DrainCommand
		warnings []string
		errors   []string
		deleted  []string
	}{
		{
			name: "defaults",
			warnings: []string{
				"ignoring static (mirror) Pods, which the node's agent owns: default/static",
			},
			errors: []string{
				"cannot delete DaemonSet-managed Pods (use --ignore-daemonsets to ignore): default/ds-pod",
				"cannot delete Pods that declare no controller (use --force to override): default/bare",
				"cannot delete Pods with local storage (use --delete-emptydir-data to override): default/scratch",
				`cannot delete daemonsets.apps "gone" not found: default/gone-ds-pod`,
			},
			deleted: []string{"done", "managed"},
		},
		{
			name: "all allowed",
			cmd:  DrainCommand{ignoreDaemonSets: true, force: true, deleteEmptyDirData: true},
			warnings: []string{
				`daemonsets.apps "gone" not found: default/gone-ds-pod`,
				"deleting Pods that declare no controller: default/bare",
				"deleting Pods with local storage: default/scratch",
				"ignoring DaemonSet-managed Pods: default/ds-pod",
				"ignoring static (mirror) Pods, which the node's agent owns: default/static",
			},
			deleted: []string{"gone-ds-pod", "bare", "done", "scratch", "managed"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := tt.cmd.plan(context.Background(), c, pods)
			if err != nil {
				t.Fatal(err)
			}
			var deleted []string
			for _, p := range plan.toDelete() {
				deleted = append(deleted, p.Name)
			}
			if !slices.Equal(plan.warnings(), tt.warnings) || !slices.Equal(plan.errors(), tt.errors) || !slices.Equal(deleted, tt.deleted) {
				t.Fatalf("warnings %q\nerrors %q\ndeleted %q", plan.warnings(), plan.errors(), deleted)
			}
		})
	}
}

func TestSetImage(t *testing.T) {
	ds := &appsv1.DaemonSet{}
	ds.Name = "agent"
	ds.Spec.Template.Spec.Containers = []corev1.Container{{Name: "a", Image: "x:1"}, {Name: "b", Image: "y:1"}}
	ds.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "z:1"}}
	tests := []struct {
		images  map[string]string
		patch   string
		wantErr string
	}{
		{images: map[string]string{"a": "x:2"}, patch: `{"spec":{"template":{"spec":{"containers":[{"image":"x:2","name":"a"}]}}}}`},
		{images: map[string]string{"*": "q:1"}, patch: `{"spec":{"template":{"spec":{"containers":[{"image":"q:1","name":"a"},{"image":"q:1","name":"b"}],"initContainers":[{"image":"q:1","name":"init"}]}}}}`},
		{images: map[string]string{"nope": "q:1"}, wantErr: `unable to find container named "nope"`},
	}
	for _, tt := range tests {
		got, err := setImagePatch(ds, tt.images)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("%v: err = %v", tt.images, err)
			}
			continue
		}
		if err != nil || string(got) != tt.patch {
			t.Fatalf("%v: got %s %v, want %s", tt.images, got, err, tt.patch)
		}
	}
	c := &SetImageCommand{main: NewMain()}
	if err := parse(c, strings.Fields("ds/agent a=x:2 -n kube-system")); err != nil || c.name != "agent" || c.images["a"] != "x:2" || c.ns() != "kube-system" {
		t.Fatalf("parse: %v %+v", err, c)
	}
}

// TestCLIVerbsRegistered runs each new verb through Main.Run far enough to
// fail on its arguments, which shows it is wired to its command.
func TestCLIVerbsRegistered(t *testing.T) {
	tests := []struct {
		args, wantErr string
	}{
		{"rollout", "rollout needs a subcommand"},
		{"rollout status", "required resource not specified"},
		{"rollout history po/x", "no history viewer has been implemented for Pod"},
		{"rollout undo ds/a ds/b", "exactly one DaemonSet"},
		{"rollout restart", "required resource not specified"},
		{"label node n1", "at least one label update is required"},
		{"annotate node n1", "at least one annotation update is required"},
		{"taint node n1", "at least one taint update is required"},
		{"cordon", "USAGE: cordon NODE"},
		{"uncordon", "USAGE: uncordon NODE"},
		{"drain", "USAGE: drain NODE"},
		{"set env ds/a", `unknown set subcommand "env"; use image`},
		{"set", `set needs a subcommand; use image`},
		{"bench", `bench needs a subcommand; use fleet, report`},
	}
	for _, tt := range tests {
		t.Run(tt.args, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := NewMain().Run(context.Background(), strings.Fields(tt.args), strings.NewReader(""), &out, &errb)
			if err == nil || !strings.Contains(FormatError(err), tt.wantErr) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}
