package nodeagent

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/everynode/everynode/nodeagent/runtime"
)

// probeState is one probe's consecutive results for one container.
type probeState struct {
	next                time.Time
	successes, failures int
	ok                  bool
	msg                 string
}

// record folds a result in, flipping ok once a threshold is reached.
func (p *probeState) record(ok bool, msg string, pr *corev1.Probe) {
	p.msg = msg
	if ok {
		p.successes++
		p.failures = 0
		if p.successes >= max(int(pr.SuccessThreshold), 1) {
			p.ok = true
		}
		return
	}
	p.failures++
	p.successes = 0
	if p.failures >= failureThreshold(pr) {
		p.ok = false
	}
}

// recordStartup folds in a startup probe result: one success starts the
// container for good (the startup probe's successThreshold is 1).
func (p *probeState) recordStartup(ok bool, msg string) {
	p.msg = msg
	if ok {
		p.ok, p.failures = true, 0
		return
	}
	p.failures++
}

func failureThreshold(pr *corev1.Probe) int {
	if pr.FailureThreshold > 0 {
		return int(pr.FailureThreshold)
	}
	return 3
}

func probePeriod(pr *corev1.Probe) time.Duration {
	if pr.PeriodSeconds > 0 {
		return time.Duration(pr.PeriodSeconds) * time.Second
	}
	return 10 * time.Second
}

func probeTimeout(pr *corev1.Probe) time.Duration {
	if pr.TimeoutSeconds > 0 {
		return time.Duration(pr.TimeoutSeconds) * time.Second
	}
	return time.Second
}

// networkProber is a runtime that answers httpGet and tcpSocket probes
// itself: the fake runtime, whose pretend processes listen nowhere.
type networkProber interface {
	ProbeHTTP(ctx context.Context, u *url.URL, header http.Header) (int, error)
	ProbeTCP(ctx context.Context, addr string) error
}

// proberFor returns the prober of rt: its own when it answers probes
// (networkProber), else newProber's, over the network.
func proberFor(rt any) prober {
	if np, ok := rt.(networkProber); ok {
		return prober{httpGet: np.ProbeHTTP, dial: np.ProbeTCP}
	}
	return newProber()
}

// prober runs httpGet and tcpSocket probes over the network; exec probes go
// through the runtime. Its function fields are replaced by tests.
type prober struct {
	httpGet func(ctx context.Context, u *url.URL, header http.Header) (int, error)
	dial    func(ctx context.Context, addr string) error
}

func newProber() prober {
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, // kubelet does not verify probe targets either
		DisableKeepAlives: true,
		Proxy:             nil,
	}
	hc := &http.Client{
		Transport: tr,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 10 {
				return http.ErrUseLastResponse
			}
			return nil
		},
	}
	return prober{
		httpGet: func(ctx context.Context, u *url.URL, header http.Header) (int, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
			if err != nil {
				return 0, err
			}
			req.Header = header
			if req.Header.Get("User-Agent") == "" {
				req.Header.Set("User-Agent", "everynode-probe/1.0")
			}
			resp, err := hc.Do(req)
			if err != nil {
				return 0, err
			}
			resp.Body.Close()
			return resp.StatusCode, nil
		},
		dial: func(ctx context.Context, addr string) error {
			var d net.Dialer
			conn, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return err
			}
			return conn.Close()
		},
	}
}

