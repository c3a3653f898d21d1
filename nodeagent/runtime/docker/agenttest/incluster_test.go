package agenttest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/nodeagent/runtime"
	"github.com/everynode/everynode/nodeagent/runtime/docker/internal/testimage"
	"github.com/everynode/everynode/resources"
)

// TestInClusterClientOnDocker: a whole server with its local agent on real
// Docker runs pods whose program (a static binary on client-go) lists nodes
// with rest.InClusterConfig — the mounted token and ca.crt and
// KUBERNETES_SERVICE_HOST/PORT. The server listens on loopback only: the
// host-network pod reaches it there, the pod on Docker's bridge through the
// agent's API forwarder at the bridge's gateway (as Docker reports it for
// the pod's container), over TLS verified against ca.crt, which the server's
// certificate passes because it carries that address. Without a binding
// the server answers 403; with a ClusterRoleBinding the list succeeds; once
// the ServiceAccount is deleted its token is refused with 401.
func TestInClusterClientOnDocker(t *testing.T) {
	t.Parallel()
	n := newNode(t, "incluster", nil) // the name, and the engine cleanup
	ctx := context.Background()
	bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	image, err := testimage.Build(bctx, engine.cli, "../testdata/incluster", engine.run)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := testimage.Remove(ctx, engine.cli, image); err != nil {
			t.Errorf("remove image: %v", err)
		}
	})
	s, admin := n.startServer()
	create := func(obj resources.Object) {
		t.Helper()
		if _, err := admin.Create(ctx, obj, client.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create(&corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "lister"}})
	for _, p := range []struct {
		name        string
		hostNetwork bool
	}{{"lister", true}, {"bridged", false}} {
		create(&corev1.Pod{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: p.name},
			Spec: corev1.PodSpec{
				NodeName: n.name, ServiceAccountName: "lister", HostNetwork: p.hostNetwork,
				Containers: []corev1.Container{{Name: "app", Image: image, ImagePullPolicy: corev1.PullNever}},
			},
		})
	}
	// last is a pod's program's latest verdict, from its log.
	last := func(pod string) string {
		b, err := admin.RawGet(ctx, "/api/v1/namespaces/default/pods/"+pod+"/log")
		if err != nil {
			if p, gerr := admin.Get(ctx, resources.Pods, "default", pod); gerr == nil {
				return fmt.Sprintf("%v (pod status %+v)", err, p.(*corev1.Pod).Status)
			}
			return err.Error()
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		return lines[len(lines)-1]
	}
	_, port, err := net.SplitHostPort(s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	// The bridged pod's way to the server: the gateway Docker gives its
	// container, and the server's port.
	var bridgeGW string
	testkit.Eventually(t, 90*time.Second, func() error {
		list, err := engine.cli.ContainerList(ctx, container.ListOptions{Filters: filters.NewArgs(
			filters.Arg("label", runtime.LabelNode+"="+n.name), filters.Arg("label", runtime.LabelPodName+"=bridged"))})
		if err != nil || len(list) == 0 {
			return fmt.Errorf("bridged pod's container: %d, %v", len(list), err)
		}
		ins, err := engine.cli.ContainerInspect(ctx, list[0].ID)
		if err != nil {
			return err
		}
		if ins.NetworkSettings == nil || ins.NetworkSettings.Networks["bridge"] == nil || ins.NetworkSettings.Networks["bridge"].Gateway == "" {
			return fmt.Errorf("bridged pod's container %s has no bridge gateway", list[0].ID)
		}
		bridgeGW = ins.NetworkSettings.Networks["bridge"].Gateway
		return nil
	})
	via := map[string]string{"lister": net.JoinHostPort("127.0.0.1", port), "bridged": net.JoinHostPort(bridgeGW, port)}
	expect := func(result string) {
		t.Helper()
		for _, pod := range []string{"lister", "bridged"} {
			want := "result: " + result + " via " + via[pod]
			testkit.Eventually(t, 90*time.Second, func() error {
				if got := last(pod); got != want {
					return fmt.Errorf("pod %s says %q, want %q", pod, got, want)
				}
				return nil
			})
		}
	}
	expect("403")

	create(&rbacv1.ClusterRole{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: "node-lister"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list"}}}})
	create(&rbacv1.ClusterRoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: "node-lister"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "node-lister"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: "lister"}}})
	expect("ok")

	if _, err := admin.Delete(ctx, resources.ServiceAccounts, "default", "lister", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("401")
}
