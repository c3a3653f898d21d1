package nodeagent

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	rtfake "github.com/everynode/everynode/nodeagent/runtime/fake"
)

func TestLogs(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	e.seed(newPod("talk", withAnnotations(rtfake.AnnotationExitAfter, "1s", rtfake.AnnotationExitCode, "4")))
	e.sync("talk")
	ctx := context.Background()

	var cur bytes.Buffer
	if err := e.agent.Logs(ctx, "default", "talk", LogRequest{}, &cur); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cur.String(), `pretending to run "sleep infinity" from image busybox:1.36`) {
		t.Errorf("logs:\n%s", cur.String())
	}
	if err := e.agent.Logs(ctx, "default", "talk", LogRequest{Previous: true}, &cur); !errors.Is(err, ErrLogsNotFound) {
		t.Errorf("previous before a restart: %v", err)
	}
	e.clock.Step(time.Second)
	e.sync("talk")
	e.clock.Step(10 * time.Second)
	e.sync("talk")
	var prev bytes.Buffer
	if err := e.agent.Logs(ctx, "default", "talk", LogRequest{Container: "app", Previous: true}, &prev); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(prev.String(), "exited with code 4") {
		t.Errorf("previous logs:\n%s", prev.String())
	}
	for _, tc := range []struct{ ns, name, container string }{
		{"default", "nope", ""}, {"other", "talk", ""}, {"default", "talk", "sidecar"},
	} {
		if err := e.agent.Logs(ctx, tc.ns, tc.name, LogRequest{Container: tc.container}, &prev); !errors.Is(err, ErrLogsNotFound) {
			t.Errorf("Logs(%v) = %v, want ErrLogsNotFound", tc, err)
		}
	}
}

func TestHostNetworkPodIP(t *testing.T) {
	e := newEnv(t, rtfake.Config{IP: "10.88.0.3"})
	e.seed(newPod("hostnet", func(p *corev1.Pod) { p.Spec.HostNetwork = true }))
	p, _ := e.sync("hostnet")
	if p.Status.PodIP != "192.0.2.10" || len(p.Status.PodIPs) != 1 || p.Status.PodIPs[0].IP != "192.0.2.10" {
		t.Errorf("podIP %q %v, want the node's", p.Status.PodIP, p.Status.PodIPs)
	}
}
