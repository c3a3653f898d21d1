package apiserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/everynode/everynode/apiserver/pki"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// kubectlEnv is an API server on a real store, served over TLS on
// 127.0.0.1:0 exactly as `everynode server` serves it, with a kubeconfig
// for the kubectl on PATH and a fresh discovery cache.
type kubectlEnv struct {
	t          *testing.T
	s          *Server
	c          client.Interface // in-process client for assertions
	kubeconfig string
	cacheDir   string
}

// newKubectlEnv skips the test when kubectl is not on PATH, unless
// EVERYNODE_REQUIRE_KUBECTL=1 (CI), which makes it fail. Each configure
// function may adjust the server's Config before it starts.
func newKubectlEnv(t *testing.T, configure ...func(*Config)) *kubectlEnv {
	t.Helper()
	if _, err := exec.LookPath("kubectl"); err != nil {
		if os.Getenv("EVERYNODE_REQUIRE_KUBECTL") == "1" {
			t.Fatalf("kubectl is required (EVERYNODE_REQUIRE_KUBECTL=1) but not on PATH: %v", err)
		}
		t.Skipf("SKIPPING real-kubectl test: kubectl not on PATH (%v); set EVERYNODE_REQUIRE_KUBECTL=1 to fail instead", err)
	}
	st := openStore(t)
	dir := t.TempDir()
	cluster, err := pki.Load(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatalf("pki.Load: %v", err)
	}
	cfg := Config{Store: st, Authenticator: cluster, Logger: testLogger()}
	for _, f := range configure {
		f(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s.EnsureNamespaces(testCtx(t), "default", "kube-system"); err != nil {
		t.Fatalf("EnsureNamespaces: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, ln, cluster.TLSConfig()) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	k := &kubectlEnv{
		t: t, s: s, c: NewLocalClient(s, "test", mastersGroup),
		kubeconfig: filepath.Join(dir, "kubeconfig"), cacheDir: filepath.Join(dir, "cache"),
	}
	if err := pki.WriteKubeconfig(k.kubeconfig, "https://"+ln.Addr().String(), cluster.CAPEM(), cluster.AdminToken(), "everynode"); err != nil {
		t.Fatalf("WriteKubeconfig: %v", err)
	}
	return k
}

// kubectlResult is one finished kubectl run.
type kubectlResult struct {
	out, err string
	code     int
}

// run runs kubectl with the env's kubeconfig and cache, stdin as its input.
func (k *kubectlEnv) run(stdin string, env []string, args ...string) kubectlResult {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	full := append([]string{"--kubeconfig", k.kubeconfig, "--cache-dir", k.cacheDir}, args...)
	cmd := exec.CommandContext(ctx, "kubectl", full...)
	cmd.Env = append(append(os.Environ(), "KUBECONFIG="+k.kubeconfig), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := kubectlResult{out: out.String(), err: errb.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		res.code = exit.ExitCode()
	case err != nil:
		k.t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	return res
}

// ok runs kubectl and fails the test unless it exits 0; it returns stdout.
func (k *kubectlEnv) ok(args ...string) string {
	k.t.Helper()
	return k.okIn("", args...)
}

func (k *kubectlEnv) okIn(stdin string, args ...string) string {
	k.t.Helper()
	r := k.run(stdin, nil, args...)
	if r.code != 0 {
		k.t.Fatalf("kubectl %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.out, r.err)
	}
	return r.out
}

// fails runs kubectl, wants a non-zero exit and returns stderr.
func (k *kubectlEnv) fails(stdin string, args ...string) string {
	k.t.Helper()
	r := k.run(stdin, nil, args...)
	if r.code == 0 {
		k.t.Fatalf("kubectl %s succeeded, want failure\nstdout: %s", strings.Join(args, " "), r.out)
	}
	return r.err
}

func (k *kubectlEnv) get(r *resources.Resource, ns, name string) client.Object {
	k.t.Helper()
	obj, err := k.c.Get(testCtx(k.t), r, ns, name)
	if err != nil {
		k.t.Fatalf("get %s %s/%s: %v", r.Name, ns, name, err)
	}
	return obj
}

func wantContains(t *testing.T, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("output lacks %q:\n%s", w, got)
		}
	}
}

func TestKubectlExplain(t *testing.T) {
	k := newKubectlEnv(t)
	out := k.ok("explain", "daemonset.spec")
	wantContains(t, out, "KIND:       DaemonSet", "VERSION:    v1", "FIELD: spec <DaemonSetSpec>",
		"template\t<PodTemplateSpec> -required-", "updateStrategy\t<DaemonSetUpdateStrategy>")
	out = k.ok("explain", "pod.spec.containers")
	wantContains(t, out, "KIND:       Pod", "FIELD: containers <[]Container>", "image\t<string>", "name\t<string> -required-")
	out = k.ok("explain", "nodes.spec.taints.effect")
	wantContains(t, out, "FIELD: effect <string>")
}

// writeFile writes a manifest into the test's temp dir and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// dsManifest is a DaemonSet manifest as users write them.
func dsManifest(name, image string, extraLabels ...string) string {
	labels := "    app: " + name + "\n"
	for _, l := range extraLabels {
		k, v, _ := strings.Cut(l, "=")
		labels += "    " + k + ": \"" + v + "\"\n"
	}
	return `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: ` + name + `
  labels:
` + labels + `spec:
  selector:
    matchLabels:
      app: ` + name + `
  template:
    metadata:
      labels:
        app: ` + name + `
    spec:
      containers:
      - name: ` + name + `
        image: ` + image + "\n"
}

// redisManifest is the redis-ds DaemonSet of the tutorial docs/cli.md walks
// through (the same file as apiserver/strategy/testdata/redis-ds.yaml).
const redisManifest = `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: redis-ds
  labels:
    app: redis-ds

spec:
  selector:
    matchLabels:
      name: redis-ds

  template:
    metadata:
      labels:
        name: redis-ds
    spec:
      containers:
        - image: redis:5-alpine
          name: redis
          ports:
            - containerPort: 6379
      tolerations:
        - key: node-role.kubernetes.io/master
          effect: NoSchedule
          operator: Exists
`

// fluentdManifest is the DaemonSet example of the Kubernetes documentation
// (apiserver/strategy/testdata/fluentd-elasticsearch.yaml; resources,
// volumes, tolerations; namespace kube-system).
const fluentdManifest = `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: fluentd-elasticsearch
  namespace: kube-system
  labels:
    k8s-app: fluentd-logging
spec:
  selector:
    matchLabels:
      name: fluentd-elasticsearch
  template:
    metadata:
      labels:
        name: fluentd-elasticsearch
    spec:
      tolerations:
      # this toleration is to have the daemonset runnable on master nodes
      # remove it if your masters can't run pods
      - key: node-role.kubernetes.io/master
        effect: NoSchedule
      containers:
      - name: fluentd-elasticsearch
        image: fluent/fluentd-kubernetes-daemonset:v1.7.1-debian-syslog-1.0
        resources:
          limits:
            memory: 200Mi
          requests:
            cpu: 100m
            memory: 200Mi
        volumeMounts:
        - name: varlog
          mountPath: /var/log
        - name: varlibdockercontainers
          mountPath: /var/lib/docker/containers
          readOnly: true
      terminationGracePeriodSeconds: 30
      volumes:
      - name: varlog
        hostPath:
          path: /var/log
      - name: varlibdockercontainers
        hostPath:
          path: /var/lib/docker/containers
`

func (k *kubectlEnv) createDS(ns, name, image string, extraLabels ...string) *appsv1.DaemonSet {
	k.t.Helper()
	ds := newDS(name)
	ds.Namespace = ns
	ds.Spec.Template.Spec.Containers[0].Name = name
	ds.Spec.Template.Spec.Containers[0].Image = image
	for _, l := range extraLabels {
		key, v, _ := strings.Cut(l, "=")
		ds.Labels[key] = v
	}
	out, err := k.c.Create(testCtx(k.t), ds, client.WriteOptions{})
	if err != nil {
		k.t.Fatalf("create DaemonSet %s/%s: %v", ns, name, err)
	}
	return out.(*appsv1.DaemonSet)
}

// createNode registers a Ready node as an agent would.
func (k *kubectlEnv) createNode(name string, labels map[string]string) {
	k.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	out, err := k.c.Create(testCtx(k.t), n, client.WriteOptions{})
	if err != nil {
		k.t.Fatalf("create node: %v", err)
	}
	n = out.(*corev1.Node)
	n.Status = corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "AgentReady",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
		NodeInfo:  corev1.NodeSystemInfo{KubeletVersion: "v1.32.0", OSImage: "Alpine Linux", KernelVersion: "6.6", ContainerRuntimeVersion: "docker://28.5.2"},
	}
	if _, err := k.c.UpdateStatus(testCtx(k.t), n, client.WriteOptions{}); err != nil {
		k.t.Fatalf("node status: %v", err)
	}
}

func (k *kubectlEnv) ds(ns, name string) *appsv1.DaemonSet {
	k.t.Helper()
	return k.get(resources.DaemonSets, ns, name).(*appsv1.DaemonSet)
}

func (k *kubectlEnv) node(name string) *corev1.Node {
	k.t.Helper()
	return k.get(resources.Nodes, "", name).(*corev1.Node)
}

// lines splits output into rows of whitespace-separated fields.
func lines(out string) [][]string {
	var rows [][]string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		rows = append(rows, strings.Fields(l))
	}
	return rows
}

func wantRows(t *testing.T, out string, want ...string) {
	t.Helper()
	rows := lines(out)
	if len(rows) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(rows), len(want), out)
	}
	for i, w := range want {
		if got := strings.Join(rows[i], " "); got != w {
			t.Errorf("line %d = %q, want %q\n%s", i, got, w, out)
		}
	}
}

