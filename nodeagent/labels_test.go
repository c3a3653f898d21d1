package nodeagent

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	rtfake "github.com/everynode/everynode/nodeagent/runtime/fake"
)

func TestParseLabels(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    map[string]string
		wantErr string
	}{
		{in: "", want: map[string]string{}},
		{in: "a=b,c=d", want: map[string]string{"a": "b", "c": "d"}},
		{in: " zone=edge , example.com/disk=ssd ,", want: map[string]string{"zone": "edge", "example.com/disk": "ssd"}},
		{in: "empty=", want: map[string]string{"empty": ""}},
		{in: "novalue", wantErr: `"novalue": want key=value`},
		{in: "=v", wantErr: `key ""`},
		{in: "bad key=v", wantErr: `key "bad key"`},
		{in: "k=bad value", wantErr: `value "bad value"`},
		{in: "k=" + strings.Repeat("x", 64), wantErr: "value"},
		{in: "a=1,a=2", wantErr: `key "a" given twice`},
	} {
		got, err := ParseLabels(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseLabels(%q) error %v, want one containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseLabels(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseTaints(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []corev1.Taint
		wantErr string
	}{
		{in: ""},
		{in: "k=v:NoSchedule,k:NoExecute", want: []corev1.Taint{
			{Key: "k", Value: "v", Effect: corev1.TaintEffectNoSchedule},
			{Key: "k", Effect: corev1.TaintEffectNoExecute},
		}},
		{in: "example.com/gpu=true:PreferNoSchedule", want: []corev1.Taint{
			{Key: "example.com/gpu", Value: "true", Effect: corev1.TaintEffectPreferNoSchedule},
		}},
		{in: "k=v", wantErr: "want key=value:Effect or key:Effect"},
		{in: "k=v:Sometimes", wantErr: `effect "Sometimes"`},
		{in: "k:", wantErr: `effect ""`},
		{in: ":NoSchedule", wantErr: `key ""`},
		{in: "k=v:NoSchedule:extra", wantErr: "want key=value:Effect"},
		{in: "bad key:NoSchedule", wantErr: `key "bad key"`},
		{in: "k=bad value:NoSchedule", wantErr: `value "bad value"`},
		{in: "k=a:NoSchedule,k=b:NoSchedule", wantErr: "k:NoSchedule given twice"},
	} {
		got, err := ParseTaints(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseTaints(%q) error %v, want one containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseTaints(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestNewRejectsNodeConfig(t *testing.T) {
	e := newEnv(t, rtfake.Config{})
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
	}{
		{"well-known label", func(c *Config) { c.Labels = map[string]string{corev1.LabelHostname: "x"} }},
		{"invalid label", func(c *Config) { c.Labels = map[string]string{"a b": "x"} }},
		{"reserved taint", func(c *Config) {
			c.Taints = []corev1.Taint{{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoExecute}}
		}},
		{"bad effect", func(c *Config) { c.Taints = []corev1.Taint{{Key: "k", Effect: "Never"}} }},
		{"duplicate taint", func(c *Config) {
			c.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}, {Key: "k", Value: "2", Effect: corev1.TaintEffectNoSchedule}}
		}},
	} {
		cfg := Config{NodeName: testNode, Client: e.api, Runtime: e.rt}
		tc.cfg(&cfg)
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", tc.name, cfg)
		}
	}
}
