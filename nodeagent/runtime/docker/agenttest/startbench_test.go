package agenttest

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	enclient "github.com/everynode/everynode/client"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/nodeagent/runtime"
	"github.com/everynode/everynode/nodeagent/runtime/docker/internal/testimage"
	"github.com/everynode/everynode/resources"
)

// startRounds is how many times each way of starting and updating a
// container is timed; the benchmark reports the medians.
const startRounds = 7

// BenchmarkDockerStart compares, on this engine and the same local images
// (FROM scratch and the static test daemon, built in the run; no registry),
// three ways of running one container and then updating its image:
//
//   - bare: `docker run -d`, then `docker stop && docker run -d` of the new
//     image (the docker CLI, as a user types it);
//   - everynode: a whole server (embedded etcd, API over TLS, controllers)
//     whose local agent runs on this engine; a DaemonSet is created, then its
//     image updated (maxUnavailable 1);
//   - swarm: a global service (`docker service create --mode global`), then
//     `docker service update --image`, when `docker swarm init` works here
//     (the benchmark leaves the swarm it made; it skips Swarm, saying why,
//     when the engine is already in a swarm or cannot make one).
//
// Each time runs from the command (or API call) to the engine's "start"
// event of the new container, read from the engine's event stream: the
// moment the container runs, the same for all three. Run it with
//
//	go test -run '^$' -bench BenchmarkDockerStart -benchtime 1x ./nodeagent/runtime/docker/agenttest/
//
// (make bench-docker); it reports the medians of startRounds rounds as
// metrics and logs every round.
func BenchmarkDockerStart(b *testing.B) {
	if engine.cli == nil {
		b.Skip("SKIP: no Docker engine: " + engine.skipWhy)
	}
	ctx := context.Background()
	v2, err := testimage.Build(ctx, engine.cli, "../testdata/testdaemon", engine.run+"-v2")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := testimage.Remove(context.Background(), engine.cli, v2); err != nil {
			b.Error(err)
		}
	})
	starts := watchStarts(b)
	args := []string{"-exit-after", "-1ns"}

	// create and update: to the new container's start; engineCreate and
	// engineUpdate: to its create (the rest is the engine creating and
	// starting it, the same work for all three).
	type ways struct{ create, update, engineCreate, engineUpdate []time.Duration }
	var bare, en, swarm ways
	for b.Loop() {
		bare, en, swarm = ways{}, ways{}, ways{}
		// Bare docker.
		for i := range startRounds {
			name := fmt.Sprintf("enbench-%s-bare-%d", engine.run, i)
			b.Cleanup(func() { // after a failure; the round removes them itself
				_ = exec.Command("docker", "rm", "-f", name, name+"-v2").Run()
			})
			t0 := time.Now()
			dockerCLI(b, append([]string{"run", "-d", "--name", name, "--label", testimage.RunLabel + "=" + engine.run, engine.image}, args...)...)
			bare.engineCreate = append(bare.engineCreate, starts.waitFor(b, t0, events.ActionCreate, func(a map[string]string) bool { return a["name"] == name }))
			bare.create = append(bare.create, starts.wait(b, t0, func(a map[string]string) bool { return a["name"] == name }))
			t0 = time.Now()
			dockerCLI(b, "stop", name)
			dockerCLI(b, append([]string{"run", "-d", "--name", name + "-v2", "--label", testimage.RunLabel + "=" + engine.run, v2}, args...)...)
			bare.engineUpdate = append(bare.engineUpdate, starts.waitFor(b, t0, events.ActionCreate, func(a map[string]string) bool { return a["name"] == name+"-v2" }))
			bare.update = append(bare.update, starts.wait(b, t0, func(a map[string]string) bool { return a["name"] == name+"-v2" }))
			dockerCLI(b, "rm", "-f", name, name+"-v2")
		}

		// everynode: a server whose local agent runs on this engine.
		n := newNode(b, "start", nil)
		_, admin := n.startServer()
		for i := range startRounds {
			dsName := fmt.Sprintf("bench-%d", i)
			ours := func(image string) func(map[string]string) bool {
				return func(a map[string]string) bool {
					return a[runtime.LabelNode] == n.name && a[runtime.LabelContainer] == "app" &&
						strings.HasPrefix(a[runtime.LabelPodName], dsName+"-") && a["image"] == image
				}
			}
			ds := benchDaemonSet(dsName, engine.image, args)
			t0 := time.Now()
			if _, err := admin.Create(ctx, ds, enclient.WriteOptions{}); err != nil {
				b.Fatal(err)
			}
			en.engineCreate = append(en.engineCreate, starts.waitFor(b, t0, events.ActionCreate, ours(engine.image)))
			en.create = append(en.create, starts.wait(b, t0, ours(engine.image)))
			// The controller writes the DaemonSet's status meanwhile: read,
			// change and write until the write is not a conflict.
			testkit.Eventually(b, time.Minute, func() error {
				o, err := admin.Get(ctx, resources.DaemonSets, "default", dsName)
				if err != nil {
					return err
				}
				cur := o.(*appsv1.DaemonSet).DeepCopy()
				cur.Spec.Template.Spec.Containers[0].Image = v2
				t0 = time.Now()
				_, err = admin.Update(ctx, cur, enclient.WriteOptions{})
				return err
			})
			en.engineUpdate = append(en.engineUpdate, starts.waitFor(b, t0, events.ActionCreate, ours(v2)))
			en.update = append(en.update, starts.wait(b, t0, ours(v2)))
			if _, err := admin.Delete(ctx, resources.DaemonSets, "default", dsName, metav1.DeleteOptions{}); err != nil {
				b.Fatal(err)
			}
			waitNoContainers(b, filters.Arg("label", runtime.LabelNode+"="+n.name))
		}

		// Swarm, when this engine can make one.
		left, why := initSwarm(b)
		if why != "" {
			b.Logf("Swarm skipped: %s", why)
			continue
		}
		for i := range startRounds {
			name := fmt.Sprintf("enbench-%s-swarm-%d", engine.run, i)
			ofService := func(image string) func(map[string]string) bool {
				return func(a map[string]string) bool {
					return a["com.docker.swarm.service.name"] == name && strings.HasPrefix(a["image"], image)
				}
			}
			t0 := time.Now()
			dockerCLI(b, append([]string{"service", "create", "--detach", "--no-resolve-image", "--mode", "global", "--name", name,
				"--container-label", testimage.RunLabel + "=" + engine.run, engine.image}, args...)...)
			swarm.engineCreate = append(swarm.engineCreate, starts.waitFor(b, t0, events.ActionCreate, ofService(engine.image)))
			swarm.create = append(swarm.create, starts.wait(b, t0, ofService(engine.image)))
			t0 = time.Now()
			dockerCLI(b, "service", "update", "--detach", "--no-resolve-image", "--image", v2, name)
			swarm.engineUpdate = append(swarm.engineUpdate, starts.waitFor(b, t0, events.ActionCreate, ofService(v2)))
			swarm.update = append(swarm.update, starts.wait(b, t0, ofService(v2)))
			dockerCLI(b, "service", "rm", name)
			waitNoContainers(b, filters.Arg("label", "com.docker.swarm.service.name="+name))
		}
		left()
	}

	med := func(d []time.Duration) float64 {
		if len(d) == 0 {
			return 0
		}
		s := slices.Clone(d)
		slices.Sort(s)
		return s[len(s)/2].Seconds()
	}
	report := func(way string, w ways) {
		b.Logf("%-9s create %v", way, w.create)
		b.Logf("%-9s update %v", way, w.update)
		b.Logf("%-9s create, to the engine's create %v", way, w.engineCreate)
		b.Logf("%-9s update, to the engine's create %v", way, w.engineUpdate)
		if len(w.create) > 0 {
			b.ReportMetric(med(w.create), way+"-create-s")
			b.ReportMetric(med(w.update), way+"-update-s")
			b.ReportMetric(med(w.engineCreate), way+"-create-to-engine-create-s")
			b.ReportMetric(med(w.engineUpdate), way+"-update-to-engine-create-s")
		}
	}
	report("bare", bare)
	report("everynode", en)
	report("swarm", swarm)
	b.ReportMetric(med(en.create)/med(bare.create), "everynode/bare-create")
	b.ReportMetric(med(en.update)/med(bare.update), "everynode/bare-update")
	if len(swarm.create) > 0 {
		b.ReportMetric(med(en.create)/med(swarm.create), "everynode/swarm-create")
		b.ReportMetric(med(en.update)/med(swarm.update), "everynode/swarm-update")
	}
}

