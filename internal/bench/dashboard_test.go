package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
)

// dashboardProbe is installed in the page before the rollout: it records
// long tasks (PerformanceObserver 'longtask': a task over 50 ms, the
// browser's own definition of a janky task), the interval between
// animation frames, and, for every cell on screen, when its state changed
// (epoch ms, after the frame's DOM update).
const dashboardProbe = `(() => {
  const m = window.__probe = { long: [], frames: [], changes: [], stop: false };
  new PerformanceObserver((l) => { for (const e of l.getEntries()) m.long.push(e.duration); }).observe({ type: 'longtask' });
  let last = performance.now();
  const frame = (t) => { m.frames.push(t - last); last = t; if (!m.stop) requestAnimationFrame(frame); };
  requestAnimationFrame(frame);
  const seen = new Map();
  const scan = () => {
    const t = performance.timeOrigin + performance.now();
    for (const c of document.querySelectorAll('.cell[data-r]')) {
      const k = c.parentElement.dataset.node + '/' + c.dataset.ds;
      const s = c.dataset.state;
      if (seen.has(k) && seen.get(k) !== s) m.changes.push([k, s, t]);
      seen.set(k, s);
    }
  };
  scan();
  new MutationObserver(scan).observe(document.getElementById('grid-rows'), { subtree: true, childList: true, attributes: true, characterData: true });
  return 'ok';
})()`

type probeResult struct {
	Long    []float64 `json:"long"`
	Frames  []float64 `json:"frames"`
	Changes [][3]any  `json:"changes"`
}

