package integration

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// TestRBACOnRunningServer: a running server has Kubernetes' default roles,
// the aggregation controller fills view (and keeps extending it from
// aggregate-to-view roles), a service account's token from TokenRequest
// gets exactly what a binding of view grants, and the nodes keep working
// under their node rules.
func TestRBACOnRunningServer(t *testing.T) {
	c := newCluster(t, 1)
	if _, err := c.admin.Create(c.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bot"}},
		client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	bot := c.httpClient(c.requestToken("default", "bot"))

	viewHas := func(want rbacv1.PolicyRule) func() error {
		return func() error {
			obj, err := c.admin.Get(c.ctx, resources.ClusterRoles, "", "view")
			if err != nil {
				return err
			}
			for _, r := range obj.(*rbacv1.ClusterRole).Rules {
				if slices.Equal(r.Resources, want.Resources) && slices.Equal(r.APIGroups, want.APIGroups) && slices.Equal(r.Verbs, want.Verbs) {
					return nil
				}
			}
			return fmt.Errorf("view lacks %v", want)
		}
	}
	eventually(t, waitLong, func() error {
		obj, err := c.admin.Get(c.ctx, resources.ClusterRoles, "", "view")
		if err != nil {
			return err
		}
		for _, r := range obj.(*rbacv1.ClusterRole).Rules {
			if slices.Contains(r.Resources, "pods") && slices.Contains(r.Verbs, "list") {
				return nil
			}
		}
		return errors.New("view does not list pods yet")
	})

	forbidden := func(err error) error {
		if !apierrors.IsForbidden(err) {
			return fmt.Errorf("want 403, got %v", err)
		}
		return nil
	}
	if _, _, err := bot.List(c.ctx, resources.Pods, "default", client.ListOptions{}); forbidden(err) != nil {
		t.Fatalf("before the binding: %v", forbidden(err))
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bot-view"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: "bot"}}}
	if _, err := c.admin.Create(c.ctx, rb, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := bot.List(c.ctx, resources.Pods, "default", client.ListOptions{}); err != nil {
		t.Fatalf("after the binding: %v", err)
	}
	for _, try := range []struct {
		r  *resources.Resource
		ns string
	}{{resources.Pods, "kube-system"}, {resources.Secrets, "default"}, {resources.Nodes, ""}} {
		if _, _, err := bot.List(c.ctx, try.r, try.ns, client.ListOptions{}); forbidden(err) != nil {
			t.Errorf("list %s in %q: %v", try.r.Name, try.ns, forbidden(err))
		}
	}

	// A role labelled aggregate-to-view extends view.
	extra := rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{"example.com"}, Resources: []string{"widgets"}}
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "widgets-view",
		Labels: map[string]string{"rbac.authorization.k8s.io/aggregate-to-view": "true"}}, Rules: []rbacv1.PolicyRule{extra}}
	if _, err := c.admin.Create(c.ctx, cr, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, waitLong, viewHas(extra))
	// (node-0 registered under the chain before any of this: newCluster
	// waited for it, its agent's writes decided by the node rules.)
}

// requestToken asks the server for a token of the service account ns/name
// (TokenRequest, as `kubectl create token`), as the admin.
func (c *cluster) requestToken(ns, name string) string {
	c.t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.caPEM)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	body, err := json.Marshal(&authenticationv1.TokenRequest{})
	if err != nil {
		c.t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(c.ctx, http.MethodPost,
		c.url+"/api/v1/namespaces/"+ns+"/serviceaccounts/"+name+"/token", bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	res, err := hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	var tr authenticationv1.TokenRequest
	if err := json.NewDecoder(res.Body).Decode(&tr); err != nil || res.StatusCode != http.StatusCreated || tr.Status.Token == "" {
		c.t.Fatalf("TokenRequest: %d %v %+v", res.StatusCode, err, tr.Status)
	}
	return tr.Status.Token
}
