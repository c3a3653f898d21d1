package strategy

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/everynode/everynode/resources"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// testNow is the fixed clock of these tests.
var testNow = time.Date(2026, 11, 22, 4, 0, 0, 123456789, time.UTC)

func testUID() types.UID { return "11111111-2222-3333-4444-555555555555" }

// manifests are DaemonSets published in the Kubernetes tutorials and docs, which
// must apply unchanged.
var manifests = []string{"testdata/redis-ds.yaml", "testdata/fluentd-elasticsearch.yaml"}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// createDS runs a manifest through the create pipeline and fails on any error.
func createDS(t testing.TB, path string) *appsv1.DaemonSet {
	t.Helper()
	obj, err := Decode(resources.DaemonSets, ContentTypeYAML, readFile(t, path), true)
	if err != nil {
		t.Fatalf("Decode(%s): %v", path, err)
	}
	if obj.GetNamespace() == "" {
		obj.SetNamespace("default")
	}
	Default(resources.DaemonSets, obj)
	PrepareForCreate(resources.DaemonSets, obj, testNow, testUID)
	if errs := ValidateCreate(resources.DaemonSets, obj); len(errs) > 0 {
		t.Fatalf("ValidateCreate(%s): %v", path, errs.ToAggregate())
	}
	return obj.(*appsv1.DaemonSet)
}

// stored round-trips obj through JSON the way the store hands objects out,
// with a resourceVersion.
func stored(t testing.TB, r *resources.Resource, obj resources.Object, rv string) resources.Object {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Decode(r, ContentTypeJSON, b, true)
	if err != nil {
		t.Fatalf("re-decode: %v", err)
	}
	out.SetResourceVersion(rv)
	return out
}

// wantStatus checks err is a StatusError with code and a message containing sub.
func wantStatus(t *testing.T, err error, code int32, sub string) {
	t.Helper()
	se, ok := err.(*apierrors.StatusError)
	if !ok {
		t.Fatalf("error %v (%T), want *StatusError %d", err, err, code)
	}
	if se.ErrStatus.Code != code {
		t.Errorf("code %d (%s), want %d", se.ErrStatus.Code, se.ErrStatus.Message, code)
	}
	if !strings.Contains(se.ErrStatus.Message, sub) {
		t.Errorf("message %q, want it to contain %q", se.ErrStatus.Message, sub)
	}
}

// wantFieldError checks that errs holds an error whose "field: message" text contains sub.
func wantFieldError(t *testing.T, errs field.ErrorList, sub string) {
	t.Helper()
	for _, e := range errs {
		if strings.Contains(e.Error(), sub) {
			return
		}
	}
	t.Errorf("no error containing %q in %v", sub, errs)
}