// BenchmarkDashboardRollout: the dashboard open on a simulated fleet of
// 1,000 nodes (real node agents with the fake runtime, in this process)
// running 10 DaemonSets (10,000 pods), while one of them rolls out a new
// image (maxUnavailable 10%): 1,000 pods replaced, their watch events (and
// the DaemonSet's status, the nodes' heartbeats) streamed to the page. One
// op is one such rollout. Reported: the page's long tasks
// (> 50 ms) and animation-frame intervals during the rollout, and the time
// from an API event (a watch of the same server in this process sees it)
// to the change of the cell on screen. docs/benchmarks.md reports it.
//
//	go test -run XXX -bench BenchmarkDashboardRollout -benchtime 1x -timeout 30m ./internal/bench/
func BenchmarkDashboardRollout(b *testing.B) {
	nodes, daemonSets := 1000, 10
	if os.Getenv("EVERYNODE_DASHBOARD_SMALL") != "" {
		nodes, daemonSets = 20, 2 // a quick check of the benchmark itself
	}
	chromium := dashboardBrowser(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	srv, err := startServer(ctx, b.TempDir(), false, "", 0, 0, 0, log)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.stop()
	fl, err := startFleet(ctx, srv.fleetTarget(), nodeNames(nodes), log)
	if err != nil {
		b.Fatal(err)
	}
	defer fl.stop()
	if err := waitNodesReady(ctx, srv.local, nodes, 5*time.Minute); err != nil {
		b.Fatal(err)
	}
	names := make([]string, daemonSets)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%02d", DSName, i)
		ds := daemonSet()
		ds.Name = names[i]
		ds.Spec.Selector.MatchLabels = map[string]string{"app": names[i]}
		ds.Spec.Template.Labels = map[string]string{"app": names[i]}
		if _, err := srv.local.Create(ctx, ds, client.WriteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	if err := waitRolledOut(ctx, srv.local, names, nodes, ImageV1); err != nil {
		b.Fatal(err)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.Flag("ignore-certificate-errors", true), chromedp.WindowSize(1280, 800))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	if err := testkit.NavigateRetrying(5, func() error { return chromedp.Do(bctx, chromedp.Navigate(srv.url+"/ui/")) }); err != nil {
		b.Fatal(err)
	}
	do := func(actions ...chromedp.Action[chromedp.Void]) {
		tctx, tcancel := context.WithTimeout(bctx, 2*time.Minute)
		defer tcancel()
		if err := chromedp.Do(tctx, actions...); err != nil {
			b.Fatal(err)
		}
	}
	eval := func(expr string) string {
		tctx, tcancel := context.WithTimeout(bctx, 2*time.Minute)
		defer tcancel()
		s, err := chromedp.Run(tctx, chromedp.Evaluate[string](expr))
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	do(chromedp.WaitVisible(chromedp.ID("token")), chromedp.SetValue(chromedp.ID("token"), srv.srv.AdminToken()),
		chromedp.Click(chromedp.CSS(`#login-form button[type="submit"]`)))
	want := fmt.Sprintf("%d nodes × %d DaemonSets · %d current, ready", nodes, daemonSets, nodes*daemonSets)
	poll := func(expr string) {
		tctx, tcancel := context.WithTimeout(bctx, 5*time.Minute)
		defer tcancel()
		if _, err := chromedp.Run(tctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
			b.Fatalf("waiting for %s: %v", expr, err)
		}
	}
	poll(fmt.Sprintf(`document.getElementById('counts').textContent === %q`, want))

	var all probeResult
	var apiLat []float64
	image := ImageV1
	b.ResetTimer()
	for b.Loop() {
		if image == ImageV1 {
			image = ImageV2
		} else {
			image = ImageV1
		}
		eval(dashboardProbe)
		events, err := rollOut(ctx, srv.local, names[:1], nodes, image)
		if err != nil {
			b.Fatal(err)
		}
		poll(fmt.Sprintf(`document.getElementById('counts').textContent === %q`, want))
		var r probeResult
		if err := json.Unmarshal([]byte(eval(`window.__probe.stop = true; JSON.stringify(window.__probe)`)), &r); err != nil {
			b.Fatal(err)
		}
		all.Long = append(all.Long, r.Long...)
		all.Frames = append(all.Frames, r.Frames...)
		all.Changes = append(all.Changes, r.Changes...)
		apiLat = append(apiLat, events.latencies(r.Changes)...)
	}
	b.StopTimer()
	report := func(name string, v []float64) {
		if len(v) == 0 {
			return
		}
		s := slices.Clone(v)
		slices.Sort(s)
		q := func(p float64) float64 { return s[min(len(s)-1, int(p*float64(len(s))))] }
		b.ReportMetric(q(0.5), name+"-p50-ms")
		b.ReportMetric(q(0.99), name+"-p99-ms")
		b.ReportMetric(s[len(s)-1], name+"-max-ms")
	}
	total := 0.0
	for _, d := range all.Long {
		total += d
	}
	b.ReportMetric(float64(len(all.Long))/float64(b.N), "longtasks/op")
	b.ReportMetric(total/float64(b.N), "longtask-ms/op")
	report("longtask", all.Long)
	report("frame", all.Frames)
	report("event-to-cell", apiLat)
	b.ReportMetric(float64(len(apiLat))/float64(b.N), "cell-changes/op")
	b.Logf("load average %s at the end; %d frames, %d long tasks, %d cell changes seen", loadAvg(), len(all.Frames), len(all.Long), len(apiLat))
}

// dashboardBrowser finds headless Chromium or skips.
func dashboardBrowser(b *testing.B) string {
	for _, name := range []string{"chromium-headless-shell", "chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("EVERYNODE_REQUIRE_BROWSER") != "" {
		b.Fatal("EVERYNODE_REQUIRE_BROWSER is set but no headless Chromium is installed: apt-get install chromium-headless-shell")
	}
	b.Skip("SKIPPING: no headless Chromium (apt-get install chromium-headless-shell)")
	return ""
}

// waitRolledOut waits until every DaemonSet in names has an available pod
// of image on each of nodes nodes and no other pod.
func waitRolledOut(ctx context.Context, c client.Interface, names []string, nodes int, image string) error {
	_, err := rollOut(ctx, c, names, nodes, image)
	return err
}

// podEvents is when this process's watch saw each cell's pod events
// (epoch ms), keyed "node/daemonset".
type podEvents struct {
	mu sync.Mutex
	at map[string][]float64
}

// latencies matches each cell change the page saw ([key, state, epoch ms])
// with the last pod event of that cell seen here before it.
func (e *podEvents) latencies(changes [][3]any) []float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []float64
	for _, ch := range changes {
		key, _ := ch[0].(string)
		t, _ := ch[2].(float64)
		evs := e.at[key]
		i, _ := slices.BinarySearch(evs, t)
		if i > 0 {
			out = append(out, t-evs[i-1])
		}
	}
	return out
}

// rollOut sets image on every DaemonSet in names (no-op when they have it)
// and waits until each has exactly one available pod of that image on
// every one of nodes nodes and nothing else, recording the events of every
// pod (of any DaemonSet) as this process's watch sees them.
func rollOut(ctx context.Context, c client.Interface, names []string, nodes int, image string) (*podEvents, error) {
	ev := &podEvents{at: map[string][]float64{}}
	mine := map[string]bool{}
	for _, n := range names {
		mine[n] = true
	}
	type cell struct{ node, ds string }
	pods := map[string]*corev1.Pod{} // uid -> live pod
	good := map[cell]int{}           // available pods of image per cell
	bad := 0                         // pods that are not (yet) available with image
	isGood := func(p *corev1.Pod) bool {
		return p.DeletionTimestamp == nil && len(p.Spec.Containers) > 0 && p.Spec.Containers[0].Image == image && podReady(p)
	}
	done := func() bool {
		if bad > 0 || len(good) != nodes*len(names) {
			return false
		}
		for _, n := range good {
			if n != 1 {
				return false
			}
		}
		return true
	}
	apply := func(p *corev1.Pod, add bool) {
		if !mine[p.Labels["app"]] {
			return
		}
		k := cell{p.Spec.NodeName, p.Labels["app"]}
		if isGood(p) {
			if good[k] += map[bool]int{true: 1, false: -1}[add]; good[k] == 0 {
				delete(good, k)
			}
		} else {
			bad += map[bool]int{true: 1, false: -1}[add]
		}
	}
	objs, rv, err := c.List(ctx, resources.Pods, Namespace, client.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		p := o.(*corev1.Pod)
		pods[string(p.UID)] = p
		apply(p, true)
	}
	start := func() error {
		for _, name := range names {
			o, err := c.Get(ctx, resources.DaemonSets, Namespace, name)
			if err != nil {
				return err
			}
			ds := o.(*appsv1.DaemonSet)
			if ds.Spec.Template.Spec.Containers[0].Image == image {
				continue
			}
			ds.Spec.Template.Spec.Containers[0].Image = image
			if _, err := c.Update(ctx, ds, client.WriteOptions{}); err != nil {
				return err
			}
		}
		return nil
	}
	if done() {
		return ev, start()
	}
	lastLog := time.Now()
	err = watchUntil(ctx, c, resources.Pods, Namespace, client.ListOptions{ResourceVersion: rv}, 30*time.Minute, start, func(e watch.Event) (bool, error) {
		p, ok := e.Object.(*corev1.Pod)
		if !ok {
			return false, nil
		}
		now := float64(time.Now().UnixNano()) / 1e6
		ev.mu.Lock()
		key := p.Spec.NodeName + "/" + p.Labels["app"]
		ev.at[key] = append(ev.at[key], now)
		ev.mu.Unlock()
		if old := pods[string(p.UID)]; old != nil {
			apply(old, false)
			delete(pods, string(p.UID))
		}
		if e.Type != watch.Deleted {
			pods[string(p.UID)] = p
			apply(p, true)
		}
		if time.Since(lastLog) > 5*time.Second {
			lastLog = time.Now()
			slog.Info("dashboard benchmark: rollout", "image", image, "available", len(good), "other", bad)
		}
		return done(), nil
	})
	return ev, err
}
