package serviceaccount

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
)

// TestMain fails the package's run if any goroutine outlives its tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testkit.LeakOptions()...)
}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func terminating(name string) *corev1.Namespace {
	ns := namespace(name)
	now := metav1.Now()
	ns.DeletionTimestamp = &now
	ns.Status.Phase = corev1.NamespaceTerminating
	return ns
}

func account(fc *fake.Client, ns string) (*corev1.ServiceAccount, error) {
	obj, err := fc.Get(context.Background(), resources.ServiceAccounts, ns, DefaultName)
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.ServiceAccount), nil
}

// creates counts the controller's creates of accounts in ns.
func creates(fc *fake.Client, ns string) int {
	n := 0
	for _, a := range fc.Actions() {
		if a.Verb == fake.VerbCreate && a.Resource == resources.ServiceAccounts.Name && a.Namespace == ns {
			n++
		}
	}
	return n
}

// TestRunEnsuresDefault: existing and new Active namespaces get "default",
// a deleted "default" comes back, an existing one is left as it is, and a
// terminating namespace gets nothing. Run returns once ctx ends, with no
// watch open and no goroutine left.
func TestRunEnsuresDefault(t *testing.T) {
	checkLeaks := testkit.LeakCheck(t)
	mine := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: DefaultName, Labels: map[string]string{"own": "yes"}}}
	fc := fake.New(namespace("a"), namespace("b"), terminating("t"), mine)
	c, err := New(Config{Client: fc, ResyncInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, 2) }()
	exists := func(ns string) func() error {
		return func() error { _, err := account(fc, ns); return err }
	}

	testkit.Eventually(t, 10*time.Second, exists("a"))
	if _, err := fc.Create(ctx, namespace("c"), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, exists("c"))

	old, err := account(fc, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fc.Delete(ctx, resources.ServiceAccounts, "a", DefaultName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		sa, err := account(fc, "a")
		if err != nil {
			return err
		}
		if sa.UID == old.UID {
			return errors.New("still the deleted account")
		}
		return nil
	})

	// Several resyncs pass: b keeps its own account, t gets none.
	testkit.Consistently(t, 300*time.Millisecond, func() error {
		sa, err := account(fc, "b")
		if err != nil {
			return fmt.Errorf("b's account: %w", err)
		}
		if sa.Labels["own"] != "yes" || creates(fc, "b") != 0 {
			return fmt.Errorf("b's account replaced or recreated: labels %v, %d creates", sa.Labels, creates(fc, "b"))
		}
		if _, err := account(fc, "t"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("terminating namespace got an account (%v)", err)
		}
		if n := creates(fc, "t"); n != 0 {
			return fmt.Errorf("%d creates in a terminating namespace", n)
		}
		return nil
	})

	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if n := fc.Watchers(); n != 0 {
		t.Errorf("%d watches open", n)
	}
	checkLeaks()
}

// TestSyncErrors: a create refused because the namespace went away or
// began terminating meanwhile is not an error; an account created meanwhile
// is not either; any other failure is returned, so the namespace is retried.
func TestSyncErrors(t *testing.T) {
	terminatingErr := apierrors.NewForbidden(resources.Namespaces.GroupResource(), "x", errors.New("being terminated"))
	terminatingErr.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}
	for _, tc := range []struct {
		name    string
		err     error
		wantErr bool
	}{
		{"created", nil, false},
		{"already exists", apierrors.NewAlreadyExists(resources.ServiceAccounts.GroupResource(), DefaultName), false},
		{"namespace terminating", terminatingErr, false},
		{"namespace gone", apierrors.NewNotFound(resources.Namespaces.GroupResource(), "x"), false},
		{"other forbidden", apierrors.NewForbidden(resources.ServiceAccounts.GroupResource(), DefaultName, errors.New("no")), true},
		{"server error", apierrors.NewInternalError(errors.New("boom")), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc := fake.New()
			c, err := New(Config{Client: fc})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.queue.ShutDown)
			ns := namespace("x")
			ns.Status.Phase = corev1.NamespaceActive
			if err := c.namespaces.Add(ns); err != nil {
				t.Fatal(err)
			}
			fc.Fail(fake.VerbCreate, resources.ServiceAccounts.Name, tc.err)
			err = c.sync(context.Background(), "x")
			if (err != nil) != tc.wantErr {
				t.Fatalf("sync: %v, want error %t", err, tc.wantErr)
			}
			if n := creates(fc, "x"); n != 1 {
				t.Errorf("%d creates, want 1", n)
			}
		})
	}
}

// TestSyncSkips: nothing is created for a namespace not in the cache, one
// not Active, or one whose account the cache already holds.
func TestSyncSkips(t *testing.T) {
	fc := fake.New()
	c, err := New(Config{Client: fc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.queue.ShutDown)
	pending := namespace("pending") // no phase: not Active
	active := namespace("has")
	active.Status.Phase = corev1.NamespaceActive
	for _, obj := range []any{pending, terminating("t"), active,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "has", Name: DefaultName}}} {
		store := c.namespaces
		if _, ok := obj.(*corev1.ServiceAccount); ok {
			store = c.accounts
		}
		if err := store.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []string{"missing", "pending", "t", "has"} {
		if err := c.sync(context.Background(), ns); err != nil {
			t.Errorf("sync %s: %v", ns, err)
		}
	}
	if a := fc.Actions(); len(a) != 0 {
		t.Errorf("actions %v, want none", a)
	}
}
