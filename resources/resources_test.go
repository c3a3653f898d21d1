package resources

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestTableConsistent: every served resource is found by its Go type, its
// names and its group-version-kind, its list type is its kind's list, and its
// field values line up with its field names for its own objects and others.
func TestTableConsistent(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range All() {
		if seen[r.Name] {
			t.Errorf("%s twice", r.Name)
		}
		seen[r.Name] = true
		if got := ForObject(r.New()); got != r {
			t.Errorf("ForObject(%T) = %v", r.New(), got)
		}
		for _, n := range append([]string{r.Name, r.Singular, r.Kind}, r.ShortNames...) {
			if got := ByName(n); got != r {
				t.Errorf("ByName(%q) = %v, want %s", n, got, r.Name)
			}
		}
		if got := ByGVK(r.GVK()); got != r {
			t.Errorf("ByGVK(%s) = %v", r.GVK(), got)
		}
		if got, want := typeName(r.NewList()), typeName(r.New())+"List"; got != want {
			t.Errorf("%s: list type %s, want %s", r.Name, got, want)
		}
		own := r.New()
		own.SetName("n")
		if got, want := len(FieldValues(r, own)), len(FieldNames(r)); got != want {
			t.Errorf("%s: %d field values for %d names", r.Name, got, want)
		}
		other := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
		if got, want := len(FieldValues(r, other)), len(FieldNames(r)); got != want {
			t.Errorf("%s, foreign object: %d field values for %d names", r.Name, got, want)
		}
	}
}

func typeName(v any) string { return reflect.TypeOf(v).Elem().Name() }

// TestSecretTypeField: a Secret's type is selectable as "type".
func TestSecretTypeField(t *testing.T) {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns"}, Type: corev1.SecretTypeTLS}
	set := FieldSet(Secrets, s)
	if set["type"] != "kubernetes.io/tls" || set["metadata.name"] != "s" || set["metadata.namespace"] != "ns" {
		t.Errorf("fields %v", set)
	}
	if _, ok := FieldSet(ConfigMaps, &corev1.ConfigMap{})["type"]; ok {
		t.Error("ConfigMaps have no type field")
	}
}
