package strategy

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/everynode/everynode/resources"
)

// createOf runs obj through Default, PrepareForCreate and ValidateCreate.
func createOf(r *resources.Resource, obj resources.Object) resources.Object {
	Default(r, obj)
	PrepareForCreate(r, obj, testNow, testUID)
	return obj
}

func TestValidateConfigMap(t *testing.T) {
	big := strings.Repeat("x", MaxSecretSize/2+1)
	tests := []struct {
		name string
		cm   corev1.ConfigMap
		want string // "" = valid
	}{
		{"valid", corev1.ConfigMap{Data: map[string]string{"app.conf": "x", "A_B-c": ""}}, ""},
		{"empty", corev1.ConfigMap{}, ""},
		{"bad data key", corev1.ConfigMap{Data: map[string]string{"a/b": "x"}}, `data[a/b]: Invalid value: "a/b": a valid config key must consist of alphanumeric characters`},
		{"dot-dot key", corev1.ConfigMap{Data: map[string]string{"..": "x"}}, `data[..]: Invalid value: "..": must not be '..'`},
		{"bad binary key", corev1.ConfigMap{BinaryData: map[string][]byte{"a b": {1}}}, `binaryData[a b]: Invalid value`},
		{"key in both", corev1.ConfigMap{Data: map[string]string{"k": "x"}, BinaryData: map[string][]byte{"k": {1}}},
			`data[k]: Invalid value: "k": duplicate of key present in binaryData`},
		{"exactly 1 MiB", corev1.ConfigMap{Data: map[string]string{"a": strings.Repeat("x", MaxSecretSize)}}, ""},
		{"over 1 MiB in data and binaryData", corev1.ConfigMap{Data: map[string]string{"a": big}, BinaryData: map[string][]byte{"b": []byte(big)}},
			"[]: Too long: may not be more than 1048576 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cm := tt.cm.DeepCopy()
			cm.ObjectMeta = metav1.ObjectMeta{Name: "cm", Namespace: "default"}
			errs := ValidateCreate(resources.ConfigMaps, createOf(resources.ConfigMaps, cm))
			if tt.want == "" {
				if len(errs) > 0 {
					t.Fatalf("unexpected errors: %v", errs)
				}
				return
			}
			wantFieldError(t, errs, tt.want)
		})
	}
}

// TestImmutableConfigMap: once immutable, data, binaryData and immutable
// itself are frozen (each its own Forbidden), metadata may still change.
func TestImmutableConfigMap(t *testing.T) {
	old := createOf(resources.ConfigMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "default"},
		Data: map[string]string{"a": "1"}, BinaryData: map[string][]byte{"b": {1}}, Immutable: ptr.To(true)}).(*corev1.ConfigMap)
	update := func(mutate func(*corev1.ConfigMap)) []string {
		next := old.DeepCopy()
		mutate(next)
		Default(resources.ConfigMaps, next)
		PrepareForUpdate(resources.ConfigMaps, next, old)
		var out []string
		for _, e := range ValidateUpdate(resources.ConfigMaps, next, old) {
			out = append(out, e.Error())
		}
		return out
	}
	const msg = "Forbidden: field is immutable when `immutable` is set"
	for _, tc := range []struct {
		name   string
		mutate func(*corev1.ConfigMap)
		want   []string
	}{
		{"labels may change", func(cm *corev1.ConfigMap) { cm.Labels = map[string]string{"x": "y"} }, nil},
		{"data", func(cm *corev1.ConfigMap) { cm.Data["a"] = "2" }, []string{"data: " + msg}},
		{"binaryData", func(cm *corev1.ConfigMap) { cm.BinaryData = nil }, []string{"binaryData: " + msg}},
		{"back to mutable", func(cm *corev1.ConfigMap) { cm.Immutable = ptr.To(false) }, []string{"immutable: " + msg}},
		{"immutable dropped", func(cm *corev1.ConfigMap) { cm.Immutable = nil }, []string{"immutable: " + msg}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := update(tc.mutate); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("errors %q, want %q", got, tc.want)
			}
		})
	}
	// A mutable ConfigMap may become immutable, with new data at once.
	mutable := old.DeepCopy()
	mutable.Immutable = nil
	next := mutable.DeepCopy()
	next.Data["a"] = "3"
	next.Immutable = ptr.To(true)
	if errs := ValidateUpdate(resources.ConfigMaps, next, mutable); len(errs) > 0 {
		t.Errorf("mutable → immutable: %v", errs)
	}
}

