package integration

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/internal/testkit"
)

// browserPath finds headless Chromium (Debian's chromium-headless-shell or
// chromium); without one the test skips loudly, or fails when
// EVERYNODE_REQUIRE_BROWSER is set (CI installs it: .ci/run).
func browserPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium-headless-shell", "chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if p := "/usr/lib/chromium/chrome-headless-shell"; fileExists(p) {
		return p
	}
	if os.Getenv("EVERYNODE_REQUIRE_BROWSER") != "" {
		t.Fatal("EVERYNODE_REQUIRE_BROWSER is set but no headless Chromium is installed: apt-get install chromium-headless-shell")
	}
	t.Skip("SKIPPING the dashboard browser test: no headless Chromium (apt-get install chromium-headless-shell; CI sets EVERYNODE_REQUIRE_BROWSER=1)")
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// browser is one headless Chromium tab on the cluster's dashboard; every
// request the page makes is recorded, and every one that failed without an
// answer with Chromium's error (net::ERR_…), which a failure message shows.
type browser struct {
	t      *testing.T
	ctx    context.Context
	mu     sync.Mutex
	urls   []string
	ids    map[network.RequestID]string
	failed []string
}

func newBrowser(t *testing.T, c *cluster) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browserPath(t)),
		chromedp.NoSandbox,
		chromedp.Flag("ignore-certificate-errors", true), // the cluster's own CA
		chromedp.WindowSize(1280, 720),
	)
	actx, acancel := chromedp.NewExecAllocator(c.ctx, opts...)
	b := &browser{t: t, ids: map[network.RequestID]string{}}
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithListener(func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			b.urls = append(b.urls, e.Request.URL)
			b.ids[e.RequestID] = e.Request.Method + " " + e.Request.URL
		case *network.EventLoadingFailed:
			if !e.Canceled { // the page's own aborts (logout, a closed panel) are not failures
				b.failed = append(b.failed, fmt.Sprintf("%s: %s", b.ids[e.RequestID], e.ErrorText))
			}
		}
	}))
	t.Cleanup(func() { cancel(); acancel() })
	b.ctx = ctx
	// The page is loaded again while Chromium reports that the network
	// changed (a Docker test beside this one adds an interface), in the
	// navigation or in the requests of the page's scripts.
	load := func() error {
		b.clearFailed()
		// The first action starts the browser: no timeout on its context.
		if err := chromedp.Do(ctx, chromedp.Navigate(c.url+"/ui/")); err != nil {
			return err
		}
		wctx, wcancel := context.WithTimeout(ctx, waitLong)
		defer wcancel()
		if err := chromedp.Do(wctx, chromedp.WaitVisible(chromedp.ID("token"))); err != nil {
			return fmt.Errorf("the login form did not show: %w; requests that failed without an answer: %q", err, b.failedRequests())
		}
		return nil
	}
	if err := testkit.NavigateRetrying(5, load); err != nil {
		t.Fatalf("browser: %v", err)
	}
	return b
}

// clearFailed forgets the requests that failed so far.
func (b *browser) clearFailed() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failed = nil
}

// failedRequests is what failed without an answer so far.
func (b *browser) failedRequests() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.failed...)
}

func (b *browser) run(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, waitLong)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		page, _ := b.eval(`document.body.innerText.slice(0, 3000)`)
		b.t.Fatalf("browser: %v; requests that failed without an answer: %q; the page shows:\n%s", err, b.failedRequests(), page)
	}
}

// eval returns the string value of a JavaScript expression in the page.
func (b *browser) eval(expr string) (string, error) {
	ctx, cancel := context.WithTimeout(b.ctx, waitLong)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[string](expr))
}

// waitText waits until the expression's string value contains want.
func (b *browser) waitText(expr, want string) {
	b.t.Helper()
	eventually(b.t, waitLong, func() error {
		s, err := b.eval(expr)
		if err != nil {
			return err
		}
		if !strings.Contains(s, want) {
			b.mu.Lock()
			defer b.mu.Unlock()
			return fmt.Errorf("%s is %q, want %q in it; requests that failed without an answer: %q", expr, s, want, b.failed)
		}
		return nil
	})
}