// ageRE matches kubectl's human durations ("0s", "5m", "2m30s", "3h").
var ageRE = regexp.MustCompile(`^[0-9]+[smhdy]([0-9]+[smh])?$`)

// noAge drops the AGE header and age values, which depend on timing.
func noAge(out string) string {
	var b strings.Builder
	for _, row := range lines(out) {
		var kept []string
		for _, f := range row {
			if f != "AGE" && !ageRE.MatchString(f) {
				kept = append(kept, f)
			}
		}
		b.WriteString(strings.Join(kept, " ") + "\n")
	}
	return b.String()
}

func TestKubectlGet(t *testing.T) {
	k := newKubectlEnv(t)
	k.createNode("node-1", map[string]string{"node-role.kubernetes.io/master": ""})
	ds := k.createDS("default", "agent", "busybox:1.36")
	k.createDS("kube-system", "edge", "busybox:1.37")
	pod := newPod("agent-x", "node-1")
	pod.Namespace = "default"
	pod.Labels = map[string]string{"app": "agent"}
	if _, err := k.c.Create(testCtx(t), pod, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	cr := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-1", Namespace: "default", Labels: map[string]string{"app": "agent"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: ds.UID, Controller: ptr.To(true)}}},
		Data: runtime.RawExtension{Raw: []byte(`{"spec":{}}`)}, Revision: 1,
	}
	if _, err := k.c.Create(testCtx(t), cr, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}

	wantRows(t, noAge(k.ok("get", "ds")),
		"NAME DESIRED CURRENT READY UP-TO-DATE AVAILABLE NODE SELECTOR",
		"agent 0 0 0 0 0 <none>")
	wantRows(t, noAge(k.ok("get", "ds", "-o", "wide")),
		"NAME DESIRED CURRENT READY UP-TO-DATE AVAILABLE NODE SELECTOR CONTAINERS IMAGES SELECTOR",
		"agent 0 0 0 0 0 <none> agent busybox:1.36 app=agent")
	wantRows(t, noAge(k.ok("get", "ds", "-A")),
		"NAMESPACE NAME DESIRED CURRENT READY UP-TO-DATE AVAILABLE NODE SELECTOR",
		"default agent 0 0 0 0 0 <none>",
		"kube-system edge 0 0 0 0 0 <none>")
	wantRows(t, noAge(k.ok("get", "ds", "--show-labels")),
		"NAME DESIRED CURRENT READY UP-TO-DATE AVAILABLE NODE SELECTOR LABELS",
		"agent 0 0 0 0 0 <none> app=agent")
	wantRows(t, noAge(k.ok("get", "pods", "-o", "wide")),
		"NAME READY STATUS RESTARTS IP NODE NOMINATED NODE READINESS GATES",
		"agent-x 0/1 Pending 0 <none> node-1 <none> <none>")
	wantRows(t, noAge(k.ok("get", "nodes", "-o", "wide")),
		"NAME STATUS ROLES VERSION INTERNAL-IP EXTERNAL-IP OS-IMAGE KERNEL-VERSION CONTAINER-RUNTIME",
		"node-1 Ready master v1.32.0 10.0.0.1 <none> Alpine Linux 6.6 docker://28.5.2")
	wantRows(t, noAge(k.ok("get", "controllerrevisions")),
		"NAME CONTROLLER REVISION", "agent-1 daemonset.apps/agent 1")
	wantRows(t, noAge(k.ok("get", "ns", "default")), "NAME STATUS", "default Active")
	wantContains(t, k.ok("get", "all"), "pod/agent-x", "daemonset.apps/agent")
	// --sort-by asks for includeObject=Object; -L reads the row metadata.
	wantRows(t, noAge(k.ok("get", "ds", "-A", "--sort-by=.spec.template.spec.containers[0].image", "-L", "app")),
		"NAMESPACE NAME DESIRED CURRENT READY UP-TO-DATE AVAILABLE NODE SELECTOR APP",
		"default agent 0 0 0 0 0 <none> agent",
		"kube-system edge 0 0 0 0 0 <none> edge")

	yml := k.ok("get", "ds", "agent", "-o", "yaml")
	wantContains(t, yml, "apiVersion: apps/v1", "kind: DaemonSet", "image: busybox:1.36", "uid: "+string(ds.UID))
	var list struct {
		Kind  string `json:"kind"`
		Items []appsv1.DaemonSet
	}
	if err := json.Unmarshal([]byte(k.ok("get", "ds", "-A", "-o", "json")), &list); err != nil || list.Kind != "List" || len(list.Items) != 2 {
		t.Fatalf("get -o json: kind %q, %d items, %v", list.Kind, len(list.Items), err)
	}
	if got := k.ok("get", "ds", "-A", "-o", "jsonpath={.items[*].metadata.name}"); got != "agent edge" {
		t.Errorf("jsonpath = %q", got)
	}
	if got := k.ok("get", "ds", "-o", "name"); got != "daemonset.apps/agent\n" {
		t.Errorf("-o name = %q", got)
	}
	if r := k.run("", nil, "get", "pods", "-n", "kube-system"); r.code != 0 || !strings.Contains(r.err, "No resources found in kube-system namespace.") {
		t.Errorf("empty list: exit %d, stderr %q", r.code, r.err)
	}
	wantContains(t, k.fails("", "get", "ds", "missing"), `Error from server (NotFound): daemonsets.apps "missing" not found`)
}

