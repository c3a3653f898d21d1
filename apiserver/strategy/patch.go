package strategy

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/everynode/everynode/resources"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/mergepatch"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// Limits on JSON patches, as the Kubernetes API server applies them.
const (
	// MaxJSONPatchOperations is the most operations one JSON patch may carry.
	MaxJSONPatchOperations = 10000
	// maxCopyGrowth bounds how much a JSON patch with copy operations may
	// grow the document (each copy can double it), like the API server's
	// AccumulatedCopySizeLimit: the 3 MiB request body limit.
	maxCopyGrowth = 3 << 20
)

// ApplyPatch returns a new object: cur with the patch applied, decoded into
// r's type. cur is not modified.
//
//   - types.StrategicMergePatchType: strategicpatch.StrategicMergePatch with
//     r's Go type as schema, so $setElementOrder, $patch, $retainKeys,
//     $deleteFromPrimitiveList and atomic lists (node taints) behave as in Kubernetes;
//   - types.MergePatchType: RFC 7386 JSON merge patch (evanphx/json-patch v4);
//   - types.JSONPatchType: RFC 6902 JSON patch (evanphx/json-patch v4).
//
// Errors are *apierrors.StatusError: 415 for any other patch type, 400 for a
// malformed patch, a patch changing apiVersion or kind, or a result that does
// not decode into r's type (a string where an int belongs), 422 for a JSON
// patch whose operations do not apply (a missing path, a failed test).
// Unknown fields in the result are dropped, as with fieldValidation=Ignore;
// ApplyPatchStrict rejects them instead.
func ApplyPatch(r *resources.Resource, cur resources.Object, pt types.PatchType, patch []byte) (resources.Object, error) {
	return applyPatch(r, cur, pt, patch, false)
}

// ApplyPatchStrict is ApplyPatch for fieldValidation=Strict: unknown or
// duplicate fields in the patched document are a 400 BadRequest with the
// message `strict decoding error: unknown field "spec.foo"`.
func ApplyPatchStrict(r *resources.Resource, cur resources.Object, pt types.PatchType, patch []byte) (resources.Object, error) {
	return applyPatch(r, cur, pt, patch, true)
}

func applyPatch(r *resources.Resource, cur resources.Object, pt types.PatchType, patch []byte, strict bool) (resources.Object, error) {
	switch pt {
	case types.StrategicMergePatchType, types.MergePatchType, types.JSONPatchType:
	default:
		return nil, unsupportedMediaType(fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: %s, %s, %s",
			types.JSONPatchType, types.MergePatchType, types.StrategicMergePatchType))
	}
	c, ok := cur.DeepCopyObject().(resources.Object)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("strategy: patch: %T is not an object", cur))
	}
	r.SetTypeMeta(c)
	curJSON, err := json.Marshal(c)
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("strategy: patch: encode current %s: %w", r.Kind, err))
	}

	patched, err := safely(func() ([]byte, error) {
		switch pt {
		case types.StrategicMergePatchType:
			out, err := strategicpatch.StrategicMergePatch(curJSON, patch, r.New())
			if err != nil {
				return nil, strategicPatchError(err)
			}
			return out, nil
		case types.MergePatchType:
			out, err := jsonpatch.MergePatch(curJSON, patch)
			if err != nil {
				return nil, apierrors.NewBadRequest(err.Error())
			}
			return out, nil
		default:
			return applyJSONPatch(curJSON, patch)
		}
	})
	if err != nil {
		return nil, err
	}
	obj, err := decodeJSON(r, patched, strict)
	if err != nil {
		return nil, asStatus(err)
	}
	return obj, nil
}

// safely runs a patch library call, turning a panic inside the library (the
// JSON patch library has crashed on degenerate operations) into a 422.
func safely(apply func() ([]byte, error)) (out []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, unprocessable(fmt.Sprintf("the patch cannot be applied: %v", p))
		}
	}()
	return apply()
}

// strategicPatchError maps strategic merge patch errors as the Kubernetes API
// server does (interpretStrategicMergePatchError); anything else in the patch
// is also the client's fault, so 400 rather than 500.
func strategicPatchError(err error) error {
	switch {
	case errors.Is(err, mergepatch.ErrNoListOfLists), errors.Is(err, mergepatch.ErrPatchContentNotMatchRetainKeys):
		return unprocessable(err.Error())
	default:
		return apierrors.NewBadRequest(err.Error())
	}
}

// applyJSONPatch decodes and applies an RFC 6902 patch. Patches with copy
// operations are applied one operation at a time so the document cannot grow
// by more than maxCopyGrowth (the library's own limit is a package variable).
func applyJSONPatch(doc, patch []byte) ([]byte, error) {
	ops, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if len(ops) > MaxJSONPatchOperations {
		return nil, apierrors.NewRequestEntityTooLargeError(
			fmt.Sprintf("The allowed maximum operations in a JSON patch is %d, got %d", MaxJSONPatchOperations, len(ops)))
	}
	hasCopy := false
	for i, op := range ops {
		switch op.Kind() {
		case "copy":
			hasCopy = true
		case "add", "replace", "test":
			if _, ok := op["value"]; !ok {
				return nil, apierrors.NewBadRequest(fmt.Sprintf("JSON patch operation %d (%s %q) has no value", i, op.Kind(), pathOf(op)))
			}
		}
	}
	if !hasCopy {
		out, err := ops.Apply(doc)
		if err != nil {
			return nil, unprocessable(err.Error())
		}
		return out, nil
	}
	limit := len(doc) + maxCopyGrowth
	for _, op := range ops {
		doc, err = jsonpatch.Patch{op}.Apply(doc)
		if err != nil {
			return nil, unprocessable(err.Error())
		}
		if len(doc) > limit {
			return nil, apierrors.NewRequestEntityTooLargeError(
				fmt.Sprintf("the JSON patch grows the object to more than %d bytes", limit))
		}
	}
	return doc, nil
}

// pathOf returns an operation's path for messages.
func pathOf(op jsonpatch.Operation) string {
	p, err := op.Path()
	if err != nil {
		return ""
	}
	return p
}

// unprocessable is a 422 without field causes, as Kubernetes returns for
// patches that cannot be applied.
func unprocessable(msg string) error {
	return statusError(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, msg)
}