// runProbe runs pr against the container and reports success.
func (a *Agent) runProbe(ctx context.Context, pod *corev1.Pod, c *corev1.Container, id, podIP string, pr *corev1.Probe) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout(pr))
	defer cancel()
	host := podIP
	if host == "" {
		host = a.cfg.NodeIP
	}
	switch {
	case pr.Exec != nil:
		code, out, err := a.rt.Exec(ctx, id, pr.Exec.Command)
		if err != nil {
			return false, fmt.Sprintf("exec probe: %v", err)
		}
		if code != 0 {
			return false, fmt.Sprintf("exec probe: command %q exited with %d: %s", pr.Exec.Command, code, truncate(out, 256))
		}
		return true, ""
	case pr.HTTPGet != nil:
		g := pr.HTTPGet
		if g.Host != "" {
			host = g.Host
		}
		port, err := resolvePort(g.Port, c)
		if err != nil {
			return false, fmt.Sprintf("http probe: %v", err)
		}
		if host == "" {
			return false, "http probe: pod has no IP"
		}
		scheme := "http"
		if g.Scheme == corev1.URISchemeHTTPS {
			scheme = "https"
		}
		path := g.Path
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		u, err := url.Parse(scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port)) + path)
		if err != nil {
			return false, fmt.Sprintf("http probe: %v", err)
		}
		header := http.Header{}
		for _, h := range g.HTTPHeaders {
			header.Add(h.Name, h.Value)
		}
		code, err := a.probe.httpGet(ctx, u, header)
		if err != nil {
			return false, fmt.Sprintf("http probe: %v", err)
		}
		if code < 200 || code >= 400 {
			return false, fmt.Sprintf("http probe failed with statuscode: %d", code)
		}
		return true, ""
	case pr.TCPSocket != nil:
		if pr.TCPSocket.Host != "" {
			host = pr.TCPSocket.Host
		}
		port, err := resolvePort(pr.TCPSocket.Port, c)
		if err != nil {
			return false, fmt.Sprintf("tcp probe: %v", err)
		}
		if host == "" {
			return false, "tcp probe: pod has no IP"
		}
		if err := a.probe.dial(ctx, net.JoinHostPort(host, strconv.Itoa(port))); err != nil {
			return false, fmt.Sprintf("tcp probe: %v", err)
		}
		return true, ""
	}
	return false, "probe has no supported handler (exec, httpGet, tcpSocket)"
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// resolvePort turns a number or a named container port into a number.
func resolvePort(p intstr.IntOrString, c *corev1.Container) (int, error) {
	if p.Type == intstr.Int {
		if p.IntVal <= 0 || p.IntVal > 65535 {
			return 0, fmt.Errorf("invalid port %d", p.IntVal)
		}
		return int(p.IntVal), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil && n > 0 && n <= 65535 {
		return n, nil
	}
	return 0, fmt.Errorf("no container port named %q", p.StrVal)
}

// probeContainer runs the due liveness and readiness probes of a running
// container; a liveness failure past its threshold stops it (the restart
// policy then applies). It returns when the next probe is due.
func (a *Agent) probeContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, cs *containerState,
	cur runtime.ContainerStatus, podIP string, now time.Time) (time.Time, bool, error) {
	if cs.probeID != cur.ID {
		cs.probeID = cur.ID
		start := cur.Started
		if start.IsZero() {
			start = now
		}
		cs.live = probeState{ok: true}
		cs.ready = probeState{}
		cs.startup = probeState{}
		if p := c.StartupProbe; p != nil {
			cs.startup.next = start.Add(time.Duration(p.InitialDelaySeconds) * time.Second)
		}
		if p := c.LivenessProbe; p != nil {
			cs.live.next = start.Add(time.Duration(p.InitialDelaySeconds) * time.Second)
		}
		if p := c.ReadinessProbe; p != nil {
			cs.ready.next = start.Add(time.Duration(p.InitialDelaySeconds) * time.Second)
		}
	}
	if p := c.StartupProbe; p != nil && !cs.startup.ok {
		// As kubelet: until the startup probe succeeds, liveness and
		// readiness are not probed (the container is neither started nor
		// ready); past its failure threshold the container is killed.
		if !now.Before(cs.startup.next) {
			ok, msg := a.runProbe(ctx, pod, c, cur.ID, podIP, p)
			if ctx.Err() != nil {
				return time.Time{}, false, ctx.Err()
			}
			cs.startup.recordStartup(ok, msg)
			cs.startup.next = now.Add(probePeriod(p))
		}
		if cs.startup.failures >= failureThreshold(p) {
			a.log.Info("startup probe failed, restarting container", "pod", podRef(pod), "container", c.Name, "reason", cs.startup.msg)
			a.event(pod, c.Name, corev1.EventTypeWarning, eventUnhealthy, "Startup probe failed: %s", cs.startup.msg)
			a.event(pod, c.Name, corev1.EventTypeNormal, eventKilling, "Container %s failed startup probe, will be restarted", c.Name)
			if err := a.rt.StopContainer(ctx, cur.ID, podGrace(pod, p)); err != nil && !runtime.IsNotFound(err) {
				return time.Time{}, false, fmt.Errorf("nodeagent: stop container %s: %w", cur.ID, err)
			}
			return now, true, nil
		}
		if !cs.startup.ok {
			return cs.startup.next, false, nil
		}
		// Started: liveness and readiness begin now (their initial delays
		// count from the container's start, as kubelet's).
	}
	var wake time.Time
	if p := c.LivenessProbe; p != nil {
		if !now.Before(cs.live.next) {
			ok, msg := a.runProbe(ctx, pod, c, cur.ID, podIP, p)
			if ctx.Err() != nil {
				return time.Time{}, false, ctx.Err()
			}
			cs.live.record(ok, msg, p)
			cs.live.next = now.Add(probePeriod(p))
		}
		if !cs.live.ok {
			grace := podGrace(pod, p)
			a.log.Info("liveness probe failed, restarting container", "pod", podRef(pod), "container", c.Name, "reason", cs.live.msg)
			a.event(pod, c.Name, corev1.EventTypeWarning, eventUnhealthy, "Liveness probe failed: %s", cs.live.msg)
			a.event(pod, c.Name, corev1.EventTypeNormal, eventKilling, "Container %s failed liveness probe, will be restarted", c.Name)
			if err := a.rt.StopContainer(ctx, cur.ID, grace); err != nil && !runtime.IsNotFound(err) {
				return time.Time{}, false, fmt.Errorf("nodeagent: stop container %s: %w", cur.ID, err)
			}
			return now, true, nil
		}
		wake = cs.live.next
	}
	if p := c.ReadinessProbe; p != nil {
		if !now.Before(cs.ready.next) {
			ok, msg := a.runProbe(ctx, pod, c, cur.ID, podIP, p)
			if ctx.Err() != nil {
				return time.Time{}, false, ctx.Err()
			}
			cs.ready.record(ok, msg, p)
			cs.ready.next = now.Add(probePeriod(p))
		}
		if wake.IsZero() || cs.ready.next.Before(wake) {
			wake = cs.ready.next
		}
	}
	return wake, false, nil
}

// containerStarted reports whether a running container counts as started:
// its startup probe, if any, succeeded.
func containerStarted(c *corev1.Container, cs *containerState, cur runtime.ContainerStatus) bool {
	if cur.State != runtime.StateRunning {
		return false
	}
	return c.StartupProbe == nil || (cs.probeID == cur.ID && cs.startup.ok)
}

// containerReady reports whether a running container counts as ready.
func containerReady(c *corev1.Container, cs *containerState, cur runtime.ContainerStatus) bool {
	if !containerStarted(c, cs, cur) {
		return false
	}
	if c.ReadinessProbe == nil {
		return true
	}
	return cs.probeID == cur.ID && cs.ready.ok
}