func TestKubectlApply(t *testing.T) {
	k := newKubectlEnv(t)
	f := writeFile(t, "ds.yaml", dsManifest("agent", "busybox:1.36"))

	// Client-side apply: created, unchanged, configured.
	wantContains(t, k.ok("apply", "-f", f), "daemonset.apps/agent created")
	if ann := k.ds("default", "agent").Annotations["kubectl.kubernetes.io/last-applied-configuration"]; !strings.Contains(ann, "busybox:1.36") {
		t.Fatalf("last-applied annotation %q", ann)
	}
	rv := k.ds("default", "agent").ResourceVersion
	wantContains(t, k.ok("apply", "-f", f), "daemonset.apps/agent unchanged")
	if got := k.ds("default", "agent").ResourceVersion; got != rv {
		t.Fatalf("unchanged apply wrote: resourceVersion %s → %s", rv, got)
	}
	f = writeFile(t, "ds.yaml", dsManifest("agent", "busybox:1.37"))
	wantContains(t, k.ok("apply", "-f", f), "daemonset.apps/agent configured")
	if img := k.ds("default", "agent").Spec.Template.Spec.Containers[0].Image; img != "busybox:1.37" {
		t.Fatalf("image after configured apply: %s", img)
	}

	// Server-side apply over the client-side applied object (kubectl migrates
	// the client-side managers and sends its kubectl-last-applied follow-up),
	// then once more without change.
	f = writeFile(t, "ds.yaml", dsManifest("agent", "busybox:1.38"))
	wantContains(t, k.ok("apply", "--server-side", "-f", f), "daemonset.apps/agent serverside-applied")
	ds := k.ds("default", "agent")
	if img := ds.Spec.Template.Spec.Containers[0].Image; img != "busybox:1.38" {
		t.Fatalf("image after server-side apply: %s", img)
	}
	// kubectl's csaupgrade moved the client-side manager to "kubectl", and its
	// follow-up apply as kubectl-last-applied owns the annotation.
	if m := findManager(ds.ManagedFields, "kubectl-last-applied"); m == nil || m.Operation != metav1.ManagedFieldsOperationApply ||
		!strings.Contains(string(m.FieldsV1.Raw), "last-applied-configuration") {
		t.Errorf("no kubectl-last-applied Apply manager: %+v", ds.ManagedFields)
	}
	if m := findManager(ds.ManagedFields, "kubectl-client-side-apply"); m != nil {
		t.Errorf("client-side apply manager not migrated: %s", m.FieldsV1.Raw)
	}
	if m := findManager(ds.ManagedFields, "kubectl"); m == nil || m.Operation != metav1.ManagedFieldsOperationApply {
		t.Fatalf("no kubectl Apply manager: %+v", ds.ManagedFields)
	}
	if ann := ds.Annotations["kubectl.kubernetes.io/last-applied-configuration"]; !strings.Contains(ann, "busybox:1.38") {
		t.Errorf("last-applied annotation not kept up to date by the apply: %q", ann)
	}
	rv = ds.ResourceVersion
	wantContains(t, k.ok("apply", "--server-side", "-f", f), "daemonset.apps/agent serverside-applied")
	if got := k.ds("default", "agent").ResourceVersion; got != rv {
		t.Fatalf("second server-side apply wrote: resourceVersion %s → %s", rv, got)
	}

	// The tutorial manifest, server-side from scratch (the PATCH creates it),
	// then a conflicting apply by another manager, refused and then forced.
	redis := writeFile(t, "redis.yaml", redisManifest)
	wantContains(t, k.ok("apply", "--server-side", "-f", redis), "daemonset.apps/redis-ds serverside-applied")
	rv = k.ds("default", "redis-ds").ResourceVersion
	wantContains(t, k.ok("apply", "--server-side", "-f", redis), "serverside-applied")
	if got := k.ds("default", "redis-ds").ResourceVersion; got != rv {
		t.Fatalf("second server-side apply of redis-ds wrote")
	}
	changed := writeFile(t, "redis2.yaml", strings.Replace(redisManifest, "redis:5-alpine", "redis:6-alpine", 1))
	wantContains(t, k.fails("", "apply", "--server-side", "--field-manager=other", "-f", changed),
		`Apply failed with 1 conflict: conflict with "kubectl"`, ".spec.template.spec.containers[name=\"redis\"].image", "--force-conflicts")
	k.ok("apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", changed)
	if img := k.ds("default", "redis-ds").Spec.Template.Spec.Containers[0].Image; img != "redis:6-alpine" {
		t.Fatalf("forced apply image %s", img)
	}

	// The other tutorial manifest, client-side then server-side, each twice.
	fluentd := writeFile(t, "fluentd.yaml", fluentdManifest)
	wantContains(t, k.ok("apply", "-f", fluentd), "daemonset.apps/fluentd-elasticsearch created")
	wantContains(t, k.ok("apply", "-f", fluentd), "daemonset.apps/fluentd-elasticsearch unchanged")
	wantContains(t, k.ok("apply", "--server-side", "-f", fluentd), "daemonset.apps/fluentd-elasticsearch serverside-applied")
	rv = k.ds("kube-system", "fluentd-elasticsearch").ResourceVersion
	k.ok("apply", "--server-side", "-f", fluentd)
	fl := k.ds("kube-system", "fluentd-elasticsearch")
	if fl.ResourceVersion != rv || fl.Spec.Template.Spec.Containers[0].Resources.Limits.Memory().String() != "200Mi" {
		t.Fatalf("fluentd after two server-side applies: rv %s → %s, limits %v", rv, fl.ResourceVersion, fl.Spec.Template.Spec.Containers[0].Resources.Limits)
	}
	// --dry-run=server changes nothing.
	k.ok("apply", "--server-side", "--dry-run=server", "-f", writeFile(t, "dry.yaml", strings.Replace(fluentdManifest, "200Mi", "300Mi", -1)))
	if got := k.ds("kube-system", "fluentd-elasticsearch").ResourceVersion; got != rv {
		t.Fatalf("server dry run wrote")
	}

	// create: 201, then 409.
	created := writeFile(t, "created.yaml", dsManifest("created", "busybox:1.36"))
	wantContains(t, k.ok("create", "-f", created), "daemonset.apps/created created")
	wantContains(t, k.fails("", "create", "-f", created),
		`Error from server (AlreadyExists): error when creating "`+created+`": daemonsets.apps "created" already exists`)

	// Strict field validation reaches the server.
	typo := writeFile(t, "typo.yaml", strings.Replace(dsManifest("typo", "busybox"), "image:", "imagex:", 1))
	wantContains(t, k.fails("", "apply", "-f", typo), "unknown field", "imagex")
}

