package integration

import (
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// TestNamespacesGetDefaultServiceAccount: on a running server the standard
// namespaces and every namespace created later get a "default"
// ServiceAccount; a deleted one comes back; a namespace created while no
// controller runs gets it once controllers start; a deleted namespace takes
// its account along and does not get it back.
func TestNamespacesGetDefaultServiceAccount(t *testing.T) {
	c := newCluster(t, 0)
	account := func(ns string) func() error {
		return func() error {
			_, err := c.admin.Get(c.ctx, resources.ServiceAccounts, ns, "default")
			return err
		}
	}
	for _, ns := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
		eventually(t, 30*time.Second, account(ns))
	}
	newNS := func(name string) {
		t.Helper()
		if _, err := c.admin.Create(c.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, client.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	newNS("logging")
	eventually(t, 30*time.Second, account("logging"))

	if _, err := c.admin.Delete(c.ctx, resources.ServiceAccounts, "logging", "default", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, account("logging"))

	c.stopControllers()
	newNS("later")
	if err := account("later")(); !apierrors.IsNotFound(err) {
		t.Fatalf("account without controllers: %v", err)
	}
	c.startControllers()
	eventually(t, 30*time.Second, account("later"))

	if _, err := c.admin.Delete(c.ctx, resources.Namespaces, "", "logging", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		if _, err := c.admin.Get(c.ctx, resources.Namespaces, "", "logging"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("namespace still there (%v)", err)
		}
		return nil
	})
	consistently(t, time.Second, func() error {
		err := account("logging")()
		if !apierrors.IsNotFound(err) {
			return errors.Join(errors.New("the deleted namespace's account is back"), err)
		}
		return nil
	})
}
