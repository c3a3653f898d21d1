package integration

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// corpusDir holds published DaemonSet manifests, unchanged, in the test
// corpus beside the repository (README, "Test corpus").
var corpusDir = filepath.Join("..", "..", "shared", "corpus")

// corpusPrereqs are what the corpus' README says some manifests expect the
// user to have created first, as the commands a user would type.
var corpusPrereqs = [][]string{
	{"create", "namespace", "logdna-agent"},
	{"create", "namespace", "amazon-cloudwatch"},
	{"create", "configmap", "ceph-config", "-n", "default", "--from-literal=ceph.conf=[global]"},
	{"create", "configmap", "ceph-csi-config", "-n", "default", "--from-literal=config.json=[]"},
	{"create", "configmap", "ceph-csi-encryption-kms-config", "-n", "default", "--from-literal=config.json={}"},
	{"create", "serviceaccount", "rbd-csi-nodeplugin", "-n", "default"},
	{"create", "configmap", "cwagentconfig", "-n", "amazon-cloudwatch", "--from-literal=cwagentconfig.json={}"},
	{"create", "serviceaccount", "cloudwatch-agent", "-n", "amazon-cloudwatch"},
	{"create", "secret", "generic", "hcloud", "-n", "kube-system", "--from-literal=token=not-a-real-token"},
	{"create", "secret", "generic", "logdna-agent-key", "-n", "logdna-agent", "--from-literal=logdna-agent-key=not-a-real-key"},
	{"create", "serviceaccount", "secrets-store-csi-driver", "-n", "kube-system"},
	{"create", "configmap", "sriovdp-config", "-n", "kube-system", `--from-literal=config.json={"resourceList":[]}`},
}

// TestCorpusInstalls: every published manifest of the corpus installs with
// real kubectl as its README says (after the objects the corpus README
// lists as prerequisites) and each of its DaemonSets reaches desired ==
// ready on every node of the fake runtime.
func TestCorpusInstalls(t *testing.T) {
	kubectl := needKubectl(t)
	files, err := filepath.Glob(filepath.Join(corpusDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus at %s (%v): the test corpus sits beside the repository, see the README's \"Test corpus\"", corpusDir, err)
	}
	c := newCluster(t, 2)
	kc := kfKubeconfig(t, c)
	k := &kfTool{t: t, name: "kubectl", bin: kubectl,
		pre: []string{"--kubeconfig", kc, "--cache-dir", filepath.Join(t.TempDir(), "kube-cache")}}
	for _, args := range corpusPrereqs {
		k.ok(args...)
	}
	type dsRef struct{ file, namespace, name string }
	var all []dsRef
	for _, f := range files {
		r := k.run("apply", "-f", f)
		if r.code != 0 {
			t.Errorf("kubectl apply -f %s: exit %d\n%s\n%s", filepath.Base(f), r.code, r.out, r.err)
			continue
		}
		dss, err := corpusDaemonSets(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, ds := range dss {
			all = append(all, dsRef{filepath.Base(f), ds[0], ds[1]})
		}
	}
	if len(all) < len(files) {
		t.Fatalf("%d DaemonSets in %d files", len(all), len(files))
	}
	eventually(t, 3*time.Minute, func() error {
		var bad []string
		for _, d := range all {
			o, err := c.admin.Get(c.ctx, resources.DaemonSets, d.namespace, d.name)
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s: %v", d.file, err))
				continue
			}
			s := o.(*appsv1.DaemonSet).Status
			if s.DesiredNumberScheduled != 2 || s.NumberReady != 2 {
				bad = append(bad, fmt.Sprintf("%s: %s/%s desired %d ready %d%s", d.file, d.namespace, d.name,
					s.DesiredNumberScheduled, s.NumberReady, c.waitingReasons(d.namespace, o.(*appsv1.DaemonSet).UID)))
			}
		}
		if len(bad) > 0 {
			sort.Strings(bad)
			return errors.New(strings.Join(bad, "; "))
		}
		return nil
	})
}

// corpusDaemonSets lists the namespace and name of each DaemonSet in a
// multi-document manifest ("default" when it names none, as kubectl
// applies it).
func corpusDaemonSets(path string) ([][2]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out [][2]string
	rd := yaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		var m struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := sigsyaml.Unmarshal(doc, &m); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if m.Kind != "DaemonSet" {
			continue
		}
		ns := m.Metadata.Namespace
		if ns == "" {
			ns = "default"
		}
		out = append(out, [2]string{ns, m.Metadata.Name})
	}
}

// needKubectl finds real kubectl, or skips loudly (fails under
// EVERYNODE_REQUIRE_KUBECTL=1).
func needKubectl(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("kubectl")
	if err != nil {
		if os.Getenv("EVERYNODE_REQUIRE_KUBECTL") == "1" {
			t.Fatalf("kubectl is required (EVERYNODE_REQUIRE_KUBECTL=1) but not on PATH: %v", err)
		}
		t.Skipf("SKIPPING real-kubectl test: kubectl not on PATH (%v); set EVERYNODE_REQUIRE_KUBECTL=1 to fail instead", err)
	}
	return bin
}

// waitingReasons lists why the pods of the DaemonSet with uid wait, for a
// failure message.
func (c *cluster) waitingReasons(namespace string, uid types.UID) string {
	pods, _, err := c.admin.List(c.ctx, resources.Pods, namespace, client.ListOptions{})
	if err != nil {
		return " (" + err.Error() + ")"
	}
	var out []string
	for _, o := range pods {
		p := o.(*corev1.Pod)
		if len(p.OwnerReferences) == 0 || p.OwnerReferences[0].UID != uid {
			continue
		}
		for _, st := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			if w := st.State.Waiting; w != nil {
				out = append(out, fmt.Sprintf("%s/%s: %s %s", p.Name, st.Name, w.Reason, w.Message))
			}
			if t := st.State.Terminated; t != nil && t.ExitCode != 0 {
				out = append(out, fmt.Sprintf("%s/%s: terminated %s", p.Name, st.Name, t.Reason))
			}
		}
		for _, cond := range p.Status.Conditions {
			if cond.Status != corev1.ConditionTrue && cond.Message != "" {
				out = append(out, fmt.Sprintf("%s: %s %s", p.Name, cond.Type, cond.Message))
			}
		}
	}
	if len(out) == 0 {
		return ""
	}
	return " [" + strings.Join(out, "; ") + "]"
}