// loginAs signs in with token and waits until the page names who. A login
// whose requests Chromium failed because the network changed (a Docker test
// beside this one adds an interface) leaves the form up with its error, and
// is submitted again.
func (b *browser) loginAs(token, who string) {
	b.t.Helper()
	const whoText = `document.getElementById('who').textContent`
	want := "signed in as " + who
	attempt := func() error {
		if s, _ := b.eval(whoText); strings.Contains(s, want) {
			return nil // an earlier attempt's answer came after all
		}
		b.clearFailed()
		ctx, cancel := context.WithTimeout(b.ctx, waitLong)
		defer cancel()
		if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("token")),
			chromedp.SetValue(chromedp.ID("token"), token),
			chromedp.Click(chromedp.CSS(`#login-form button[type="submit"]`))); err != nil {
			return fmt.Errorf("login form: %w", err)
		}
		var s string
		for deadline := time.Now().Add(waitLong); ; time.Sleep(50 * time.Millisecond) {
			s, _ = b.eval(whoText)
			if strings.Contains(s, want) {
				return nil
			}
			failed := b.failedRequests()
			if time.Now().After(deadline) || strings.Contains(fmt.Sprint(failed), "ERR_NETWORK_CHANGED") {
				loginErr, _ := b.eval(`document.getElementById('login-error').textContent`)
				return fmt.Errorf("%s is %q, want %q in it; login error %q; requests that failed without an answer: %q", whoText, s, want, loginErr, failed)
			}
		}
	}
	if err := testkit.NavigateRetrying(5, attempt); err != nil {
		b.t.Fatalf("browser: %v", err)
	}
}

// cellStates is "node/ds=state" for every rendered cell, sorted.
const cellStates = `[...document.querySelectorAll('.cell[data-r]')].map(e => e.closest('.row').dataset.node + '/' + e.dataset.ds + '=' + e.dataset.state).sort().join(' ')`

