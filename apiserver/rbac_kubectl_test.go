package apiserver

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/everynode/everynode/resources"
)

// withRBAC configures the server's authorization chain as `everynode
// server` does: node rules for nodes, RBAC for everyone else.
func withRBAC(c *Config) {
	c.Authorizer = &Chain{Node: NewNodeRestriction(StoreGraph(c.Store)), RBAC: NewRBAC(c.Store)}
}

// newRBACKubectlEnv is a kubectl env with RBAC and the default policy.
func newRBACKubectlEnv(t *testing.T) *kubectlEnv {
	t.Helper()
	k := newKubectlEnv(t, withRBAC)
	if err := k.s.EnsureBootstrapPolicy(testCtx(t)); err != nil {
		t.Fatalf("EnsureBootstrapPolicy: %v", err)
	}
	return k
}

// canI runs `kubectl auth can-i` and returns its answer ("yes" or "no").
func (k *kubectlEnv) canI(args ...string) string {
	k.t.Helper()
	r := k.run("", nil, append([]string{"auth", "can-i"}, args...)...)
	if (r.code != 0 && r.code != 1) || r.out == "" {
		k.t.Fatalf("kubectl auth can-i %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.out, r.err)
	}
	return strings.TrimSpace(r.out)
}

func TestKubectlRBAC(t *testing.T) {
	k := newRBACKubectlEnv(t)
	const bot = "--as=system:serviceaccount:default:bot"
	k.ok("create", "serviceaccount", "bot")

	// The default policy is there.
	out := k.ok("get", "clusterrole", "cluster-admin", "admin", "edit", "view", "system:basic-user",
		"system:discovery", "system:public-info-viewer", "-o", "name")
	wantContains(t, out, "clusterrole.rbac.authorization.k8s.io/cluster-admin", "clusterrole.rbac.authorization.k8s.io/system:public-info-viewer")
	k.ok("get", "clusterrolebinding", "cluster-admin", "system:basic-user", "system:discovery")

	// Before any binding the account may read no pods, after one it may.
	if got := k.canI("list", "pods", bot); got != "no" {
		t.Fatalf("can-i list pods before the binding = %q, want no", got)
	}
	if got := k.canI("list", "pods"); got != "yes" {
		t.Fatalf("admin can-i list pods = %q, want yes", got)
	}
	k.ok("create", "role", "pod-reader", "--verb=get,list,watch", "--resource=pods")
	k.ok("create", "rolebinding", "bot-reads", "--role=pod-reader", "--serviceaccount=default:bot")
	if got := k.canI("list", "pods", bot); got != "yes" {
		t.Fatalf("can-i list pods after the binding = %q, want yes", got)
	}
	if got := k.canI("delete", "pods", bot); got != "no" {
		t.Fatalf("can-i delete pods = %q, want no", got)
	}
	if got := k.canI("list", "pods", bot, "-n", "kube-system"); got != "no" {
		t.Fatalf("can-i list pods in kube-system = %q, want no", got)
	}
	// The account really lists pods, and is refused nodes, with kube's 403.
	k.ok("get", "pods", bot)
	stderr := k.fails("", "get", "nodes", bot)
	wantContains(t, stderr, `nodes is forbidden: User "system:serviceaccount:default:bot" cannot list resource "nodes" in API group "" at the cluster scope`)
	who := k.ok("auth", "whoami", bot, "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}")
	wantContains(t, who, "system:serviceaccount:default:bot", "system:serviceaccounts:default", "system:authenticated")
	list := k.ok("auth", "can-i", "--list", bot)
	wantContains(t, list, "pods", "[get list watch]", "selfsubjectaccessreviews.authorization.k8s.io")

	k.ok("create", "clusterrole", "node-reader", "--verb=get,list", "--resource=nodes")
	k.ok("create", "clusterrolebinding", "bot-nodes", "--clusterrole=node-reader",
		"--serviceaccount=default:bot", "--user=alice", "--group=ops")
	if got := k.canI("list", "nodes", bot); got != "yes" {
		t.Fatalf("can-i list nodes after the cluster binding = %q, want yes", got)
	}
	if got := k.canI("list", "nodes", "--as=alice"); got != "yes" {
		t.Fatalf("alice can-i list nodes = %q, want yes", got)
	}

	// Wide tables as kube-apiserver prints them.
	wide := k.ok("get", "rolebinding", "-o", "wide")
	wantRows(t, noAge(wide),
		"NAME ROLE USERS GROUPS SERVICEACCOUNTS",
		"bot-reads Role/pod-reader default/bot")
	wide = k.ok("get", "clusterrolebinding", "bot-nodes", "-o", "wide")
	wantRows(t, noAge(wide),
		"NAME ROLE USERS GROUPS SERVICEACCOUNTS",
		"bot-nodes ClusterRole/node-reader alice ops default/bot")
	both := k.ok("get", "clusterrole,rolebinding", "-o", "wide")
	wantContains(t, both, "CREATED AT", "clusterrole.rbac.authorization.k8s.io/node-reader",
		"rolebinding.rbac.authorization.k8s.io/bot-reads", "Role/pod-reader")

	// roleRef is immutable.
	stderr = k.fails("", "patch", "rolebinding", "bot-reads", "--type=merge", "-p", `{"roleRef":{"name":"other"}}`)
	wantContains(t, stderr, `The RoleBinding "bot-reads" is invalid`, "roleRef", "field is immutable")

	// A binding to a missing role is allowed.
	k.ok("create", "rolebinding", "dangling", "--role=missing", "--user=bob")

	// Escalation: the account may create roles and bindings, but grant
	// only what it holds.
	k.ok("create", "role", "rbac-writer", "--verb=create,update", "--resource=roles,rolebindings")
	k.ok("create", "rolebinding", "bot-writes", "--role=rbac-writer", "--serviceaccount=default:bot")
	stderr = k.fails("", "create", "role", "too-much", "--verb=delete", "--resource=secrets", bot)
	wantContains(t, stderr, `roles.rbac.authorization.k8s.io "too-much" is forbidden: user "system:serviceaccount:default:bot"`,
		"is attempting to grant RBAC permissions not currently held", `{APIGroups:[""], Resources:["secrets"], Verbs:["delete"]}`)
	if _, err := k.c.Get(testCtx(t), resources.Roles, "default", "too-much"); err == nil {
		t.Error("the escalating role was stored")
	}
	k.ok("create", "role", "within-rights", "--verb=get", "--resource=pods", bot)
	stderr = k.fails("", "create", "rolebinding", "to-admin", "--clusterrole=cluster-admin", "--serviceaccount=default:bot", bot)
	wantContains(t, stderr, `rolebindings.rbac.authorization.k8s.io "to-admin" is forbidden`, "is attempting to grant RBAC permissions not currently held")
	if _, err := k.c.Get(testCtx(t), resources.RoleBindings, "default", "to-admin"); err == nil {
		t.Error("the escalating binding was stored")
	}
	k.ok("create", "rolebinding", "to-reader", "--role=pod-reader", "--user=carol", bot)
}

// TestKubectlApplyCorpusRBAC: the ServiceAccounts, Roles, ClusterRoles and
// bindings of every published manifest in the test corpus apply with real
// kubectl (client-side validation included), twice, and print.
func TestKubectlApplyCorpusRBAC(t *testing.T) {
	k := newRBACKubectlEnv(t)
	dir := filepath.Join("..", "..", "shared", "corpus")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus in %s: %v", dir, err)
	}
	keep := map[string]bool{"ServiceAccount": true, "Role": true, "ClusterRole": true, "RoleBinding": true, "ClusterRoleBinding": true}
	var docs []string
	namespaces := map[string]bool{}
	bindings := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			var obj map[string]any
			if err := dec.Decode(&obj); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("%s: %v", f, err)
			}
			kind, _ := obj["kind"].(string)
			if !keep[kind] {
				continue
			}
			if md, ok := obj["metadata"].(map[string]any); ok {
				if ns, ok := md["namespace"].(string); ok {
					namespaces[ns] = true
				}
			}
			if strings.HasSuffix(kind, "Binding") {
				bindings++
			}
			y, err := yaml.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			docs = append(docs, string(y))
		}
	}
	if bindings < 5 {
		t.Fatalf("only %d bindings in the corpus", bindings)
	}
	for ns := range namespaces {
		if ns != "default" && ns != "kube-system" {
			k.ok("create", "namespace", ns)
		}
	}
	manifest := writeFile(t, "rbac.yaml", strings.Join(docs, "---\n"))
	k.ok("apply", "-f", manifest)
	out := k.ok("apply", "-f", manifest)
	if strings.Contains(out, "configured") {
		t.Errorf("the second apply changed something:\n%s", out)
	}
	wide := k.ok("get", "clusterrolebindings,rolebindings", "-A", "-o", "wide")
	n := 0
	for _, line := range strings.Split(wide, "\n") {
		if strings.Contains(line, "Role/") {
			n++
		}
	}
	if n < bindings {
		t.Errorf("%d bindings printed, want at least %d:\n%s", n, bindings, wide)
	}
}
