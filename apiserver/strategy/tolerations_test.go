package strategy

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

func TestDefaultTolerations(t *testing.T) {
	s300, s60 := int64(300), int64(60)
	notReady300 := corev1.Toleration{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &s300}
	unreachable300 := corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &s300}
	// What the DaemonSet controller gives its pods (forever, no seconds).
	daemon := []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	}
	unreachable60 := corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &s60}
	everything := corev1.Toleration{Operator: corev1.TolerationOpExists}
	noSchedule := corev1.Toleration{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	anyEffect := corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists}
	cases := []struct {
		name     string
		in, want []corev1.Toleration
	}{
		{"none", nil, []corev1.Toleration{notReady300, unreachable300}},
		{"daemon pod: no duplicates", daemon, daemon},
		{"tolerates unreachable for 60s", []corev1.Toleration{unreachable60}, []corev1.Toleration{unreachable60, notReady300}},
		{"tolerates everything", []corev1.Toleration{everything}, []corev1.Toleration{everything}},
		{"NoSchedule only", []corev1.Toleration{noSchedule}, []corev1.Toleration{noSchedule, notReady300, unreachable300}},
		{"unreachable with any effect", []corev1.Toleration{anyEffect}, []corev1.Toleration{anyEffect, notReady300}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := &corev1.Pod{Spec: corev1.PodSpec{Tolerations: c.in}}
			DefaultTolerations(p)
			if !equality.Semantic.DeepEqual(p.Spec.Tolerations, c.want) {
				t.Errorf("tolerations %+v, want %+v", p.Spec.Tolerations, c.want)
			}
		})
	}
}
