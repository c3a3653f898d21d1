package fake

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// TestCuttable: a cut fails every call with 503 and ends the open watch; a
// restore lets calls through again.
func TestCuttable(t *testing.T) {
	ctx := context.Background()
	c := &Cuttable{Client: New(pod("default", "a", "", nil))}
	w, err := c.Watch(ctx, resources.Pods, "default", client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	<-w.ResultChan() // the synthetic ADDED of pod a
	c.Cut()
	if _, ok := <-w.ResultChan(); ok {
		t.Error("the watch open at the cut did not end")
	}
	if _, err := c.Get(ctx, resources.Pods, "default", "a"); !apierrors.IsServiceUnavailable(err) {
		t.Errorf("get while cut: %v, want 503 ServiceUnavailable", err)
	}
	if _, err := c.Watch(ctx, resources.Pods, "default", client.ListOptions{}); !apierrors.IsServiceUnavailable(err) {
		t.Errorf("watch while cut: %v, want 503 ServiceUnavailable", err)
	}
	c.Restore()
	if _, err := c.Get(ctx, resources.Pods, "default", "a"); err != nil {
		t.Errorf("get after restore: %v", err)
	}
}
