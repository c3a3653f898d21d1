package cli

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/resources"
)

func TestParseGetMulti(t *testing.T) {
	tests := []struct {
		args    string
		kinds   []*resources.Resource
		wantErr string
	}{
		{args: "all", kinds: []*resources.Resource{resources.Pods, resources.DaemonSets, resources.Services, resources.Deployments}},
		{args: "ds,po -A", kinds: []*resources.Resource{resources.DaemonSets, resources.Pods}},
		{args: "nodes,all,ds", kinds: []*resources.Resource{resources.Nodes, resources.Pods, resources.DaemonSets, resources.Services, resources.Deployments}},
		{args: "ds", kinds: nil},
		{args: "all x", wantErr: "names cannot be given"},
		{args: "ds,widgets", wantErr: `resource type "widgets"`},
		{args: "all -w", wantErr: "watch is only supported on one kind"},
	}
	for _, tt := range tests {
		t.Run(tt.args, func(t *testing.T) {
			c := &GetCommand{main: NewMain()}
			err := parse(c, strings.Fields(tt.args))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(c.kinds, tt.kinds) {
				t.Fatalf("kinds %v err %v", c.kinds, err)
			}
		})
	}
}

func TestGetAll(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 10, 0, 0, time.UTC)
	created := metav1.NewTime(now.Add(-10 * time.Minute))
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default", CreationTimestamp: created}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent-x", Namespace: "default", CreationTimestamp: created},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	resources.DaemonSets.SetTypeMeta(ds)
	resources.Pods.SetTypeMeta(pod)
	c := fake.New(ds, pod)
	m := &Main{Now: func() time.Time { return now }}

	cmd := &GetCommand{main: m, kinds: []*resources.Resource{resources.Pods, resources.DaemonSets}}
	var out bytes.Buffer
	if err := cmd.runMulti(context.Background(), c, "test", IO{Out: &out, Err: &out}); err != nil {
		t.Fatal(err)
	}
	want := "NAME          READY   STATUS    RESTARTS   AGE\npod/agent-x   0/1     Running   0          10m\n\n" +
		"NAME                   DESIRED   CURRENT   READY   UP-TO-DATE   AVAILABLE   NODE SELECTOR   AGE\n" +
		"daemonset.apps/agent   0         0         0       0            0           <none>          10m\n"
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}

	out.Reset()
	cmd.output = "name"
	if err := cmd.runMulti(context.Background(), c, "test", IO{Out: &out, Err: &out}); err != nil || out.String() != "pod/agent-x\ndaemonset.apps/agent\n" {
		t.Fatalf("-o name: %q %v", out.String(), err)
	}

	out.Reset()
	cmd = &GetCommand{main: m, kinds: []*resources.Resource{resources.Pods}, clientFlags: clientFlags{namespace: "empty"}}
	if err := cmd.runMulti(context.Background(), c, "test", IO{Out: &out, Err: &out}); err != nil || out.String() != "No resources found in empty namespace.\n" {
		t.Fatalf("empty: %q %v", out.String(), err)
	}
}