func TestValidateSecret(t *testing.T) {
	data := func(kv ...string) map[string][]byte {
		m := map[string][]byte{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = []byte(kv[i+1])
		}
		return m
	}
	tests := []struct {
		name  string
		typ   corev1.SecretType
		data  map[string][]byte
		annot map[string]string
		want  []string // substrings of the errors, in any order; nil = valid
	}{
		{"opaque anything", "", data("a", "1", "b.c", ""), nil, nil},
		{"custom type anything", "example.com/thing", data("x", "y"), nil, nil},
		{"bad key", corev1.SecretTypeOpaque, data("a:b", "1"), nil, []string{`data[a:b]: Invalid value: "a:b"`}},
		{"over 1 MiB", corev1.SecretTypeOpaque, data("a", strings.Repeat("x", MaxSecretSize+1)), nil,
			[]string{"data: Too long: may not be more than 1048576 bytes"}},
		{"service-account-token needs its account", corev1.SecretTypeServiceAccountToken, nil, nil,
			[]string{"metadata.annotations[kubernetes.io/service-account.name]: Required value"}},
		{"service-account-token with its account", corev1.SecretTypeServiceAccountToken, nil,
			map[string]string{corev1.ServiceAccountNameKey: "default"}, nil},
		{"dockerconfigjson missing", corev1.SecretTypeDockerConfigJson, data("x", "{}"), nil,
			[]string{"data[.dockerconfigjson]: Required value"}},
		{"dockerconfigjson not JSON", corev1.SecretTypeDockerConfigJson, data(".dockerconfigjson", "{nope"), nil,
			[]string{`data[.dockerconfigjson]: Invalid value: "<secret contents redacted>"`}},
		{"dockerconfigjson", corev1.SecretTypeDockerConfigJson, data(".dockerconfigjson", `{"auths":{}}`), nil, nil},
		{"dockercfg not JSON", corev1.SecretTypeDockercfg, data(".dockercfg", "x"), nil, []string{"data[.dockercfg]: Invalid value"}},
		{"basic-auth neither", corev1.SecretTypeBasicAuth, data("x", "y"), nil,
			[]string{"data[username]: Required value", "data[password]: Required value"}},
		{"basic-auth password only, empty", corev1.SecretTypeBasicAuth, data("password", ""), nil, nil},
		{"ssh-auth empty key", corev1.SecretTypeSSHAuth, data("ssh-privatekey", ""), nil, []string{"data[ssh-privatekey]: Required value"}},
		{"ssh-auth", corev1.SecretTypeSSHAuth, data("ssh-privatekey", "k"), nil, nil},
		{"tls missing key", corev1.SecretTypeTLS, data("tls.crt", "c"), nil, []string{"data[tls.key]: Required value"}},
		{"tls", corev1.SecretTypeTLS, data("tls.crt", "", "tls.key", ""), nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "default", Annotations: tt.annot}, Type: tt.typ, Data: tt.data}
			errs := ValidateCreate(resources.Secrets, createOf(resources.Secrets, s))
			if len(errs) != len(tt.want) {
				t.Fatalf("errors %v, want %d: %q", errs, len(tt.want), tt.want)
			}
			for _, w := range tt.want {
				wantFieldError(t, errs, w)
			}
		})
	}
}

