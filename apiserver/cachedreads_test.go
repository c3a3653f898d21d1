package apiserver

import (
	"context"
	"net/http"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/serviceaccount"

	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// botUser is a service account of namespace apps, as its token
// authenticates it.
var botUser = UserInfo{Name: "system:serviceaccount:apps:bot",
	Groups: []string{"system:serviceaccounts", "system:serviceaccounts:apps", "system:authenticated"}}

// newRBACStore is a store with the default policy and a Role in apps
// letting bot get pods there, and the RBAC authorizer on it.
func newRBACStore(t testing.TB) (*store.Store, *RBAC) {
	t.Helper()
	e := newEnv(t)
	ctx := testCtx(t)
	if err := e.s.EnsureBootstrapPolicy(ctx); err != nil {
		t.Fatalf("EnsureBootstrapPolicy: %v", err)
	}
	if err := e.s.EnsureNamespaces(ctx, "apps"); err != nil {
		t.Fatalf("EnsureNamespaces: %v", err)
	}
	create := func(r *resources.Resource, obj resources.Object) {
		t.Helper()
		if _, err := e.st.Create(ctx, r, obj); err != nil {
			t.Fatalf("create %s: %v", obj.GetName(), err)
		}
	}
	create(resources.Roles, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "pod-reader"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}}}})
	create(resources.RoleBindings, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "bot"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pod-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "apps", Name: "bot"}}})
	return e.st, NewRBAC(e.st)
}

// rbacDecisions are what bot asks: allowed by its Role, allowed by the
// default policy's system:discovery, and denied (RBAC visits every binding).
var rbacDecisions = []struct {
	attrs Attributes
	want  authorizer.Decision
}{
	{Attributes{User: botUser, Verb: "get", Namespace: "apps", Resource: "pods", Name: "p"}, authorizer.DecisionAllow},
	{Attributes{User: botUser, Verb: "get", Path: "/apis"}, authorizer.DecisionAllow},
	{Attributes{User: botUser, Verb: "delete", Namespace: "apps", Resource: "pods", Name: "p"}, authorizer.DecisionNoOpinion},
	{Attributes{User: botUser, Verb: "list", Resource: "secrets"}, authorizer.DecisionNoOpinion},
}

// etcdRanges is how many range requests this process's etcd servers have
// served (etcd's own counter).
func etcdRanges(t testing.TB) float64 {
	t.Helper()
	n, ok := store.RangesServed()
	if !ok {
		t.Fatal("etcd_mvcc_range_total is not registered")
	}
	return float64(n)
}

// TestRBACDecisionsReadTheCache: RBAC's decisions read roles and bindings
// from the watch cache, as kube-apiserver's read informers, not from etcd:
// a request of a service account costs no etcd round trip to authorize.
// Deciding right after a write still sees it (the cache has applied this
// server's writes before it answers).
func TestRBACDecisionsReadTheCache(t *testing.T) {
	st, rbac := newRBACStore(t)
	ctx := testCtx(t)
	decide := func() {
		t.Helper()
		for _, d := range rbacDecisions {
			got, reason, err := rbac.Decide(ctx, d.attrs)
			if err != nil || got != d.want {
				t.Fatalf("%s %s %s%s: %v %q %v, want %v", d.attrs.Verb, d.attrs.Resource, d.attrs.Namespace, d.attrs.Path, got, reason, err, d.want)
			}
		}
	}
	decide() // the caches are warm
	const rounds = 50
	before := etcdRanges(t)
	for range rounds {
		decide()
	}
	// Another test's server may range now and then; one round trip per
	// decision would be 200.
	if n := etcdRanges(t) - before; n > 20 {
		t.Errorf("%d decisions read etcd %.0f times, want none", rounds*len(rbacDecisions), n)
	}

	// A binding is in force once its create returned, and gone once its
	// delete returned.
	deleteAttrs := rbacDecisions[2].attrs
	if _, err := st.Create(ctx, resources.Roles, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "pod-deleter"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"delete"}, APIGroups: []string{""}, Resources: []string{"pods"}}}}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		name := "deleter-" + string(rune('a'+i))
		if _, err := st.Create(ctx, resources.RoleBindings, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pod-deleter"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "apps", Name: "bot"}}}); err != nil {
			t.Fatal(err)
		}
		if got, _, err := rbac.Decide(ctx, deleteAttrs); err != nil || got != authorizer.DecisionAllow {
			t.Fatalf("right after binding %s: %v %v, want allowed", name, got, err)
		}
		if _, err := st.Delete(ctx, resources.RoleBindings, "apps", name, nil); err != nil {
			t.Fatal(err)
		}
		if got, _, err := rbac.Decide(ctx, deleteAttrs); err != nil || got != authorizer.DecisionNoOpinion {
			t.Fatalf("right after deleting binding %s: %v %v, want no opinion", name, got, err)
		}
	}
}

