package agenttest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/nodeagent/runtime/docker/internal/testimage"
	"github.com/everynode/everynode/resources"
)

// TestInClusterClientOnDocker: a whole server with its local agent on real
// Docker runs a pod whose program (a static binary on client-go) lists nodes
// with rest.InClusterConfig — the mounted token and ca.crt and
// KUBERNETES_SERVICE_HOST/PORT. Without a binding the server answers 403;
// with a ClusterRoleBinding the list succeeds; once the ServiceAccount is
// deleted its token is refused with 401.
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
	_, admin := n.startServer()
	create := func(obj resources.Object) {
		t.Helper()
		if _, err := admin.Create(ctx, obj, client.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create(&corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "lister"}})
	create(&corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "lister"},
		Spec: corev1.PodSpec{
			NodeName: n.name, ServiceAccountName: "lister",
			// The server listens on loopback only: the pod shares the host's
			// network to reach it.
			HostNetwork: true,
			Containers:  []corev1.Container{{Name: "app", Image: image, ImagePullPolicy: corev1.PullNever}},
		},
	})
	// last is the program's latest verdict, from the pod's log.
	last := func() string {
		b, err := admin.RawGet(ctx, "/api/v1/namespaces/default/pods/lister/log")
		if err != nil {
			if p, gerr := admin.Get(ctx, resources.Pods, "default", "lister"); gerr == nil {
				return fmt.Sprintf("%v (pod status %+v)", err, p.(*corev1.Pod).Status)
			}
			return err.Error()
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		return lines[len(lines)-1]
	}
	expect := func(want string) {
		t.Helper()
		testkit.Eventually(t, 90*time.Second, func() error {
			if got := last(); got != want {
				return fmt.Errorf("pod says %q, want %q", got, want)
			}
			return nil
		})
	}
	expect("result: 403")

	create(&rbacv1.ClusterRole{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: "node-lister"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list"}}}})
	create(&rbacv1.ClusterRoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: "node-lister"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "node-lister"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: "lister"}}})
	expect("result: ok")

	if _, err := admin.Delete(ctx, resources.ServiceAccounts, "default", "lister", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("result: 401")
}
