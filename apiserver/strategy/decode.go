// Package strategy holds the pure request-processing rules of the API server:
// decoding request bodies (with Kubernetes' strict field validation), defaulting,
// server-set metadata on create and update, validation, and patch application.
//
// The functions do no I/O and keep no mutable package state; the clock and
// UID generation are injected (only generateName's random suffix comes from
// apimachinery's random source). The HTTP layer calls them in Kubernetes' order:
// Decode → Default → PrepareForCreate → ValidateCreate on POST, and
// Decode or ApplyPatch → Default → PrepareForUpdate → ValidateUpdate on PUT
// and PATCH. The rules follow docs/controller-rules.md §6 and the upstream
// registry strategies (pkg/registry/*/strategy.go).
package strategy

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/everynode/everynode/resources"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Content types Decode understands.
const (
	ContentTypeJSON = "application/json"
	ContentTypeYAML = "application/yaml"
)

// Decode decodes a request body into a new object of r's type.
//
// contentType is application/json (also "") or application/yaml; parameters
// such as "; charset=utf-8" are ignored. apiVersion and kind, when present,
// must equal r's; when absent they are filled in. strict (fieldValidation=Strict)
// rejects unknown and duplicate fields with Kubernetes' message
// `strict decoding error: unknown field "spec.foo"`. Every error is a
// *apierrors.StatusError: 400 BadRequest for bad bodies, 415 for other content types.
func Decode(r *resources.Resource, contentType string, body []byte, strict bool) (resources.Object, error) {
	js, err := toJSON(contentType, body, strict)
	if err != nil {
		return nil, err
	}
	return decodeJSON(r, js, strict)
}

// toJSON converts a YAML body to JSON; JSON bodies are returned unchanged.
func toJSON(contentType string, body []byte, strict bool) ([]byte, error) {
	mt := strings.ToLower(strings.TrimSpace(contentType))
	if i := strings.IndexByte(mt, ';'); i >= 0 {
		mt = strings.TrimSpace(mt[:i])
	}
	switch mt {
	case "", ContentTypeJSON, "*/*":
		return body, nil
	case ContentTypeYAML, "application/x-yaml", "text/yaml", "application/apply-patch+yaml":
		var (
			js  []byte
			err error
		)
		if strict {
			js, err = yaml.YAMLToJSONStrict(body)
		} else {
			js, err = yaml.YAMLToJSON(body)
		}
		if err != nil {
			if strict && isYAMLDuplicateKey(err) {
				return nil, apierrors.NewBadRequest(runtime.NewStrictDecodingError([]error{err}).Error())
			}
			return nil, apierrors.NewBadRequest(fmt.Sprintf("error converting YAML to JSON: %v", err))
		}
		return js, nil
	default:
		return nil, unsupportedMediaType(fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: %s, %s", ContentTypeJSON, ContentTypeYAML))
	}
}

func isYAMLDuplicateKey(err error) bool {
	return strings.Contains(err.Error(), "already set in map") || strings.Contains(err.Error(), "mapping key")
}

// typeMeta is the first pass over a body: only apiVersion and kind.
type typeMeta struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
}

// decodeJSON decodes a JSON document into a fresh object of r's type.
func decodeJSON(r *resources.Resource, js []byte, strict bool) (resources.Object, error) {
	trimmed := bytes.TrimSpace(js)
	if len(trimmed) == 0 {
		return nil, apierrors.NewBadRequest("the request body is empty; expected a JSON or YAML object")
	}
	if trimmed[0] != '{' {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: the body must be a JSON object",
			r.Kind, r.Version, r.Kind))
	}
	var tm typeMeta
	if err := kjson.UnmarshalCaseSensitivePreserveInts(trimmed, &tm); err != nil {
		return nil, decodeError(r, tm, err)
	}
	if err := checkTypeMeta(r, tm); err != nil {
		return nil, err
	}
	obj := r.New()
	strictErrs, err := kjson.UnmarshalStrict(trimmed, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, decodeError(r, tm, err)
	}
	if strict && len(strictErrs) > 0 {
		return nil, apierrors.NewBadRequest(runtime.NewStrictDecodingError(strictErrs).Error())
	}
	r.SetTypeMeta(obj)
	return obj, nil
}

// checkTypeMeta rejects a body whose apiVersion or kind names another resource.
func checkTypeMeta(r *resources.Resource, tm typeMeta) error {
	if tm.APIVersion != "" && tm.APIVersion != r.APIVersion() {
		return apierrors.NewBadRequest(fmt.Sprintf("the API version in the data (%s) does not match the expected API version (%s)",
			tm.APIVersion, r.APIVersion()))
	}
	if tm.Kind != "" && tm.Kind != r.Kind {
		return apierrors.NewBadRequest(fmt.Sprintf("the kind in the data (%s) does not match the expected kind (%s)",
			tm.Kind, r.Kind))
	}
	return nil
}

// decodeError turns a JSON parse or type error into Kubernetes' 400 message.
func decodeError(r *resources.Resource, tm typeMeta, err error) error {
	kind, version := tm.Kind, r.Version
	if kind == "" {
		kind = r.Kind
	}
	if gv, perr := parseGroupVersion(tm.APIVersion); perr == nil && gv != "" {
		version = gv
	}
	return apierrors.NewBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: %v", kind, version, r.Kind, err))
}

// parseGroupVersion returns the version part of an apiVersion string.
func parseGroupVersion(apiVersion string) (string, error) {
	if apiVersion == "" {
		return "", nil
	}
	if i := strings.LastIndexByte(apiVersion, '/'); i >= 0 {
		return apiVersion[i+1:], nil
	}
	return apiVersion, nil
}

// InvalidError builds the 422 Invalid status error for r's kind, the way the
// Kubernetes API server reports validation failures (one cause per field error).
func InvalidError(r *resources.Resource, name string, errs field.ErrorList) error {
	return apierrors.NewInvalid(r.GVK().GroupKind(), name, errs)
}

// asStatus makes sure err is a *apierrors.StatusError, wrapping others as 400.
func asStatus(err error) error {
	var se *apierrors.StatusError
	if errors.As(err, &se) {
		return se
	}
	return apierrors.NewBadRequest(err.Error())
}

// unsupportedMediaType builds a 415 status error with msg.
func unsupportedMediaType(msg string) *apierrors.StatusError {
	return statusError(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType, msg)
}

// statusError builds a status error with the given code, reason and message.
func statusError(code int32, reason metav1.StatusReason, msg string) *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    code,
		Reason:  reason,
		Message: msg,
	}}
}

// objectMeta returns obj's ObjectMeta for direct field access.
func objectMeta(obj resources.Object) *metav1.ObjectMeta {
	if a, ok := obj.(interface{ GetObjectMeta() metav1.Object }); ok {
		if m, ok := a.GetObjectMeta().(*metav1.ObjectMeta); ok {
			return m
		}
	}
	return nil
}
