package apiserver

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/apiserver/printers"
	"github.com/everynode/everynode/resources"
)

// tableOptions is a request for server-side printing
// (docs/kubectl-wire.md §2.4): the negotiated Accept clause asked for
// as=Table;g=meta.k8s.io with v=v1 or v1beta1 in JSON or YAML.
type tableOptions struct {
	version string // "v1" or "v1beta1"
	include metav1.IncludeObjectPolicy
}

// tableRequest reports whether the negotiated output is a Table, and how rows
// carry their object (the includeObject parameter: Metadata by default,
// Object, None).
func tableRequest(req *http.Request, out output) (tableOptions, bool, error) {
	if out.convert == nil || !isTable(out.convert) {
		return tableOptions{}, false, nil
	}
	inc, err := includeObjectParam(req.URL.Query())
	if err != nil {
		return tableOptions{}, false, err
	}
	return tableOptions{version: out.convert.Version, include: inc}, true, nil
}

func includeObjectParam(q url.Values) (metav1.IncludeObjectPolicy, error) {
	switch v := metav1.IncludeObjectPolicy(q.Get("includeObject")); v {
	case "":
		return metav1.IncludeMetadata, nil
	case metav1.IncludeMetadata, metav1.IncludeObject, metav1.IncludeNone:
		return v, nil
	default:
		return "", apierrors.NewBadRequest(fmt.Sprintf(
			"invalid includeObject %q: supported values are None, Metadata and Object", v))
	}
}

// newTable builds the Table for objs. withColumns adds the column
// definitions (watch events after the first may leave them out; kubectl reuses
// the last ones). rv, when positive, is the list resourceVersion that
// `kubectl get -w` starts its watch from.
func (s *Server) newTable(r *resources.Resource, objs []resources.Object, o tableOptions, rv int64, withColumns bool) *metav1.Table {
	t := &metav1.Table{TypeMeta: metav1.TypeMeta{Kind: "Table", APIVersion: metav1.GroupName + "/" + o.version}}
	if withColumns {
		t.ColumnDefinitions = printers.Columns(schema.GroupKind{Group: r.Group, Kind: r.Kind})
	}
	if rv > 0 {
		t.ResourceVersion = strconv.FormatInt(rv, 10)
	}
	now := s.now()
	t.Rows = make([]metav1.TableRow, 0, len(objs))
	for _, obj := range objs {
		row := metav1.TableRow{Cells: printers.Cells(obj, now)}
		if pod, ok := obj.(*corev1.Pod); ok {
			row.Conditions = printers.PodConditions(pod)
		}
		switch o.include {
		case metav1.IncludeObject:
			row.Object = runtime.RawExtension{Object: withTypeMeta(r, obj)}
		case metav1.IncludeMetadata:
			row.Object = runtime.RawExtension{Object: partialMetadata(obj, o.version)}
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// partialMetadata is the row object kubectl reads the NAMESPACE column,
// --show-labels and -L from.
func partialMetadata(obj resources.Object, version string) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: metav1.GroupName + "/" + version}}
	if om, ok := obj.(interface{ GetObjectMeta() metav1.Object }); ok {
		if full, ok := om.GetObjectMeta().(*metav1.ObjectMeta); ok {
			m.ObjectMeta = *full // shallow: read-only, encoded at once
			return m
		}
	}
	m.Name, m.Namespace, m.UID = obj.GetName(), obj.GetNamespace(), obj.GetUID()
	m.ResourceVersion, m.CreationTimestamp = obj.GetResourceVersion(), obj.GetCreationTimestamp()
	m.Labels, m.Annotations = obj.GetLabels(), obj.GetAnnotations()
	return m
}

// tableEvent turns a watch event's object into a one-row Table; Status
// objects of ERROR events stay as they are, and a BOOKMARK becomes a Table
// without rows carrying its resourceVersion.
func (s *Server) tableEvent(r *resources.Resource, ev watch.Event, o tableOptions, withColumns bool) runtime.Object {
	obj, ok := ev.Object.(resources.Object)
	if !ok {
		return ev.Object
	}
	if ev.Type == watch.Bookmark {
		t := s.newTable(r, nil, o, 0, withColumns)
		t.ResourceVersion = obj.GetResourceVersion()
		return t
	}
	return s.newTable(r, []resources.Object{obj}, o, 0, withColumns)
}
