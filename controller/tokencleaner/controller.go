// Package tokencleaner deletes bootstrap tokens once they expire, as
// kube-controller-manager's tokencleaner does
// (k8s.io/kubernetes pkg/controller/bootstrap/tokencleaner.go; off by
// default there, kubeadm turns it on, and everynode always runs it):
//
//   - it watches the Secrets of type bootstrap.kubernetes.io/token in
//     kube-system (those `everynode token create` and kubeadm write), and
//     nothing else;
//   - a token whose expiration has passed, or is not an RFC 3339 time, is
//     deleted, on the condition that it is still the Secret that was judged
//     (its UID); one without an expiration never expires;
//   - a token that expires later is looked at again when it does.
//
// An expired token admits no agent whatever this controller does (the join
// endpoint checks the expiration itself); deleting it keeps kube-system
// from filling with dead credentials, as in Kubernetes. It acts only
// through client.Interface.
package tokencleaner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstrapsecret "k8s.io/cluster-bootstrap/util/secrets"
	"k8s.io/utils/clock"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/controller/internal/informer"
	"github.com/everynode/everynode/controller/internal/workers"
	"github.com/everynode/everynode/resources"
)

// fieldSelector picks the Secrets the controller judges.
const fieldSelector = "metadata.namespace=" + metav1.NamespaceSystem + ",type=" + string(bootstrapapi.SecretTypeBootstrapToken)

// Config configures a Controller.
type Config struct {
	// Client is the API. Required.
	Client client.Interface
	// Logger; nil discards.
	Logger *slog.Logger
	// Clock; nil is the real clock.
	Clock clock.WithTicker
}

// Controller deletes expired bootstrap tokens. Create with New, start once
// with Run.
type Controller struct {
	client  client.Interface
	logger  *slog.Logger
	clock   clock.WithTicker
	set     *informer.Set
	secrets cache.Indexer
	queue   workqueue.TypedRateLimitingInterface[string] // namespace/name
}

// New builds a Controller; nothing runs until Run.
func New(cfg Config) (_ *Controller, err error) {
	if cfg.Client == nil {
		return nil, errors.New("tokencleaner: Config.Client is required")
	}
	c := &Controller{client: cfg.Client, logger: cfg.Logger, clock: cfg.Clock}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	c.queue = workers.NewQueue[string](c.clock)
	defer workers.ShutDownOnError(c.queue, &err)
	// Its own informer, filtered by the API: the controller never holds the
	// cluster's other Secrets.
	c.set = informer.NewSet(nil, cfg.Client)
	inf := c.set.AddFiltered(resources.Secrets, fieldSelector)
	c.secrets = inf.GetIndexer()
	enqueue := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, cur any) { enqueue(cur) },
	}); err != nil {
		return nil, fmt.Errorf("tokencleaner: %w", err)
	}
	return c, nil
}

// Run starts the informer, waits for its cache, runs one worker and blocks
// until ctx ends; it returns after every goroutine it started has stopped.
func (c *Controller) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	defer c.queue.ShutDown()
	if err := c.set.Start(ctx, &wg, "tokencleaner"); err != nil {
		return err
	}
	workers.Run(ctx, &wg, 1, c.queue, c.sync, func(key string, err error) {
		c.logger.Warn("deleting an expired bootstrap token failed; will retry", "secret", key, "err", err)
	})
	c.logger.Info("tokencleaner controller: started")
	<-ctx.Done()
	return nil
}

// sync deletes the token key if it has expired, or looks at it again when it
// will have.
func (c *Controller) sync(ctx context.Context, key string) error {
	obj, exists, err := c.secrets.GetByKey(key)
	if err != nil {
		return fmt.Errorf("bootstrap token %s from the cache: %w", key, err)
	}
	if !exists {
		return nil
	}
	s, ok := obj.(*corev1.Secret)
	if !ok || s.DeletionTimestamp != nil {
		return nil
	}
	ttl, expired := bootstrapsecret.GetExpiration(s, c.clock.Now())
	if !expired {
		if ttl > 0 {
			c.queue.AddAfter(key, ttl)
		}
		return nil
	}
	uid := s.UID
	_, err = c.client.Delete(ctx, resources.Secrets, s.Namespace, s.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid},
	})
	// Gone already, or replaced by a new Secret of that name: the new one
	// is judged on its own event.
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete expired bootstrap token %s: %w", key, err)
	}
	c.logger.Info("deleted an expired bootstrap token", "secret", key,
		"expiration", string(s.Data[bootstrapapi.BootstrapTokenExpirationKey]))
	return nil
}
