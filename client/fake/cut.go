package fake

import (
	"context"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// Cuttable is a Client behind a link a test can cut, for tests of what an
// agent does while its server is unreachable: while cut, every call fails as
// an unreachable server's would (503 ServiceUnavailable) and the open
// watches end. Create it as &Cuttable{Client: c}; it starts connected.
type Cuttable struct {
	*Client
	mu      sync.Mutex
	down    bool
	watches []watch.Interface
}

// Watch is Client.Watch, remembered so that Cut can end it.
func (c *Cuttable) Watch(ctx context.Context, r *resources.Resource, ns string, opts client.ListOptions) (watch.Interface, error) {
	w, err := c.Client.Watch(ctx, r, ns, opts)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		w.Stop()
	} else {
		c.watches = append(c.watches, w)
	}
	return w, nil
}

// Cut makes every later call fail and ends the open watches. It replaces
// any Fail rule for "*", "*".
func (c *Cuttable) Cut() {
	c.Client.Fail("*", "*", apierrors.NewServiceUnavailable("test: the API server is unreachable"))
	c.mu.Lock()
	c.down = true
	ws := c.watches
	c.watches = nil
	c.mu.Unlock()
	for _, w := range ws {
		w.Stop()
	}
}

// Restore lets calls through again, removing the Fail rule for "*", "*".
func (c *Cuttable) Restore() {
	c.mu.Lock()
	c.down = false
	c.mu.Unlock()
	c.Client.Fail("*", "*", nil)
}
