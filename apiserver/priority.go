package apiserver

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"

	"github.com/everynode/everynode/apiserver/strategy"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// admitPodPriority runs Kubernetes' Priority admission on a pod being
// created (strategy.AdmitPodPriority) against the stored PriorityClasses.
func (s *Server) admitPodPriority(ctx context.Context, obj resources.Object) error {
	if _, ok := obj.(*corev1.Pod); !ok {
		return nil
	}
	// From the watch cache, as Kubernetes' Priority admission reads an
	// informer cache: it reflects every PriorityClass write this server
	// made (see store.ListCached).
	items, _, err := s.store.ListCached(ctx, resources.PriorityClasses, "", store.Selector{})
	if err != nil {
		return fmt.Errorf("failed to resolve PriorityClass: %w", err)
	}
	classes := make([]*schedulingv1.PriorityClass, 0, len(items))
	for _, it := range items {
		if pc, ok := it.(*schedulingv1.PriorityClass); ok {
			classes = append(classes, pc)
		}
	}
	return strategy.AdmitPodPriority(obj, classes)
}
