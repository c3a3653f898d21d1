package apiserver

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/everynode/everynode/resources"
)

// TestKubectlAPIResources: `kubectl api-resources` lists exactly the
// served resources, with their short names and kinds.
func TestKubectlAPIResources(t *testing.T) {
	k := newKubectlEnv(t)
	var want []string
	for _, r := range resources.All() {
		name := r.Name
		if r.Group != "" {
			name += "." + r.Group
		}
		want = append(want, name)
	}
	for _, c := range createOnlyResources() { // the reviews, as kube-apiserver lists them
		want = append(want, c.name+"."+c.gv.Group)
	}
	got := strings.Fields(k.ok("api-resources", "-o", "name"))
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("kubectl api-resources -o name:\n got %v\nwant %v", got, want)
	}
	wide := k.ok("api-resources", "--api-group=")
	for _, row := range []string{"configmaps cm v1 true ConfigMap", "secrets v1 true Secret", "serviceaccounts sa v1 true ServiceAccount"} {
		if !slices.ContainsFunc(lines(wide), func(f []string) bool { return strings.Join(f, " ") == row }) {
			t.Errorf("no row %q in\n%s", row, wide)
		}
	}
}

// configManifest is the shape of a published node-daemon install: a
// ConfigMap, a ServiceAccount and a DaemonSet using both.
const configManifest = `apiVersion: v1
kind: ConfigMap
metadata:
  name: agent-config
  namespace: default
data:
  agent.conf: |
    [agent]
    interval = "10s"
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: agent
  namespace: default
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
  namespace: default
spec:
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent}
    spec:
      serviceAccountName: agent
      containers:
      - name: agent
        image: example.com/agent:1.0
        volumeMounts:
        - {name: config, mountPath: /etc/agent}
      volumes:
      - name: config
        configMap:
          name: agent-config
`

// TestKubectlConfigKinds: real kubectl creates ConfigMaps, Secrets and
// ServiceAccounts (typed clients: protobuf bodies), prints them as
// kube-apiserver does, describes a Secret without its values, and applies a
// manifest holding a ConfigMap, a ServiceAccount and a DaemonSet (client-side
// validation against the OpenAPI v3 documents included) twice.
func TestKubectlConfigKinds(t *testing.T) {
	k := newKubectlEnv(t)
	wantContains(t, k.ok("create", "configmap", "x", "--from-literal=a=b"), "configmap/x created")
	wantContains(t, k.ok("create", "secret", "generic", "s", "--from-literal=password=s3cr3t-value", "--from-literal=user=me"), "secret/s created")
	wantContains(t, k.ok("create", "serviceaccount", "sa"), "serviceaccount/sa created")

	s := k.get(resources.Secrets, "default", "s").(*corev1.Secret)
	if s.Type != corev1.SecretTypeOpaque || string(s.Data["password"]) != "s3cr3t-value" {
		t.Errorf("stored secret: type %q data %q", s.Type, s.Data)
	}
	if cm := k.get(resources.ConfigMaps, "default", "x").(*corev1.ConfigMap); cm.Data["a"] != "b" {
		t.Errorf("stored configmap data %v", cm.Data)
	}

	out := noAge(k.ok("get", "cm,secret,sa", "-o", "wide"))
	// noAge dropped the AGE column.
	for _, hdr := range [][]string{{"NAME", "DATA"}, {"NAME", "TYPE", "DATA"}, {"NAME", "SECRETS"}} {
		if !slices.ContainsFunc(lines(out), func(f []string) bool { return slices.Equal(f, hdr) }) {
			t.Errorf("no header %v in\n%s", hdr, out)
		}
	}
	for _, row := range []string{"configmap/x 1", "secret/s Opaque 2", "serviceaccount/sa 0"} {
		if !slices.ContainsFunc(lines(out), func(f []string) bool { return strings.Join(f, " ") == row }) {
			t.Errorf("no row %q in\n%s", row, out)
		}
	}
	wantRows(t, noAge(k.ok("get", "secrets", "--field-selector", "type=Opaque", "-o", "name")), "secret/s")

	desc := k.ok("describe", "secret", "s")
	for _, row := range []string{"Name: s", "Type: Opaque", "password: 12 bytes", "user: 2 bytes"} {
		if !slices.ContainsFunc(lines(desc), func(f []string) bool { return strings.Join(f, " ") == row }) {
			t.Errorf("no line %q in\n%s", row, desc)
		}
	}
	if strings.Contains(desc, "s3cr3t-value") {
		t.Errorf("describe shows the secret's value:\n%s", desc)
	}

	path := writeFile(t, "install.yaml", configManifest)
	out = k.ok("apply", "-f", path)
	wantContains(t, out, "configmap/agent-config created", "serviceaccount/agent created", "daemonset.apps/agent created")
	out = k.ok("apply", "-f", path)
	wantContains(t, out, "configmap/agent-config unchanged", "serviceaccount/agent unchanged", "daemonset.apps/agent unchanged")
	ds := k.get(resources.DaemonSets, "default", "agent").(*appsv1.DaemonSet)
	if ds.Spec.Template.Spec.ServiceAccountName != "agent" || ds.Spec.Template.Spec.Volumes[0].ConfigMap.Name != "agent-config" {
		t.Errorf("daemonset template %+v", ds.Spec.Template.Spec)
	}

	// Making the ConfigMap immutable, then changing it: kube-apiserver's 422.
	k.ok("patch", "configmap", "x", "--type=merge", "-p", `{"immutable":true}`)
	errOut := k.fails("", "patch", "configmap", "x", "--type=merge", "-p", `{"data":{"a":"c"}}`)
	wantContains(t, errOut, `The ConfigMap "x" is invalid: data: Forbidden: field is immutable when `+"`immutable`"+` is set`)
}
