package clusterroleaggregation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
)

// TestMain fails the package's run if any goroutine outlives its tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testkit.LeakOptions()...)
}

const viewLabel = "rbac.authorization.k8s.io/aggregate-to-view"

func role(name string, lbl map[string]string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbl}, Rules: rules}
}

func rule(verb, resource string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: []string{verb}, APIGroups: []string{""}, Resources: []string{resource}}
}

func rulesOf(fc *fake.Client, name string) ([]rbacv1.PolicyRule, error) {
	obj, err := fc.Get(context.Background(), resources.ClusterRoles, "", name)
	if err != nil {
		return nil, err
	}
	return obj.(*rbacv1.ClusterRole).Rules, nil
}

func wantRules(fc *fake.Client, name string, want ...rbacv1.PolicyRule) func() error {
	return func() error {
		got, err := rulesOf(fc, name)
		if err != nil {
			return err
		}
		if !equality.Semantic.DeepEqual(got, want) {
			return fmt.Errorf("rules of %s = %v, want %v", name, got, want)
		}
		return nil
	}
}

// TestAggregation: an aggregated role gets the rules of the roles its
// selector matches, by name, without duplicates and without its own; a new
// matching role adds its rules, a deleted one takes them away, a changed
// label stops a role from counting.
func TestAggregation(t *testing.T) {
	checkLeaks := testkit.LeakCheck(t)
	on := map[string]string{viewLabel: "true"}
	view := role("view", nil, rule("stale", "pods"))
	view.AggregationRule = &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: on}}}
	fc := fake.New(view,
		role("b-extra", on, rule("get", "pods"), rule("list", "pods")),
		role("a-base", on, rule("get", "pods"), rule("get", "nodes")),
		role("unrelated", nil, rule("delete", "pods")))
	c, err := New(Config{Client: fc})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, 1) }()

	testkit.Eventually(t, 10*time.Second, wantRules(fc, "view", rule("get", "pods"), rule("get", "nodes"), rule("list", "pods")))

	if _, err := fc.Create(ctx, role("c-more", on, rule("watch", "pods")), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, wantRules(fc, "view",
		rule("get", "pods"), rule("get", "nodes"), rule("list", "pods"), rule("watch", "pods")))

	if _, err := fc.Delete(ctx, resources.ClusterRoles, "", "a-base", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, wantRules(fc, "view", rule("get", "pods"), rule("list", "pods"), rule("watch", "pods")))

	obj, err := fc.Get(ctx, resources.ClusterRoles, "", "c-more")
	if err != nil {
		t.Fatal(err)
	}
	off := obj.(*rbacv1.ClusterRole).DeepCopy()
	off.Labels = nil
	if _, err := fc.Update(ctx, off, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, wantRules(fc, "view", rule("get", "pods"), rule("list", "pods")))

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	checkLeaks()
}

// TestConflictIsNotAWarning: a conflict (the role changed since it was read,
// as at every server start while the bootstrap roles are reconciled) is
// retried without a warning; any other failure warns.
func TestConflictIsNotAWarning(t *testing.T) {
	var buf testkit.Buffer
	c := &Controller{logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	gr := schema.GroupResource{Group: rbacv1.GroupName, Resource: "clusterroles"}
	c.syncFailed("edit", fmt.Errorf("update clusterrole edit: %w", apierrors.NewConflict(gr, "edit", errors.New("the object has been modified"))))
	if buf.String() != "" {
		t.Errorf("a conflict was logged as a warning: %s", buf.String())
	}
	c.syncFailed("edit", errors.New("connection refused"))
	if !strings.Contains(buf.String(), "level=WARN") {
		t.Errorf("another failure was not a warning: %q", buf.String())
	}
}
