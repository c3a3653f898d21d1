package apiserver

import (
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// TestDefaultTolerationSecondsAdmission: a pod created through the API
// gets the not-ready and unreachable NoExecute tolerations for 300 s, as
// kube-apiserver's DefaultTolerationSeconds admission gives them, and keeps
// them on a read; a pod that tolerates both already (a DaemonSet's) gets
// no duplicate; a dry run shows what would be stored.
func TestDefaultTolerationSecondsAdmission(t *testing.T) {
	e := newEnv(t)
	s300 := int64(300)
	want := []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &s300},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &s300},
	}
	created := e.createPod(newPod("plain", "n1"))
	if !equality.Semantic.DeepEqual(created.Spec.Tolerations, want) {
		t.Errorf("created pod tolerations %+v, want %+v", created.Spec.Tolerations, want)
	}
	var read corev1.Pod
	e.get(podsPath+"/plain").must(t, http.StatusOK, &read)
	if !equality.Semantic.DeepEqual(read.Spec.Tolerations, want) {
		t.Errorf("stored pod tolerations %+v, want %+v", read.Spec.Tolerations, want)
	}
	var dry corev1.Pod
	e.do(req{method: "POST", path: podsPath + "?dryRun=All", body: toJSON(t, newPod("dry", "n1"))}).must(t, http.StatusCreated, &dry)
	if !equality.Semantic.DeepEqual(dry.Spec.Tolerations, want) {
		t.Errorf("dry-run pod tolerations %+v, want %+v", dry.Spec.Tolerations, want)
	}
	daemon := newPod("daemon", "n1")
	daemon.Spec.Tolerations = []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	}
	if got := e.createPod(daemon).Spec.Tolerations; !equality.Semantic.DeepEqual(got, daemon.Spec.Tolerations) {
		t.Errorf("daemon pod tolerations %+v, want its own %+v only", got, daemon.Spec.Tolerations)
	}
}