// benchDaemonSet is one container of image on every node, replaced one node
// at a time.
func benchDaemonSet(name, image string, args []string) *appsv1.DaemonSet {
	labels := map[string]string{"app": name}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "app", Image: image, Args: args, ImagePullPolicy: corev1.PullIfNotPresent,
				}}},
			},
		},
	}
	resources.DaemonSets.SetTypeMeta(ds)
	return ds
}

// startEvent is a container's "create" or "start" on the engine, when it
// was read.
type startEvent struct {
	at     time.Time
	action events.Action
	attrs  map[string]string
}

// startWatch is the engine's container start events, from the benchmark's
// beginning to its end.
type startWatch struct{ ch chan startEvent }

// watchStarts follows the engine's container start events until the
// benchmark ends.
func watchStarts(tb testing.TB) *startWatch {
	ctx, cancel := context.WithCancel(context.Background())
	msgs, errs := engine.cli.Events(ctx, events.ListOptions{Filters: filters.NewArgs(
		filters.Arg("type", string(events.ContainerEventType)),
		filters.Arg("event", string(events.ActionCreate)), filters.Arg("event", string(events.ActionStart)))})
	w := &startWatch{ch: make(chan startEvent, 256)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case m := <-msgs:
				select {
				case w.ch <- startEvent{at: time.Now(), action: m.Action, attrs: m.Actor.Attributes}:
				case <-ctx.Done():
					return
				}
			case <-errs:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	tb.Cleanup(func() {
		cancel()
		<-done
	})
	return w
}

// wait returns the time from t0 to the first start event that match
// accepts; events that do not match (other containers on a shared engine)
// are dropped.
func (w *startWatch) wait(tb testing.TB, t0 time.Time, match func(map[string]string) bool) time.Duration {
	tb.Helper()
	return w.waitFor(tb, t0, events.ActionStart, match)
}

// waitFor is wait for another action (create, which comes before start).
func (w *startWatch) waitFor(tb testing.TB, t0 time.Time, action events.Action, match func(map[string]string) bool) time.Duration {
	tb.Helper()
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case e := <-w.ch:
			if e.action == action && match(e.attrs) {
				return e.at.Sub(t0)
			}
		case <-timeout:
			tb.Fatal("no matching container start within 2 minutes")
			return 0
		}
	}
}

