package apiserver

import (
	"context"
	"fmt"
	"net/http"

	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/everynode/everynode/apiserver/strategy"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// warnStoredOnly adds the Warning every successful write of a stored-only
// kind gets (docs/api.md, "What everynode does with each kind"): kubectl
// prints it as "Warning: ...".
func warnStoredOnly(w http.ResponseWriter, r *resources.Resource) {
	notDone, ok := resources.StoredOnly(r)
	if !ok {
		return
	}
	addWarning(w, fmt.Sprintf("everynode stores %s but does not act on them: %s", r.GroupResource(), notDone))
}

// admitObject is the admission of a created or updated object, after
// defaults and validation: a PriorityClass may be globalDefault only while no
// other is (the Priority admission plugin upstream).
func (s *Server) admitObject(ctx context.Context, c call, obj resources.Object) error {
	pc, ok := obj.(*schedulingv1.PriorityClass)
	if !ok || !pc.GlobalDefault {
		return nil
	}
	items, _, err := s.store.List(ctx, resources.PriorityClasses, "", store.Selector{})
	if err != nil {
		return err
	}
	for _, it := range items {
		if o, ok := it.(*schedulingv1.PriorityClass); ok && o.GlobalDefault && o.Name != pc.Name {
			return apierrors.NewForbidden(c.r.GroupResource(), pc.Name,
				fmt.Errorf("PriorityClass %v is already marked as default. Only one default can exist", o.Name))
		}
	}
	return nil
}

// EnsurePriorityClasses creates the system PriorityClasses Kubernetes has from
// the start (system-node-critical, system-cluster-critical) when missing.
func (s *Server) EnsurePriorityClasses(ctx context.Context) error {
	for _, pc := range strategy.SystemPriorityClasses() {
		resources.PriorityClasses.SetTypeMeta(pc)
		c := call{user: systemUser(), r: resources.PriorityClasses, name: pc.Name}
		if _, err := s.createObject(ctx, c, pc, false); err != nil && !apierrors.IsAlreadyExists(s.statusError(err)) {
			return fmt.Errorf("apiserver: ensure priority class %q: %w", pc.Name, err)
		}
	}
	return nil
}