// BenchmarkRBACDecide measures RBAC's decisions for a service account:
// allowed by a RoleBinding, by the default policy, and denied.
func BenchmarkRBACDecide(b *testing.B) {
	_, rbac := newRBACStore(b)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		d := rbacDecisions[i%len(rbacDecisions)]
		if got, _, err := rbac.Decide(ctx, d.attrs); err != nil || got != d.want {
			b.Fatalf("%v %v, want %v", got, err, d.want)
		}
	}
}

// newBoundToken is a store with a ServiceAccount apps/bot, a pod apps/p
// running as it, the token authenticator, and a token bound to the pod.
func newBoundToken(t testing.TB) (*store.Store, *ServiceAccountTokens, string) {
	t.Helper()
	cfg := &Config{Store: openStore(t)}
	withTokens(t)(cfg)
	st, tokens := cfg.Store, cfg.ServiceAccountTokens
	ctx := testCtx(t)
	sa, err := st.Create(ctx, resources.ServiceAccounts, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "bot", UID: "sa-uid"}})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := st.Create(ctx, resources.Pods, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "p", UID: "pod-uid"},
		Spec:       corev1.PodSpec{ServiceAccountName: "bot", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}})
	if err != nil {
		t.Fatal(err)
	}
	sc, pc, err := serviceaccount.Claims(
		core.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "bot", UID: sa.GetUID()}},
		&core.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "p", UID: pod.GetUID()}},
		nil, nil, nil, nil, 3600, 0, []string{ServiceAccountIssuer}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokens.gen.GenerateToken(ctx, sc, pc)
	if err != nil {
		t.Fatal(err)
	}
	return st, tokens, tok
}

// TestServiceAccountTokensReadTheCache: checking that a pod's token's
// account and pod still exist reads the watch cache, as kube-apiserver's
// token getter reads informers, not etcd; a token dies the moment its pod's
// delete returned.
func TestServiceAccountTokensReadTheCache(t *testing.T) {
	st, tokens, tok := newBoundToken(t)
	const rounds = 100
	before := etcdRanges(t)
	for range rounds {
		if name, _, ok := tokens.AuthenticateToken(tok); !ok || name != "system:serviceaccount:apps:bot" {
			t.Fatalf("bound token: %q %v", name, ok)
		}
	}
	if n := etcdRanges(t) - before; n > 20 {
		t.Errorf("%d authentications read etcd %.0f times, want none", rounds, n)
	}
	if _, err := st.Delete(testCtx(t), resources.Pods, "apps", "p", nil); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := tokens.AuthenticateToken(tok); ok {
		t.Error("token bound to a deleted pod authenticated")
	}
}

// BenchmarkServiceAccountToken measures authenticating a pod's token.
func BenchmarkServiceAccountToken(b *testing.B) {
	_, tokens, tok := newBoundToken(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok := tokens.AuthenticateToken(tok); !ok {
			b.Fatal("not authenticated")
		}
	}
}