// TestSecretDefaults: stringData overwrites data and is dropped, the type
// defaults to Opaque, on create and on update alike.
func TestSecretDefaults(t *testing.T) {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "default"},
		Data:       map[string][]byte{"a": []byte("from data"), "b": []byte("kept")},
		StringData: map[string]string{"a": "from stringData", "c": "new"}}
	createOf(resources.Secrets, s)
	if s.Type != corev1.SecretTypeOpaque || s.StringData != nil {
		t.Fatalf("type %q stringData %v", s.Type, s.StringData)
	}
	if got := string(s.Data["a"]) + "," + string(s.Data["b"]) + "," + string(s.Data["c"]); got != "from stringData,kept,new" {
		t.Errorf("data %q", got)
	}
	only := &corev1.Secret{StringData: map[string]string{"p": "q"}}
	Default(resources.Secrets, only)
	if string(only.Data["p"]) != "q" {
		t.Errorf("stringData alone: data %v", only.Data)
	}
}

// TestSecretUpdate: the type is immutable; an immutable Secret keeps its
// data, also when the change comes as stringData.
func TestSecretUpdate(t *testing.T) {
	old := createOf(resources.Secrets, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "default"},
		Data: map[string][]byte{"a": []byte("1")}}).(*corev1.Secret)
	next := old.DeepCopy()
	next.Type = corev1.SecretTypeSSHAuth
	next.Data["ssh-privatekey"] = []byte("k")
	wantFieldError(t, ValidateUpdate(resources.Secrets, next, old), `type: Invalid value: "kubernetes.io/ssh-auth": field is immutable`)

	frozen := old.DeepCopy()
	frozen.Immutable = ptr.To(true)
	next = frozen.DeepCopy()
	next.StringData = map[string]string{"a": "2"}
	Default(resources.Secrets, next)
	PrepareForUpdate(resources.Secrets, next, frozen)
	wantFieldError(t, ValidateUpdate(resources.Secrets, next, frozen), "data: Forbidden: field is immutable when `immutable` is set")
	next = frozen.DeepCopy()
	next.Immutable = ptr.To(false)
	wantFieldError(t, ValidateUpdate(resources.Secrets, next, frozen), "immutable: Forbidden: field is immutable when `immutable` is set")
}

// TestServiceAccountSecretReferences: references keep only their name, as
// the upstream strategy cleans them, on create and update.
func TestServiceAccountSecretReferences(t *testing.T) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "sa", Namespace: "default"},
		Secrets: []corev1.ObjectReference{{Name: "tok", Namespace: "other", Kind: "Secret", UID: "u"}}}
	createOf(resources.ServiceAccounts, sa)
	if want := (corev1.ObjectReference{Name: "tok"}); sa.Secrets[0] != want {
		t.Errorf("create: reference %+v", sa.Secrets[0])
	}
	if errs := ValidateCreate(resources.ServiceAccounts, sa); len(errs) > 0 {
		t.Fatal(errs)
	}
	next := sa.DeepCopy()
	next.Secrets = append(next.Secrets, corev1.ObjectReference{Name: "two", FieldPath: "x"})
	PrepareForUpdate(resources.ServiceAccounts, next, sa)
	if want := (corev1.ObjectReference{Name: "two"}); next.Secrets[1] != want {
		t.Errorf("update: reference %+v", next.Secrets[1])
	}
	bad := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "Not_Valid", Namespace: "default"}}
	wantFieldError(t, ValidateCreate(resources.ServiceAccounts, createOf(resources.ServiceAccounts, bad)), "metadata.name: Invalid value")
}

// TestSecretBadBase64: data is []byte, so JSON carries it in base64; a
// value that is not base64 fails decoding with kube-apiserver's 400.
func TestSecretBadBase64(t *testing.T) {
	_, err := Decode(resources.Secrets, ContentTypeJSON,
		[]byte(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"data":{"k":"not base64!"}}`), true)
	wantStatus(t, err, 400, `Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 3`)
}
