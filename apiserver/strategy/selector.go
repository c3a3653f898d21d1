package strategy

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/everynode/everynode/resources"
)

// ParseSelector parses List and Watch label and field selector strings. Field
// selectors may name only the fields resources.FieldNames lists for r (400
// "field label not supported" otherwise, as Kubernetes answers). A nil
// selector (empty string or empty selector) selects everything.
func ParseSelector(r *resources.Resource, labelSel, fieldSel string) (labels.Selector, fields.Selector, error) {
	var ls labels.Selector
	var fs fields.Selector
	if labelSel != "" {
		s, err := labels.Parse(labelSel)
		if err != nil {
			return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("unable to parse labelSelector %q: %v", labelSel, err))
		}
		if !s.Empty() {
			ls = s
		}
	}
	if fieldSel != "" {
		s, err := fields.ParseSelector(fieldSel)
		if err != nil {
			return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("unable to parse fieldSelector %q: %v", fieldSel, err))
		}
		known := map[string]bool{}
		for _, f := range resources.FieldNames(r) {
			known[f] = true
		}
		for _, req := range s.Requirements() {
			if !known[req.Field] {
				return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", req.Field))
			}
		}
		if !s.Empty() {
			fs = s
		}
	}
	return ls, fs, nil
}

// Matches reports whether obj, an object of r, passes the selectors of
// ParseSelector (nil selects everything).
func Matches(r *resources.Resource, obj resources.Object, ls labels.Selector, fs fields.Selector) bool {
	if ls != nil && !ls.Matches(labels.Set(obj.GetLabels())) {
		return false
	}
	return fs == nil || fs.Matches(resources.FieldSet(r, obj))
}