// TestDeleteStartsFromTheCache: deleting a pod decides on the watch cache's
// copy: marking it (grace period) is one conditional write, removing it one
// conditional delete, with no read of etcd before either. etcd counts the
// key each conditional write compares, and the deleted value it returns, as
// ranges: 1 and 2 (a read before each would make it 2 and 3, or 4 when the
// store read again).
func TestDeleteStartsFromTheCache(t *testing.T) {
	e := newEnv(t)
	const pods = 10
	var ranges float64
	for i := range pods {
		p := newPod("p"+strconv.Itoa(i), "n1")
		p.Namespace = "default"
		created, err := e.st.Create(testCtx(t), resources.Pods, p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.st.GetCached(testCtx(t), resources.Pods, "default", p.Name); err != nil {
			t.Fatal(err)
		}
		path := "/api/v1/namespaces/default/pods/" + p.Name
		before := etcdRanges(t)
		var marked corev1.Pod
		e.do(req{method: "DELETE", path: path}).must(t, http.StatusOK, &marked)
		if marked.DeletionTimestamp == nil || marked.ResourceVersion == created.GetResourceVersion() {
			t.Fatalf("graceful delete answered %+v", marked.ObjectMeta)
		}
		if _, err := e.st.GetCached(testCtx(t), resources.Pods, "default", p.Name); err != nil {
			t.Fatal(err)
		}
		e.do(req{method: "DELETE", path: path, body: `{"gracePeriodSeconds":0}`}).must(t, http.StatusOK, nil)
		ranges += etcdRanges(t) - before
		if _, err := e.st.Get(testCtx(t), resources.Pods, "default", p.Name); !store.IsNotFound(err) {
			t.Fatalf("pod after its delete: %v", err)
		}
	}
	if ranges > 3*pods+5 {
		t.Errorf("%d pods marked and deleted: %.0f etcd ranges, want 3 each", pods, ranges)
	}
}

// TestWritesDecideOnEtcdWhenTheCacheLags: a second store on the same etcd
// stands for another server of the cluster. Right after it changes a pod,
// this server's cache may still hold the version before; a delete with a
// precondition on the new version, a delete of a marked pod the other
// server has changed, and a status update with the new resourceVersion are
// still decided on the new version (never a false 409, never an old
// version in the answer).
func TestWritesDecideOnEtcdWhenTheCacheLags(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	other, err := store.Open(ctx, store.Config{Endpoints: []string{e.st.ClientURL()}, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	label := func(i int) func(resources.Object) (resources.Object, error) {
		return func(cur resources.Object) (resources.Object, error) {
			cur.SetLabels(map[string]string{"round": strconv.Itoa(i)})
			return cur, nil
		}
	}
	for i := range 100 {
		name := "p" + strconv.Itoa(i)
		path := "/api/v1/namespaces/default/pods/" + name
		p := newPod(name, "n1")
		p.Namespace = "default"
		e.do(req{method: "POST", path: "/api/v1/namespaces/default/pods", body: toJSON(t, p)}).must(t, http.StatusCreated, nil)

		// A status update with the version the other server just wrote.
		upd, err := other.GuaranteedUpdate(ctx, resources.Pods, "default", name, label(i))
		if err != nil {
			t.Fatal(err)
		}
		st := upd.DeepCopyObject().(*corev1.Pod)
		st.Status.Phase = corev1.PodRunning
		var running corev1.Pod
		e.do(req{method: "PUT", path: path + "/status", body: toJSON(t, st)}).must(t, http.StatusOK, &running)
		if running.Status.Phase != corev1.PodRunning || running.Labels["round"] != strconv.Itoa(i) {
			t.Fatalf("round %d: status update answered %+v", i, running)
		}

		// A delete whose precondition is the version the other server just wrote.
		if upd, err = other.GuaranteedUpdate(ctx, resources.Pods, "default", name, label(i+100)); err != nil {
			t.Fatal(err)
		}
		var marked corev1.Pod
		e.do(req{method: "DELETE", path: path, body: `{"preconditions":{"resourceVersion":"` + upd.GetResourceVersion() + `"}}`}).
			must(t, http.StatusOK, &marked)
		if marked.DeletionTimestamp == nil || marked.Labels["round"] != strconv.Itoa(i+100) {
			t.Fatalf("round %d: delete with a precondition answered %+v", i, marked.ObjectMeta)
		}

		// The other server changes the marked pod; deleting it again needs
		// no write and answers with the other server's version.
		if upd, err = other.GuaranteedUpdate(ctx, resources.Pods, "default", name, label(i+200)); err != nil {
			t.Fatal(err)
		}
		var again corev1.Pod
		e.do(req{method: "DELETE", path: path}).must(t, http.StatusOK, &again)
		if again.ResourceVersion != upd.GetResourceVersion() || again.Labels["round"] != strconv.Itoa(i+200) {
			t.Fatalf("round %d: delete of a pod already marked answered resourceVersion %s, want the other server's %s",
				i, again.ResourceVersion, upd.GetResourceVersion())
		}
	}
}
