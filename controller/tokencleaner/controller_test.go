package tokencleaner

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/everynode/everynode/client/fake"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
)

// TestMain fails the package's run if any goroutine outlives its tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testkit.LeakOptions()...)
}

var start = time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)

// token is a bootstrap token Secret as `everynode token create` and kubeadm
// store it; expiration "" has none.
func token(namespace, id, expiration string) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "bootstrap-token-" + id, UID: types.UID("uid-" + id)},
		Type:       corev1.SecretTypeBootstrapToken,
		Data: map[string][]byte{
			"token-id": []byte(id), "token-secret": []byte("0123456789abcdef"),
			"usage-bootstrap-authentication": []byte("true"),
		},
	}
	if expiration != "" {
		s.Data["expiration"] = []byte(expiration)
	}
	return s
}

func exists(fc *fake.Client, namespace, name string) bool {
	_, err := fc.Get(context.Background(), resources.Secrets, namespace, name)
	return !apierrors.IsNotFound(err)
}

// TestDeletesExpiredTokens: an expired token and one whose expiration is not
// a time are deleted at once; one that expires in an hour is deleted when
// the hour has passed; a token without an expiration, a Secret of another
// type and a token outside kube-system are never touched, nor held in the
// controller's cache; Run returns once ctx ends, with no goroutine left.
func TestDeletesExpiredTokens(t *testing.T) {
	rfc := func(d time.Duration) string { return start.Add(d).Format(time.RFC3339) }
	opaque := token("kube-system", "opaque", rfc(-time.Hour))
	opaque.Type = corev1.SecretTypeOpaque
	fc := fake.New(
		token("kube-system", "expird", rfc(-time.Hour)),
		token("kube-system", "garble", "next tuesday"),
		token("kube-system", "later1", rfc(time.Hour)),
		token("kube-system", "foreva", ""),
		opaque,
		token("default", "elsewh", rfc(-time.Hour)),
	)
	clk := testingclock.NewFakeClock(start)
	c, err := New(Config{Client: fc, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	gone := func(names ...string) func() error {
		return func() error {
			for _, n := range names {
				if exists(fc, "kube-system", n) {
					return fmt.Errorf("%s still exists", n)
				}
			}
			return nil
		}
	}
	testkit.Eventually(t, 10*time.Second, gone("bootstrap-token-expird", "bootstrap-token-garble"))
	if !exists(fc, "kube-system", "bootstrap-token-later1") {
		t.Fatal("a token that expires in an hour was deleted")
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		keys := c.secrets.ListKeys()
		slices.Sort(keys)
		if want := []string{"kube-system/bootstrap-token-foreva", "kube-system/bootstrap-token-later1"}; !slices.Equal(keys, want) {
			return fmt.Errorf("the controller's cache holds %v, want only the live tokens of kube-system %v", keys, want)
		}
		return nil
	})

	// An hour later (the fake clock stepped until the queue's timer for
	// the token fires).
	testkit.Eventually(t, 10*time.Second, func() error {
		clk.Step(10 * time.Minute)
		return gone("bootstrap-token-later1")()
	})
	if now := clk.Now(); now.Before(start.Add(time.Hour)) {
		t.Errorf("the token expiring at %s was deleted at %s", start.Add(time.Hour), now)
	}
	// A token without an expiration outlives any time.
	clk.Step(1000 * time.Hour)
	if err := c.sync(ctx, "kube-system/bootstrap-token-foreva"); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct{ ns, name string }{
		{"kube-system", "bootstrap-token-foreva"}, {"kube-system", "bootstrap-token-opaque"}, {"default", "bootstrap-token-elsewh"},
	} {
		if !exists(fc, s.ns, s.name) {
			t.Errorf("%s/%s was deleted", s.ns, s.name)
		}
	}
	var deletes []string
	for _, a := range fc.Actions() {
		if a.Verb == fake.VerbDelete {
			deletes = append(deletes, a.Namespace+"/"+a.Name)
		}
	}
	if want := []string{"kube-system/bootstrap-token-expird", "kube-system/bootstrap-token-garble", "kube-system/bootstrap-token-later1"}; !slices.Equal(deletes, want) {
		t.Errorf("deletes %v, want %v", deletes, want)
	}
}

// TestReplacedTokenIsNotDeleted: a token judged expired but replaced in the
// meantime by a new Secret of the same name (another UID) is left alone: the
// delete carries the judged Secret's UID as a precondition.
func TestReplacedTokenIsNotDeleted(t *testing.T) {
	current := token("kube-system", "reused", start.Add(time.Hour).Format(time.RFC3339))
	current.UID = "uid-new"
	fc := fake.New(current)
	c, err := New(Config{Client: fc, Clock: testingclock.NewFakeClock(start)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.queue.ShutDown()
	judged := token("kube-system", "reused", start.Add(-time.Hour).Format(time.RFC3339))
	if err := c.secrets.Add(judged); err != nil {
		t.Fatal(err)
	}
	if err := c.sync(context.Background(), "kube-system/bootstrap-token-reused"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	obj, err := fc.Get(context.Background(), resources.Secrets, "kube-system", "bootstrap-token-reused")
	if err != nil || obj.GetUID() != "uid-new" {
		t.Fatalf("the replacing token: %v, %v", obj, err)
	}
	if n := len(fc.Actions()); n != 2 { // the get above, and the refused delete
		t.Errorf("actions %v, want one delete and the test's get", fc.Actions())
	}
}
