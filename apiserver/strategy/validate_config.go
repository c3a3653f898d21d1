package strategy

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MaxSecretSize bounds the data of one ConfigMap or Secret: 1 MiB, as
// Kubernetes' core.MaxSecretSize.
const MaxSecretSize = 1 * 1024 * 1024

// immutableSetMsg is Kubernetes' detail for a change to an immutable
// ConfigMap or Secret.
const immutableSetMsg = "field is immutable when `immutable` is set"

// redacted stands for a Secret value in error messages, as upstream.
const redacted = "<secret contents redacted>"

// The rules below are k8s.io/kubernetes pkg/apis/core/validation/validation.go
// ValidateConfigMap, ValidateSecret, ValidateServiceAccount and their Update
// variants, on the v1 types (the API server has no internal version).

// validateConfigMap: every key of data and binaryData a valid ConfigMap key,
// no key in both, and at most MaxSecretSize bytes of values in all.
func validateConfigMap(cm *corev1.ConfigMap) field.ErrorList {
	var allErrs field.ErrorList
	total := 0
	for key, value := range cm.Data {
		for _, msg := range utilvalidation.IsConfigMapKey(key) {
			allErrs = append(allErrs, field.Invalid(field.NewPath("data").Key(key), key, msg))
		}
		if _, dup := cm.BinaryData[key]; dup {
			allErrs = append(allErrs, field.Invalid(field.NewPath("data").Key(key), key, "duplicate of key present in binaryData"))
		}
		total += len(value)
	}
	for key, value := range cm.BinaryData {
		for _, msg := range utilvalidation.IsConfigMapKey(key) {
			allErrs = append(allErrs, field.Invalid(field.NewPath("binaryData").Key(key), key, msg))
		}
		total += len(value)
	}
	if total > MaxSecretSize {
		// Upstream reports the whole object, with the empty path.
		allErrs = append(allErrs, field.TooLong(field.NewPath(""), "", MaxSecretSize))
	}
	return allErrs
}

// validateConfigMapUpdate: an immutable ConfigMap keeps its data, its
// binaryData and its immutable: true.
func validateConfigMapUpdate(cm, old *corev1.ConfigMap) field.ErrorList {
	var allErrs field.ErrorList
	if isTrue(old.Immutable) {
		if !isTrue(cm.Immutable) {
			allErrs = append(allErrs, field.Forbidden(field.NewPath("immutable"), immutableSetMsg))
		}
		if !apiequality.Semantic.DeepEqual(cm.Data, old.Data) {
			allErrs = append(allErrs, field.Forbidden(field.NewPath("data"), immutableSetMsg))
		}
		if !apiequality.Semantic.DeepEqual(cm.BinaryData, old.BinaryData) {
			allErrs = append(allErrs, field.Forbidden(field.NewPath("binaryData"), immutableSetMsg))
		}
	}
	return append(allErrs, validateConfigMap(cm)...)
}

// validateSecret: keys as for ConfigMaps, at most MaxSecretSize bytes of
// data, and the keys each built-in type requires
// (kubernetes.io/service-account-token its account annotation,
// kubernetes.io/dockercfg and kubernetes.io/dockerconfigjson their JSON
// document, kubernetes.io/basic-auth a username or a password,
// kubernetes.io/ssh-auth a private key, kubernetes.io/tls a certificate and a
// key). Other types, Opaque included, may hold anything.
func validateSecret(s *corev1.Secret) field.ErrorList {
	var allErrs field.ErrorList
	dataPath := field.NewPath("data")
	total := 0
	for key, value := range s.Data {
		for _, msg := range utilvalidation.IsConfigMapKey(key) {
			allErrs = append(allErrs, field.Invalid(dataPath.Key(key), key, msg))
		}
		total += len(value)
	}
	if total > MaxSecretSize {
		allErrs = append(allErrs, field.TooLong(dataPath, "", MaxSecretSize))
	}
	switch s.Type {
	case corev1.SecretTypeServiceAccountToken:
		// Only the account's name: its uid and token come from a controller.
		if s.Annotations[corev1.ServiceAccountNameKey] == "" {
			allErrs = append(allErrs, field.Required(field.NewPath("metadata", "annotations").Key(corev1.ServiceAccountNameKey), ""))
		}
	case corev1.SecretTypeDockercfg:
		allErrs = append(allErrs, requireJSONKey(s, dataPath, corev1.DockerConfigKey)...)
	case corev1.SecretTypeDockerConfigJson:
		allErrs = append(allErrs, requireJSONKey(s, dataPath, corev1.DockerConfigJsonKey)...)
	case corev1.SecretTypeBasicAuth:
		_, user := s.Data[corev1.BasicAuthUsernameKey]
		_, password := s.Data[corev1.BasicAuthPasswordKey]
		// Either may be empty, but one must be there.
		if !user && !password {
			allErrs = append(allErrs,
				field.Required(dataPath.Key(corev1.BasicAuthUsernameKey), ""),
				field.Required(dataPath.Key(corev1.BasicAuthPasswordKey), ""))
		}
	case corev1.SecretTypeSSHAuth:
		if len(s.Data[corev1.SSHAuthPrivateKey]) == 0 {
			allErrs = append(allErrs, field.Required(dataPath.Key(corev1.SSHAuthPrivateKey), ""))
		}
	case corev1.SecretTypeTLS:
		if _, ok := s.Data[corev1.TLSCertKey]; !ok {
			allErrs = append(allErrs, field.Required(dataPath.Key(corev1.TLSCertKey), ""))
		}
		if _, ok := s.Data[corev1.TLSPrivateKeyKey]; !ok {
			allErrs = append(allErrs, field.Required(dataPath.Key(corev1.TLSPrivateKeyKey), ""))
		}
	}
	return allErrs
}

// requireJSONKey requires data[key] to be a JSON object (the docker config types).
func requireJSONKey(s *corev1.Secret, dataPath *field.Path, key string) field.ErrorList {
	b, ok := s.Data[key]
	if !ok {
		return field.ErrorList{field.Required(dataPath.Key(key), "")}
	}
	if err := json.Unmarshal(b, &map[string]any{}); err != nil {
		return field.ErrorList{field.Invalid(dataPath.Key(key), redacted, err.Error())}
	}
	return nil
}

// validateSecretUpdate: the type never changes; an immutable Secret keeps
// its data and its immutable: true (stringData has been merged into data by
// then, see Default).
func validateSecretUpdate(s, old *corev1.Secret) field.ErrorList {
	allErrs := apivalidation.ValidateImmutableField(s.Type, old.Type, field.NewPath("type"))
	if isTrue(old.Immutable) {
		if !isTrue(s.Immutable) {
			allErrs = append(allErrs, field.Forbidden(field.NewPath("immutable"), immutableSetMsg))
		}
		if !apiequality.Semantic.DeepEqual(s.Data, old.Data) {
			allErrs = append(allErrs, field.Forbidden(field.NewPath("data"), immutableSetMsg))
		}
	}
	return append(allErrs, validateSecret(s)...)
}

func isTrue(b *bool) bool { return b != nil && *b }
