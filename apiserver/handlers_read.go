package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/everynode/everynode/apiserver/strategy"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// getObject reads one object.
func (s *Server) getObject(ctx context.Context, c call) (resources.Object, error) {
	if err := s.authorize(ctx, c, "get"); err != nil {
		return nil, err
	}
	obj, err := s.store.Get(ctx, c.r, c.namespace, c.name)
	if err != nil {
		return nil, err
	}
	return withTypeMeta(c.r, obj), nil
}

// listObjects lists the objects matching sel. The items may be shared with
// the store's watch cache: callers must not modify them.
func (s *Server) listObjects(ctx context.Context, c call, sel store.Selector) ([]resources.Object, int64, error) {
	c.fields = sel.Field
	if err := s.authorize(ctx, c, "list"); err != nil {
		return nil, 0, err
	}
	return s.store.List(ctx, c.r, c.namespace, sel)
}

// listObject builds the XxxList response object for items.
func listObject(r *resources.Resource, items []resources.Object, rv int64) (runtime.Object, error) {
	list := r.NewList()
	objs := make([]runtime.Object, len(items))
	for i, it := range items {
		objs[i] = it
	}
	if err := meta.SetList(list, objs); err != nil {
		return nil, fmt.Errorf("apiserver: build %s list: %w", r.Kind, err)
	}
	la, err := meta.ListAccessor(list)
	if err != nil {
		return nil, fmt.Errorf("apiserver: build %s list: %w", r.Kind, err)
	}
	if rv > 0 {
		la.SetResourceVersion(strconv.FormatInt(rv, 10))
	}
	list.GetObjectKind().SetGroupVersionKind(r.GroupVersion().WithKind(r.Kind + "List"))
	return list, nil
}

func (s *Server) serveGet(w http.ResponseWriter, req *http.Request, c call) error {
	out, err := s.wire.negotiateOutput(req, resourceRestrictions{})
	if err != nil {
		return err
	}
	to, asTable, err := tableRequest(req, out)
	if err != nil {
		return err
	}
	obj, err := s.getObject(req.Context(), c)
	if err != nil {
		return err
	}
	if asTable {
		s.wire.write(w, http.StatusOK, out, "", s.newTable(c.r, []resources.Object{obj}, to, 0, true))
		return nil
	}
	s.wire.write(w, http.StatusOK, out, "", obj)
	return nil
}

// respond writes the object a write request produced: itself, or a one-row
// Table when the client negotiated one (as kube-apiserver's
// transformResponseObject does).
func (s *Server) respond(w http.ResponseWriter, req *http.Request, code int, out output, r *resources.Resource, obj resources.Object) error {
	to, asTable, err := tableRequest(req, out)
	if err != nil {
		return err
	}
	if asTable {
		s.wire.write(w, code, out, "", s.newTable(r, []resources.Object{obj}, to, 0, true))
		return nil
	}
	s.wire.write(w, code, out, "", obj)
	return nil
}

// respondList writes a list response: the XxxList, or a Table of its items.
func (s *Server) respondList(w http.ResponseWriter, req *http.Request, out output, r *resources.Resource, items []resources.Object, rv int64) error {
	to, asTable, err := tableRequest(req, out)
	if err != nil {
		return err
	}
	if asTable {
		s.wire.write(w, http.StatusOK, out, "", s.newTable(r, items, to, rv, true))
		return nil
	}
	list, err := listObject(r, items, rv)
	if err != nil {
		return err
	}
	s.wire.write(w, http.StatusOK, out, "", list)
	return nil
}

// serveList serves list, or watch when the query asks for it.
func (s *Server) serveList(w http.ResponseWriter, req *http.Request, c call) error {
	out, err := s.wire.negotiateOutput(req, resourceRestrictions{})
	if err != nil {
		return err
	}
	q := req.URL.Query()
	if v := q.Get("watch"); v != "" {
		watch, err := strconv.ParseBool(v)
		if err != nil {
			return apierrors.NewBadRequest(fmt.Sprintf("invalid watch parameter %q: want true or false", v))
		}
		if watch {
			setScope(req.Context(), "watch", c.r.Name)
			return s.serveWatch(w, req, c)
		}
	}
	sel, err := parseSelector(c.r, q.Get("labelSelector"), q.Get("fieldSelector"))
	if err != nil {
		return err
	}
	if _, _, err := tableRequest(req, out); err != nil {
		return err
	}
	items, rv, err := s.listObjects(req.Context(), c, sel)
	if err != nil {
		return err
	}
	return s.respondList(w, req, out, c.r, items, rv)
}

// parseSelector parses label and field selector strings with the shared
// rules (strategy.ParseSelector).
func parseSelector(r *resources.Resource, labelSel, fieldSel string) (store.Selector, error) {
	ls, fs, err := strategy.ParseSelector(r, labelSel, fieldSel)
	return store.Selector{Label: ls, Field: fs}, err
}

// parseResourceVersion parses a watch resourceVersion; "" means 0.
func parseResourceVersion(v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	rv, err := strconv.ParseInt(v, 10, 64)
	if err != nil || rv < 0 {
		return 0, apierrors.NewBadRequest(fmt.Sprintf("invalid resourceVersion %q: want a non-negative integer", v))
	}
	return rv, nil
}

// parseTimeoutSeconds parses timeoutSeconds; "" means no limit (0).
func parseTimeoutSeconds(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, apierrors.NewBadRequest(fmt.Sprintf("invalid timeoutSeconds %q: want a non-negative integer", v))
	}
	return time.Duration(n) * time.Second, nil
}

func queryBool(q url.Values, key string) bool {
	b, _ := strconv.ParseBool(q.Get(key))
	return b
}

func (s *Server) serveHealth(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok"))
}

// serveReady answers 200 once the store answers a read.
func (s *Server) serveReady(w http.ResponseWriter, req *http.Request) {
	ctx, cancel := context.WithTimeout(req.Context(), 3*time.Second)
	defer cancel()
	_, err := s.store.Get(ctx, resources.Namespaces, "", "default")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err != nil && !store.IsNotFound(err) {
		// Anyone may ask: the reason goes to the log, not to the caller, as
		// kube-apiserver's readyz says "reason withheld".
		s.log.Warn("readyz check failed", "check", "store", "err", err)
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("[-]store failed: reason withheld\nreadyz check failed"))
		return
	}
	_, _ = w.Write([]byte("ok"))
}

func (s *Server) serveVersion(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.version)
}