// TestDashboardBrowser: in headless Chromium, an admin logs in, sees the
// grid of a simulated fleet grouped by zone, pauses a rollout from the UI
// (confirming the dry-run's plan) and sees the API reflect it, watches the
// cells turn to the old revision while paused and back when resumed,
// navigates the grid with the keyboard, drains a node from its panel (the
// API shows it cordoned, its bare pod deleted, its DaemonSet pods left); a
// read-only ServiceAccount sees the fleet but its pause and drain are
// refused; no request leaves the server's origin. The screenshot is
// docs/dashboard.png (EVERYNODE_UPDATE_SCREENSHOT=1 writes it there).
func TestDashboardBrowser(t *testing.T) {
	browserPath(t)
	c := newCluster(t, 0)
	for i, zone := range []string{"zone-a", "zone-a", "zone-b"} {
		c.startNode(fmt.Sprintf("node-%d", i), map[string]string{"topology.kubernetes.io/zone": zone})
	}
	for i := range 3 {
		c.waitNode(fmt.Sprintf("node-%d", i))
	}
	for _, name := range []string{"logs", "metrics"} {
		ds := newDaemonSet(name)
		ds.Spec.UpdateStrategy.RollingUpdate = maxUnavailable(1)
		c.createDS(ds)
		c.waitStatus(name, counts{desired: 3, current: 3, ready: 3, updated: 3, available: 3})
	}

	b := newBrowser(t, c)
	b.loginAs(adminToken, "admin")
	want := "node-0/logs=ready node-0/metrics=ready node-1/logs=ready node-1/metrics=ready node-2/logs=ready node-2/metrics=ready"
	b.waitText(cellStates, want)
	// Group by zone.
	filter := func(id, value string) {
		t.Helper()
		if _, err := b.eval(fmt.Sprintf(`((e) => { e.value = %q; e.dispatchEvent(new Event('input')); return 'ok' })(document.getElementById(%q))`, value, id)); err != nil {
			t.Fatal(err)
		}
	}
	filter("group", "topology.kubernetes.io/zone")
	b.waitText(`[...document.querySelectorAll('.group')].map(e => e.textContent).join(',')`,
		"topology.kubernetes.io/zone=zone-a,topology.kubernetes.io/zone=zone-b")
	// Filters: a label, then a search.
	const shownNodes = `'nodes=' + [...document.querySelectorAll('.row[data-node]')].map(e => e.dataset.node).join(',') + ';'`
	filter("label", "topology.kubernetes.io/zone=zone-b")
	b.waitText(shownNodes, "nodes=node-2;")
	filter("label", "")
	filter("search", "node-1")
	b.waitText(shownNodes, "nodes=node-1;")
	filter("search", "")
	b.waitText(shownNodes, "nodes=node-0,node-1,node-2;")

	// Pause from the DaemonSet's panel: the confirmation shows the plan;
	// the API reflects the pause.
	b.run(chromedp.Click(chromedp.CSS(`.hcell[title="default/logs"]`)),
		chromedp.WaitVisible(chromedp.ID("act-pause")), chromedp.Click(chromedp.ID("act-pause")),
		chromedp.WaitVisible(chromedp.ID("confirm-ok")))
	b.waitText(`document.getElementById('confirm-plan').textContent`, "No pod of logs is replaced until you resume")
	if ds := c.getDS("logs"); ds.Annotations["rollout.everynode.io/paused"] != "" {
		t.Fatal("the dry run before the confirmation paused the DaemonSet")
	}
	b.run(chromedp.Click(chromedp.ID("confirm-ok")))
	eventually(t, waitLong, func() error {
		if v := c.getDS("logs").Annotations["rollout.everynode.io/paused"]; v != "true" {
			return fmt.Errorf("paused annotation %q", v)
		}
		return nil
	})
	b.waitText(`document.querySelector('.hcell[title="default/logs"]').textContent`, "paused · logs")
	b.run(chromedp.Click(chromedp.ID("details-close")), chromedp.WaitNotVisible(chromedp.ID("details")))

	// A rollout while paused: every logs cell turns to the old revision,
	// live; resumed, they come back to the current revision.
	c.updateDS("logs", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = imageV2 })
	b.waitText(cellStates, "node-0/logs=old node-0/metrics=ready node-1/logs=old node-1/metrics=ready node-2/logs=old")
	b.waitText(`document.querySelector('.cell[data-state="old"]').title`, "rollout paused")
	shot := filepath.Join(t.TempDir(), "dashboard.png")
	// The screenshot of docs/dashboard.md: a paused rollout, grouped by zone.
	if _, err := b.eval(`window.scrollTo(0, 0); "ok"`); err != nil {
		t.Fatal(err)
	}
	buf, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if _, err := png.Decode(bytes.NewReader(buf)); err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if os.Getenv("EVERYNODE_UPDATE_SCREENSHOT") != "" {
		shot = "../docs/dashboard.png"
	}
	if err := os.WriteFile(shot, buf, 0o644); err != nil {
		t.Fatal(err)
	}

	b.run(chromedp.Click(chromedp.CSS(`.hcell[title="default/logs"]`)),
		chromedp.WaitVisible(chromedp.ID("act-resume")), chromedp.Click(chromedp.ID("act-resume")),
		chromedp.WaitVisible(chromedp.ID("confirm-ok")), chromedp.Click(chromedp.ID("confirm-ok")))
	b.waitText(cellStates, want)
	if v, ok := c.getDS("logs").Annotations["rollout.everynode.io/paused"]; ok {
		t.Errorf("resume left paused=%q", v)
	}
	b.run(chromedp.Click(chromedp.ID("details-close")))

	// Keyboard: the grid takes focus, arrows move between cells, Enter
	// opens the pod, Escape closes it.
	b.run(chromedp.Focus(chromedp.ID("grid")))
	b.waitText(`document.activeElement.dataset.r + ':' + document.activeElement.dataset.c`, "1:0")
	b.run(chromedp.KeyEvent(kb.ArrowRight), chromedp.KeyEvent(kb.ArrowDown))
	b.waitText(`document.activeElement.getAttribute('aria-label')`, "metrics on node-1: current, ready")
	b.run(chromedp.KeyEvent(kb.Enter))
	b.waitText(`document.querySelector('#details h2').textContent`, "Pod default/metrics-")
	b.run(chromedp.KeyEvent(kb.Escape))
	b.waitText(`String(document.getElementById('details').hidden)`, "true")

	// Drain from the node's panel. The confirmation says what will happen:
	// the node cordoned, the bare pod refused until "no controller" is
	// ticked (kubectl drain's --force) and then deleted, the DaemonSet pods
	// left running (--ignore-daemonsets). Nothing changes before Confirm;
	// then the API shows the node unschedulable, the bare pod gone and the
	// DaemonSet pods untouched.
	bare := c.createBarePod("scratch", "node-2")
	daemons := c.kfDaemonPodsOn("node-2")
	if len(daemons) != 2 {
		t.Fatalf("DaemonSet pods on node-2: %v, want logs and metrics", daemons)
	}
	const plan = `document.getElementById('confirm-plan').textContent`
	b.run(chromedp.Click(chromedp.CSS(`.row[data-node="node-2"] .name`)),
		chromedp.WaitVisible(chromedp.ID("act-drain")), chromedp.Click(chromedp.ID("act-drain")),
		chromedp.WaitVisible(chromedp.ID("confirm-ok")))
	b.waitText(plan, "cannot delete pods that declare no controller")
	b.waitText(plan, "default/scratch")
	b.waitText(`String(document.getElementById('confirm-ok').disabled)`, "true")
	b.run(chromedp.Click(chromedp.ID("opt-force")))
	b.waitText(plan, "2. Delete 1 pod(s)")
	b.waitText(plan, "DaemonSet-managed: left running")
	b.waitText(`String(document.getElementById('confirm-ok').disabled)`, "false")
	if n, err := c.node("node-2"); err != nil || n.Spec.Unschedulable {
		t.Fatalf("before Confirm: node-2 is cordoned (err %v): the dry run changed it", err)
	}
	if err := c.podGone("scratch", bare.UID); err == nil {
		t.Fatal("before Confirm: the dry run deleted the bare pod")
	}
	b.run(chromedp.Click(chromedp.ID("confirm-ok")))
	b.waitText(`document.getElementById('drain-status').textContent`, "node/node-2 drained (1 pod(s) deleted")
	b.waitText(`document.getElementById('act-cordon').textContent`, "Uncordon")
	if n, err := c.node("node-2"); err != nil || !n.Spec.Unschedulable {
		t.Fatalf("after the drain node-2 is not unschedulable (err %v)", err)
	}
	if err := c.podGone("scratch", bare.UID); err != nil {
		t.Fatalf("after the drain: %v", err)
	}
	if err := kfSameUIDs(daemons, c.kfDaemonPodsOn("node-2")); err != nil {
		t.Fatalf("the drain touched the DaemonSet pods: %v", err)
	}
	b.waitText(cellStates, want)
	b.run(chromedp.Click(chromedp.ID("details-close")))
	c.patchNode("node-2", map[string]any{"spec": map[string]any{"unschedulable": nil}})

	// A read-only ServiceAccount: sees the grid, its action is refused.
	if _, err := c.admin.Create(c.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "viewer"}}, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "fleet-viewer"}, Rules: []rbacv1.PolicyRule{{Verbs: []string{"get", "list", "watch"},
			APIGroups: []string{"", "apps"}, Resources: []string{"nodes", "pods", "daemonsets", "controllerrevisions", "events"}}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "fleet-viewer"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fleet-viewer"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "viewer", Namespace: ns}}},
	} {
		if _, err := c.admin.Create(c.ctx, o, client.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	b.run(chromedp.Click(chromedp.ID("logout")))
	b.loginAs(c.requestToken(ns, "viewer"), "system:serviceaccount:default:viewer")
	b.waitText(cellStates, want)
	b.run(chromedp.Click(chromedp.CSS(`.hcell[title="default/metrics"]`)),
		chromedp.WaitVisible(chromedp.ID("act-pause")), chromedp.Click(chromedp.ID("act-pause")))
	b.waitText(`document.querySelector('#details-body .error').textContent`, "Pause metrics refused: 403")
	if _, ok := c.getDS("metrics").Annotations["rollout.everynode.io/paused"]; ok {
		t.Error("the read-only user paused metrics")
	}
	b.run(chromedp.Click(chromedp.CSS(`.row[data-node="node-0"] .name`)),
		chromedp.WaitVisible(chromedp.ID("act-drain")), chromedp.Click(chromedp.ID("act-drain")))
	b.waitText(`document.getElementById('drain-status').textContent`, "Drain node node-0 refused: 403")
	if n, err := c.node("node-0"); err != nil || n.Spec.Unschedulable {
		t.Errorf("the read-only user's drain cordoned node-0 (err %v)", err)
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	for _, u := range b.urls {
		if !strings.HasPrefix(u, c.url+"/ui/") {
			t.Errorf("the page requested %s, outside %s/ui/", u, c.url)
		}
	}
	if len(b.urls) < 5 {
		t.Errorf("recorded requests: %v", b.urls)
	}
}
