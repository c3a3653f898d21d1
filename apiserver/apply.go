package apiserver

import (
	"context"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/everynode/everynode/apiserver/strategy"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// managerFromRequest is the fieldManager parameter, else the User-Agent's
// product name ("kubectl" for "kubectl/v1.32.4 (linux/amd64)"), as Kubernetes
// names managers of requests without one.
func managerFromRequest(req *http.Request) string {
	if m := req.URL.Query().Get("fieldManager"); m != "" {
		return m
	}
	ua, _, _ := strings.Cut(req.UserAgent(), "/")
	if len(ua) > strategy.MaxManagerLength {
		ua = ua[:strategy.MaxManagerLength]
	}
	return ua
}

// serveApply serves PATCH with application/apply-patch+yaml: the body is the
// applier's whole intent. A missing object is created (201); otherwise the
// applied fields are merged into the live object, owned by the field manager,
// and fields another manager owns with a different value are conflicts (409)
// unless force=true.
func (s *Server) serveApply(w http.ResponseWriter, req *http.Request, c call, o output) error {
	dry, strict, body, err := s.patchParams(w, req)
	if err != nil {
		return err
	}
	q := req.URL.Query()
	out, created, err := s.applyBody(req.Context(), c, body, q.Get("fieldManager"), queryBool(q, "force"), strict, dry)
	if err != nil {
		return err
	}
	warnStoredOnly(w, c.r)
	code := http.StatusOK
	if created {
		code = http.StatusCreated
	}
	return s.respond(w, req, code, o, c.r, out)
}

// applyBody authorizes and runs one server-side apply of body by manager.
func (s *Server) applyBody(ctx context.Context, c call, body []byte, manager string, force, strict, dry bool) (resources.Object, bool, error) {
	if err := strategy.CheckManager(manager); err != nil {
		return nil, false, err
	}
	applied, err := strategy.DecodeApplied(c.r, c.namespace, c.name, body, strict)
	if err != nil {
		return nil, false, err
	}
	if err := s.authorize(ctx, c, "patch"); err != nil {
		return nil, false, err
	}
	return s.applyObject(ctx, c, applied, manager, force, dry)
}

// applyObject creates or merges the applied object; created reports a create.
func (s *Server) applyObject(ctx context.Context, c call, applied *unstructured.Unstructured, manager string, force, dry bool) (resources.Object, bool, error) {
	c.applying = true
	apply := func(live resources.Object) (resources.Object, error) {
		return s.writer.Fields.Apply(c.r, live, applied, manager, force)
	}
	_, err := s.store.Get(ctx, c.r, c.namespace, c.name)
	if store.IsNotFound(err) {
		obj, err := apply(nil)
		if err != nil {
			return nil, false, err
		}
		out, err := s.createObject(ctx, c, obj, dry)
		if err == nil || !apierrors.IsAlreadyExists(s.statusError(err)) {
			return out, err == nil, err
		}
		// Created meanwhile: merge into it below.
	} else if err != nil {
		return nil, false, s.missingNamespace(ctx, c, err)
	}
	mutate := func(cur resources.Object) (resources.Object, error) {
		next, err := apply(cur)
		if err != nil {
			return nil, err
		}
		next.SetResourceVersion(cur.GetResourceVersion())
		return s.writer.Update(c.op(), next, cur)
	}
	out, err := s.applyUpdate(ctx, c, "patch", mutate, dry)
	return out, false, err
}
