package nodeagent

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	rtfake "github.com/everynode/everynode/nodeagent/runtime/fake"
)

func execProbe(period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", "/tmp/healthy"}}},
		PeriodSeconds:    period,
		FailureThreshold: failures,
	}
}

func TestReadinessProbeFlipsReady(t *testing.T) {
	var healthy atomic.Bool
	e := newEnv(t, rtfake.Config{Exec: func(id string, cmd []string) (int, []byte, error) {
		if healthy.Load() {
			return 0, nil, nil
		}
		return 1, []byte("cat: /tmp/healthy: No such file"), nil
	}})
	e.seed(newPod("ready", withContainer(func(c *corev1.Container) {
		c.ReadinessProbe = execProbe(5, 2)
		c.ReadinessProbe.InitialDelaySeconds = 3
	})))

	p, _ := e.sync("ready")
	if s := cstatus(t, p); s.State.Running == nil || s.Ready {
		t.Fatalf("before the first probe: %+v", s)
	}
	if c := podCondition(p, corev1.PodReady); c.Status != corev1.ConditionFalse || c.Reason != reasonContainersNotReady {
		t.Errorf("ready condition %+v", c)
	}
	healthy.Store(true)
	e.clock.Step(2 * time.Second)
	if p, _ = e.sync("ready"); cstatus(t, p).Ready {
		t.Fatal("ready before initialDelaySeconds")
	}
	e.clock.Step(time.Second)
	p, wake := e.sync("ready")
	if !cstatus(t, p).Ready || podCondition(p, corev1.PodReady).Status != corev1.ConditionTrue {
		t.Fatalf("not ready after a successful probe: %+v", p.Status)
	}
	readySince := podCondition(p, corev1.PodReady).LastTransitionTime
	if !readySince.Time.Equal(t0.Add(3*time.Second)) || wake != 5*time.Second {
		t.Errorf("transition %v, wake %s", readySince, wake)
	}

	healthy.Store(false)
	e.clock.Step(5 * time.Second)
	if p, _ = e.sync("ready"); !cstatus(t, p).Ready {
		t.Error("one failure below failureThreshold=2 made it unready")
	}
	e.clock.Step(5 * time.Second)
	p, _ = e.sync("ready")
	if cstatus(t, p).Ready || podCondition(p, corev1.ContainersReady).Status != corev1.ConditionFalse {
		t.Fatalf("still ready after 2 failures: %+v", p.Status)
	}
	if n := e.rt.CountCalls("StopContainer"); n != 0 {
		t.Errorf("readiness failure stopped the container (%d stops)", n)
	}
	healthy.Store(true)
	e.clock.Step(5 * time.Second)
	if p, _ = e.sync("ready"); !cstatus(t, p).Ready {
		t.Error("not ready again after a success")
	}
}

func TestLivenessFailureRestarts(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	e := newEnv(t, rtfake.Config{Exec: func(string, []string) (int, []byte, error) {
		if healthy.Load() {
			return 0, nil, nil
		}
		return 1, nil, nil
	}})
	e.seed(newPod("live", withContainer(func(c *corev1.Container) { c.LivenessProbe = execProbe(10, 3) })))
	e.sync("live")
	e.sync("live") // first probe, succeeds
	healthy.Store(false)
	for i := range 3 {
		e.clock.Step(10 * time.Second)
		p, _ := e.sync("live")
		s := cstatus(t, p)
		if i < 2 && s.State.Running == nil {
			t.Fatalf("failure %d: restarted below the threshold: %+v", i+1, s)
		}
	}
	if n := e.rt.CountCalls("StopContainer"); n != 1 {
		t.Fatalf("%d stops after 3 liveness failures, want 1", n)
	}
	p, _ := e.sync("live")
	s := cstatus(t, p)
	if waitingReason(s) != reasonCrashLoopBackOff || s.LastTerminationState.Terminated == nil ||
		s.LastTerminationState.Terminated.ExitCode != rtfake.StopExitCode {
		t.Fatalf("after the liveness kill: %+v", s)
	}
	healthy.Store(true)
	e.clock.Step(10 * time.Second)
	p, _ = e.sync("live")
	if s := cstatus(t, p); s.State.Running == nil || s.RestartCount != 1 {
		t.Fatalf("not restarted: %+v", s)
	}
}

func TestNetworkProbes(t *testing.T) {
	var code atomic.Int32
	code.Store(http.StatusOK)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" || r.Header.Get("X-Probe") != "1" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.WriteHeader(int(code.Load()))
	}))
	defer srv.Close()
	host, portStr, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(portStr)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tcpPort := ln.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()

	e := newEnv(t, rtfake.Config{IP: host})
	e.agent.probe = newProber() // over the network, not the fake runtime's own answers
	pod := &corev1.Pod{Spec: corev1.PodSpec{}}
	c := &corev1.Container{Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}}}
	httpProbe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
		Path: "healthz", Port: intstr.FromString("http"), HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Probe", Value: "1"}},
	}}}
	tcpProbe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(int32(tcpPort))}}}
	ctx := context.Background()

	if ok, msg := e.agent.runProbe(ctx, pod, c, "id", host, httpProbe); !ok {
		t.Errorf("http probe against 200: %s", msg)
	}
	code.Store(http.StatusInternalServerError)
	if ok, _ := e.agent.runProbe(ctx, pod, c, "id", host, httpProbe); ok {
		t.Error("http probe against 500 succeeded")
	}
	if ok, msg := e.agent.runProbe(ctx, pod, c, "id", host, tcpProbe); !ok {
		t.Errorf("tcp probe against a listener: %s", msg)
	}
	ln.Close()
	if ok, _ := e.agent.runProbe(ctx, pod, c, "id", host, tcpProbe); ok {
		t.Error("tcp probe against a closed port succeeded")
	}
	if ok, _ := e.agent.runProbe(ctx, pod, c, "id", "", &corev1.Probe{}); ok {
		t.Error("probe without handler succeeded")
	}
}