// dockerCLI runs the docker command line.
func dockerCLI(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// waitNoContainers waits until no container (running or not) matches f.
func waitNoContainers(tb testing.TB, f filters.KeyValuePair) {
	tb.Helper()
	testkit.Eventually(tb, 2*time.Minute, func() error {
		l, err := engine.cli.ContainerList(context.Background(), container.ListOptions{All: true, Filters: filters.NewArgs(f)})
		if err != nil {
			return err
		}
		if len(l) > 0 {
			return fmt.Errorf("%d containers of %s=%s left", len(l), f.Key, f.Value)
		}
		return nil
	})
}

// initSwarm makes this engine a one-node swarm and returns how to leave it,
// or why Swarm cannot run here: the engine is in a swarm already (someone
// else's, left alone) or `docker swarm init` failed.
func initSwarm(tb testing.TB) (leave func(), why string) {
	tb.Helper()
	info, err := engine.cli.Info(context.Background())
	if err != nil {
		return nil, fmt.Sprintf("docker info: %v", err)
	}
	if s := info.Swarm.LocalNodeState; s != "inactive" {
		return nil, fmt.Sprintf("the engine's swarm state is %q, not inactive: not ours to use or leave", s)
	}
	if out, err := exec.Command("docker", "swarm", "init", "--advertise-addr", "127.0.0.1").CombinedOutput(); err != nil {
		return nil, fmt.Sprintf("docker swarm init: %v: %s", err, strings.TrimSpace(string(out)))
	}
	left := false
	leave = func() {
		if left {
			return
		}
		left = true
		if out, err := exec.Command("docker", "swarm", "leave", "--force").CombinedOutput(); err != nil {
			tb.Errorf("docker swarm leave: %v: %s", err, out)
		}
	}
	tb.Cleanup(leave)
	return leave, ""
}
