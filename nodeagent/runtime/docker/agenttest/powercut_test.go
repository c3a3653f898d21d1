package agenttest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	clientfake "github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/nodeagent"
	"github.com/everynode/everynode/nodeagent/runtime"
)

// TestPowerCutWithServerDown simulates a node's reboot while the server is
// unreachable: the agent is stopped, every container of the node is removed
// (as after a reboot, Docker restart policies aside), and the agent started
// again with no server. Every pod it had, the static one included, runs
// again from the agent's data dir alone. When the server returns there are
// no duplicates and no needless restarts.
func TestPowerCutWithServerDown(t *testing.T) {
	t.Parallel()
	api := &clientfake.Cuttable{Client: clientfake.New()}
	n := newNode(t, "powercut", api.Client)
	n.seed(n.pod("app", "-exit-after", "-1ns"))
	manifests, dataDir := t.TempDir(), t.TempDir()
	static := fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: edge\n  namespace: default\nspec:\n  containers:\n  - name: app\n    image: %s\n    imagePullPolicy: IfNotPresent\n    args: [\"-exit-after\", \"-1ns\"]\n", engine.image)
	if err := os.WriteFile(filepath.Join(manifests, "edge.yaml"), []byte(static), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func() func() {
		_, stop := n.run(nodeagent.Config{Client: api, DataDir: dataDir, ManifestDir: manifests}, false)
		return stop
	}
	pods := []string{"app", "edge-" + n.name}
	// runningByPod lists each pod's running containers on the engine.
	runningByPod := func() (map[string][]runtime.Container, error) {
		all, err := n.rt.ListContainers(context.Background(), nil)
		if err != nil {
			return nil, err
		}
		out := map[string][]runtime.Container{}
		for _, c := range all {
			if c.State == runtime.StateRunning {
				out[c.Labels[runtime.LabelPodName]] = append(out[c.Labels[runtime.LabelPodName]], c)
			}
		}
		return out, nil
	}
	oneEach := func() (map[string]string, error) {
		by, err := runningByPod()
		if err != nil {
			return nil, err
		}
		ids := map[string]string{}
		for _, p := range pods {
			if len(by[p]) != 1 {
				return nil, fmt.Errorf("pod %s has %d running containers, want 1", p, len(by[p]))
			}
			ids[p] = by[p][0].ID
		}
		return ids, nil
	}

	stop := start()
	for _, p := range pods {
		n.wait(p, "running", 30*time.Second, running)
	}

	// The power cut: server unreachable, agent gone, every container gone.
	api.Cut()
	stop()
	all, err := n.rt.ListContainers(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range all {
		if err := n.rt.RemoveContainer(context.Background(), c.ID); err != nil {
			t.Fatal(err)
		}
	}

	t0 := time.Now()
	start()
	var ids map[string]string
	testkit.Eventually(t, 30*time.Second, func() error {
		var err error
		ids, err = oneEach()
		return err
	})
	t.Logf("after the power cut, with no server: every pod running again %s after the agent started", time.Since(t0).Round(10*time.Millisecond))

	// The server returns: the pods are reported with the containers that
	// run, and nothing is created or restarted for it.
	api.Restore()
	for _, p := range pods {
		n.wait(p, "reported running with the new container", 30*time.Second, func(pod *corev1.Pod) bool {
			return running(pod) && pod.Status.ContainerStatuses[0].ContainerID == "docker://"+ids[p]
		})
	}
	testkit.Consistently(t, 3*time.Second, func() error {
		now, err := oneEach()
		if err != nil {
			return err
		}
		for p, id := range ids {
			if now[p] != id {
				return fmt.Errorf("pod %s: container %s replaced by %s after the server returned", p, id, now[p])
			}
		}
		return nil
	})
}