func findManager(entries []metav1.ManagedFieldsEntry, manager string) *metav1.ManagedFieldsEntry {
	for i := range entries {
		if entries[i].Manager == manager {
			return &entries[i]
		}
	}
	return nil
}

func TestKubectlModify(t *testing.T) {
	k := newKubectlEnv(t)
	k.createDS("default", "agent", "busybox:1.36")
	k.createNode("node-1", nil)
	image := func() string { return k.ds("default", "agent").Spec.Template.Spec.Containers[0].Image }

	// patch: strategic (default), merge, json; a repeated patch is "no change".
	wantContains(t, k.ok("patch", "ds", "agent", "-p", `{"spec":{"template":{"spec":{"containers":[{"name":"agent","image":"busybox:1.40"}]}}}}`),
		"daemonset.apps/agent patched")
	if img := image(); img != "busybox:1.40" {
		t.Fatalf("strategic patch image %s", img)
	}
	k.ok("patch", "ds", "agent", "--type=merge", "-p", `{"metadata":{"labels":{"m":"1"}}}`)
	if l := k.ds("default", "agent").Labels; l["m"] != "1" || l["app"] != "agent" {
		t.Fatalf("merge patch labels %v", l)
	}
	jp := `[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"busybox:1.41"}]`
	k.ok("patch", "ds", "agent", "--type=json", "-p", jp)
	if img := image(); img != "busybox:1.41" {
		t.Fatalf("json patch image %s", img)
	}
	wantContains(t, k.ok("patch", "ds", "agent", "--type=json", "-p", jp), "daemonset.apps/agent patched (no change)")
	k.ok("patch", "ds", "agent", "--dry-run=server", "--type=merge", "-p", `{"metadata":{"labels":{"dry":"1"}}}`)
	if _, ok := k.ds("default", "agent").Labels["dry"]; ok {
		t.Fatal("patch --dry-run=server wrote")
	}

	// label and annotate, set and removed.
	k.ok("label", "ds", "agent", "tier=edge")
	k.ok("annotate", "ds", "agent", "note=hello")
	ds := k.ds("default", "agent")
	if ds.Labels["tier"] != "edge" || ds.Annotations["note"] != "hello" {
		t.Fatalf("label/annotate: %v %v", ds.Labels, ds.Annotations)
	}
	wantContains(t, k.fails("", "label", "ds", "agent", "tier=core"), "already has a value (edge)")
	k.ok("label", "ds", "agent", "tier-")
	k.ok("annotate", "ds", "agent", "note-")
	ds = k.ds("default", "agent")
	if _, ok := ds.Labels["tier"]; ok {
		t.Fatalf("label not removed: %v", ds.Labels)
	}
	if _, ok := ds.Annotations["note"]; ok {
		t.Fatalf("annotation not removed: %v", ds.Annotations)
	}
	k.ok("label", "node", "node-1", "disk=ssd")
	if k.node("node-1").Labels["disk"] != "ssd" {
		t.Fatal("node label not set")
	}

	// taint and untaint (the taints list is atomic: kubectl sends it whole).
	k.ok("taint", "nodes", "node-1", "node-role.kubernetes.io/master:NoSchedule")
	k.ok("taint", "nodes", "node-1", "other=x:NoExecute")
	if taints := k.node("node-1").Spec.Taints; len(taints) != 2 {
		t.Fatalf("taints %+v", taints)
	}
	k.ok("taint", "nodes", "node-1", "node-role.kubernetes.io/master:NoSchedule-")
	if taints := k.node("node-1").Spec.Taints; len(taints) != 1 || taints[0].Key != "other" || taints[0].Value != "x" {
		t.Fatalf("taints after untaint %+v", taints)
	}
	k.ok("taint", "nodes", "node-1", "other-")
	if taints := k.node("node-1").Spec.Taints; len(taints) != 0 {
		t.Fatalf("taints after removing the last %+v", taints)
	}

	// cordon / uncordon, with the table's SchedulingDisabled.
	wantContains(t, k.ok("cordon", "node-1"), "node/node-1 cordoned")
	if !k.node("node-1").Spec.Unschedulable {
		t.Fatal("cordon did not set unschedulable")
	}
	wantContains(t, k.ok("get", "nodes"), "Ready,SchedulingDisabled")
	wantContains(t, k.ok("cordon", "node-1"), "already cordoned")
	wantContains(t, k.ok("uncordon", "node-1"), "node/node-1 uncordoned")
	if k.node("node-1").Spec.Unschedulable {
		t.Fatal("uncordon did not clear unschedulable")
	}

	// edit through an editor script.
	r := k.run("", []string{"KUBE_EDITOR=sed -i s/busybox:1.41/busybox:1.42/"}, "edit", "ds", "agent")
	if r.code != 0 || !strings.Contains(r.out, "daemonset.apps/agent edited") {
		t.Fatalf("edit: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	if img := image(); img != "busybox:1.42" {
		t.Fatalf("edited image %s", img)
	}

	// replace with a whole new object.
	f := writeFile(t, "ds.yaml", dsManifest("agent", "busybox:1.43", "replaced=yes"))
	wantContains(t, k.ok("replace", "-f", f), "daemonset.apps/agent replaced")
	ds = k.ds("default", "agent")
	if img := ds.Spec.Template.Spec.Containers[0].Image; img != "busybox:1.43" || ds.Labels["replaced"] != "yes" || ds.Labels["m"] != "" {
		t.Fatalf("replaced object: image %s labels %v", img, ds.Labels)
	}
	if ds.Generation < 5 {
		t.Errorf("generation %d after five template changes", ds.Generation)
	}
}

func TestKubectlDelete(t *testing.T) {
	k := newKubectlEnv(t)
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		group := "group=keep"
		if name == "c" || name == "d" {
			group = "group=x"
		}
		k.createDS("default", name, "busybox", group)
	}
	gone := func(name string) bool {
		_, err := k.c.Get(testCtx(t), resources.DaemonSets, "default", name)
		return apierrors.IsNotFound(err)
	}

	// Background (kubectl's default), with the wait that follows.
	wantContains(t, k.ok("delete", "ds", "a"), `daemonset.apps "a" deleted`)
	if !gone("a") {
		t.Fatal("a still exists")
	}
	// Orphan: the server marks the object with the orphan finalizer for the
	// garbage collector (not running here), so do not wait.
	k.ok("delete", "ds", "b", "--cascade=orphan", "--wait=false")
	if b := k.ds("default", "b"); b.DeletionTimestamp == nil || !slices.Contains(b.Finalizers, metav1.FinalizerOrphanDependents) {
		t.Fatalf("orphan delete: deletionTimestamp %v finalizers %v", b.DeletionTimestamp, b.Finalizers)
	}
	// By label.
	out := k.ok("delete", "ds", "-l", "group=x")
	wantContains(t, out, `daemonset.apps "c" deleted`, `daemonset.apps "d" deleted`)
	if !gone("c") || !gone("d") || gone("e") {
		t.Fatal("label delete removed the wrong objects")
	}
	wantContains(t, k.fails("", "delete", "ds", "missing"), `Error from server (NotFound): daemonsets.apps "missing" not found`)
	k.ok("delete", "ds", "missing", "--ignore-not-found")
	// --all (b is still waiting for its finalizer).
	k.ok("delete", "ds", "--all", "--wait=false")
	if !gone("e") {
		t.Fatal("--all left e")
	}
	// A pod with no node is removed at once.
	if _, err := k.c.Create(testCtx(t), newPod("lonely", ""), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	wantContains(t, k.ok("delete", "pod", "lonely"), `pod "lonely" deleted`)
}

// TestKubectlWatch runs `kubectl get -w` until it has printed the initial
// rows and one change, then stops it.
func TestKubectlWatch(t *testing.T) {
	k := newKubectlEnv(t)
	k.createDS("default", "agent", "busybox:1.36")
	for _, args := range [][]string{{"get", "ds", "-w"}, {"get", "ds", "agent", "-w", "--output-watch-events"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", k.kubeconfig, "--cache-dir", k.cacheDir}, args...)...)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}()
			rows := make(chan string, 10)
			go func() {
				defer close(rows)
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					rows <- sc.Text()
				}
			}()
			next := func() string {
				t.Helper()
				select {
				case l, ok := <-rows:
					if !ok {
						t.Fatalf("kubectl ended early: %s", stderr.String())
					}
					return l
				case <-time.After(10 * time.Second):
					t.Fatalf("no output within 10s: %s", stderr.String())
				}
				return ""
			}
			header := strings.Fields(next())
			first := strings.Fields(next())
			if header[len(header)-1] != "AGE" || !slices.Contains(first, "agent") {
				t.Fatalf("header %v, first row %v", header, first)
			}
			image := "busybox:" + strconv.Itoa(40+len(args))
			k.ok("set", "image", "ds/agent", "agent="+image)
			changed := strings.Fields(next())
			if !slices.Contains(changed, "agent") {
				t.Fatalf("row after change %v", changed)
			}
			if args[len(args)-1] == "--output-watch-events" && changed[0] != "MODIFIED" {
				t.Fatalf("event column %v", changed)
			}
		})
	}
}
