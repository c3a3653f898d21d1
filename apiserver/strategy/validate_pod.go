package strategy

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/everynode/everynode/internal/apiequal"
)

// validatePodTemplateSpec validates a pod template's metadata and spec
// (Kubernetes' ValidatePodTemplateSpec, the subset everynode runs).
func validatePodTemplateSpec(t *corev1.PodTemplateSpec, fldPath *field.Path) field.ErrorList {
	allErrs := metav1validation.ValidateLabels(t.Labels, fldPath.Child("metadata", "labels"))
	allErrs = append(allErrs, apivalidation.ValidateAnnotations(t.Annotations, fldPath.Child("metadata", "annotations"))...)
	allErrs = append(allErrs, validatePodSpec(&t.Spec, fldPath.Child("spec"))...)
	return allErrs
}

// validatePodSpec validates the parts of a PodSpec everynode acts on.
func validatePodSpec(spec *corev1.PodSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	vols, vErrs := validateVolumes(spec.Volumes, fldPath.Child("volumes"))
	allErrs = append(allErrs, vErrs...)

	if len(spec.Containers) == 0 {
		allErrs = append(allErrs, field.Required(fldPath.Child("containers"), ""))
	}
	names := sets.New[string]()
	allErrs = append(allErrs, validateContainers(spec.InitContainers, spec, vols, names, fldPath.Child("initContainers"))...)
	allErrs = append(allErrs, validateContainers(spec.Containers, spec, vols, names, fldPath.Child("containers"))...)
	allErrs = append(allErrs, uniqueHostPorts(spec.Containers, fldPath.Child("containers"))...)

	switch spec.RestartPolicy {
	case corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever:
	case "":
		allErrs = append(allErrs, field.Required(fldPath.Child("restartPolicy"), ""))
	default:
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("restartPolicy"), spec.RestartPolicy,
			[]corev1.RestartPolicy{corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever}))
	}
	switch spec.DNSPolicy {
	case corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet, corev1.DNSDefault, corev1.DNSNone:
	case "":
		allErrs = append(allErrs, field.Required(fldPath.Child("dnsPolicy"), ""))
	default:
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("dnsPolicy"), spec.DNSPolicy,
			[]corev1.DNSPolicy{corev1.DNSClusterFirstWithHostNet, corev1.DNSClusterFirst, corev1.DNSDefault, corev1.DNSNone}))
	}
	allErrs = append(allErrs, metav1validation.ValidateLabels(spec.NodeSelector, fldPath.Child("nodeSelector"))...)
	allErrs = append(allErrs, validateTolerations(spec.Tolerations, fldPath.Child("tolerations"))...)
	allErrs = append(allErrs, validateAffinity(spec.Affinity, fldPath.Child("affinity"))...)

	if spec.TerminationGracePeriodSeconds != nil {
		allErrs = append(allErrs, apivalidation.ValidateNonnegativeField(*spec.TerminationGracePeriodSeconds, fldPath.Child("terminationGracePeriodSeconds"))...)
	}
	if spec.ActiveDeadlineSeconds != nil {
		if v := *spec.ActiveDeadlineSeconds; v < 1 || v > int64(^uint32(0)>>1) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("activeDeadlineSeconds"), v, utilvalidation.InclusiveRangeError(1, int(^uint32(0)>>1))))
		}
	}
	if spec.NodeName != "" {
		for _, msg := range apivalidation.NameIsDNSSubdomain(spec.NodeName, false) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("nodeName"), spec.NodeName, msg))
		}
	}
	if spec.ServiceAccountName != "" {
		for _, msg := range apivalidation.NameIsDNSSubdomain(spec.ServiceAccountName, false) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("serviceAccountName"), spec.ServiceAccountName, msg))
		}
	}
	for _, f := range []struct{ name, val string }{{"hostname", spec.Hostname}, {"subdomain", spec.Subdomain}} {
		if f.val == "" {
			continue
		}
		for _, msg := range utilvalidation.IsDNS1123Label(f.val) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child(f.name), f.val, msg))
		}
	}
	return allErrs
}

var supportedHostPathTypes = []corev1.HostPathType{
	corev1.HostPathUnset, corev1.HostPathDirectoryOrCreate, corev1.HostPathDirectory, corev1.HostPathFileOrCreate,
	corev1.HostPathFile, corev1.HostPathSocket, corev1.HostPathCharDev, corev1.HostPathBlockDev,
}

// validateVolumes checks names (DNS labels, unique), exactly one source, and
// the hostPath and emptyDir sources. It returns the set of volume names.
func validateVolumes(volumes []corev1.Volume, fldPath *field.Path) (sets.Set[string], field.ErrorList) {
	var allErrs field.ErrorList
	names := sets.New[string]()
	for i, v := range volumes {
		idx := fldPath.Index(i)
		switch {
		case v.Name == "":
			allErrs = append(allErrs, field.Required(idx.Child("name"), ""))
		case names.Has(v.Name):
			allErrs = append(allErrs, field.Duplicate(idx.Child("name"), v.Name))
		default:
			for _, msg := range utilvalidation.IsDNS1123Label(v.Name) {
				allErrs = append(allErrs, field.Invalid(idx.Child("name"), v.Name, msg))
			}
		}
		if v.Name != "" {
			names.Insert(v.Name)
		}
		switch n := countVolumeSources(&v.VolumeSource); {
		case n == 0:
			allErrs = append(allErrs, field.Required(idx, "must specify a volume type"))
		case n > 1:
			allErrs = append(allErrs, field.Forbidden(idx, "may not specify more than 1 volume type"))
		}
		if hp := v.HostPath; hp != nil {
			if hp.Path == "" {
				allErrs = append(allErrs, field.Required(idx.Child("hostPath", "path"), ""))
			} else if hasBackstep(hp.Path) {
				allErrs = append(allErrs, field.Invalid(idx.Child("hostPath", "path"), hp.Path, "must not contain '..'"))
			}
			if hp.Type != nil {
				ok := false
				for _, t := range supportedHostPathTypes {
					ok = ok || *hp.Type == t
				}
				if !ok {
					allErrs = append(allErrs, field.NotSupported(idx.Child("hostPath", "type"), *hp.Type, supportedHostPathTypes))
				}
			}
		}
		if ed := v.EmptyDir; ed != nil && ed.SizeLimit != nil && ed.SizeLimit.Sign() < 0 {
			allErrs = append(allErrs, field.Invalid(idx.Child("emptyDir", "sizeLimit"), ed.SizeLimit.String(), "must be greater than or equal to 0"))
		}
	}
	return names, allErrs
}

// countVolumeSources counts the non-nil members of a VolumeSource.
func countVolumeSources(vs *corev1.VolumeSource) int {
	n := 0
	for _, set := range []bool{
		vs.HostPath != nil, vs.EmptyDir != nil, vs.GCEPersistentDisk != nil, vs.AWSElasticBlockStore != nil,
		vs.GitRepo != nil, vs.Secret != nil, vs.NFS != nil, vs.ISCSI != nil, vs.Glusterfs != nil,
		vs.PersistentVolumeClaim != nil, vs.RBD != nil, vs.FlexVolume != nil, vs.Cinder != nil, vs.CephFS != nil,
		vs.Flocker != nil, vs.DownwardAPI != nil, vs.FC != nil, vs.AzureFile != nil, vs.ConfigMap != nil,
		vs.VsphereVolume != nil, vs.Quobyte != nil, vs.AzureDisk != nil, vs.PhotonPersistentDisk != nil,
		vs.Projected != nil, vs.PortworxVolume != nil, vs.ScaleIO != nil, vs.StorageOS != nil, vs.CSI != nil,
		vs.Ephemeral != nil, vs.Image != nil,
	} {
		if set {
			n++
		}
	}
	return n
}

func hasBackstep(p string) bool {
	for _, part := range strings.Split(strings.ReplaceAll(p, `\`, "/"), "/") {
		if part == ".." {
			return true
		}
	}
	return false
}

// validateContainers validates one list of containers; names is shared across
// init and regular containers so duplicates between them are caught.
func validateContainers(cs []corev1.Container, spec *corev1.PodSpec, vols sets.Set[string], names sets.Set[string], fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for i := range cs {
		c := &cs[i]
		idx := fldPath.Index(i)
		switch {
		case c.Name == "":
			allErrs = append(allErrs, field.Required(idx.Child("name"), ""))
		case names.Has(c.Name):
			allErrs = append(allErrs, field.Duplicate(idx.Child("name"), c.Name))
		default:
			for _, msg := range utilvalidation.IsDNS1123Label(c.Name) {
				allErrs = append(allErrs, field.Invalid(idx.Child("name"), c.Name, msg))
			}
		}
		if c.Name != "" {
			names.Insert(c.Name)
		}
		if c.Image == "" {
			allErrs = append(allErrs, field.Required(idx.Child("image"), ""))
		} else if strings.TrimSpace(c.Image) != c.Image {
			allErrs = append(allErrs, field.Invalid(idx.Child("image"), c.Image, "must not have leading or trailing whitespace"))
		}
		switch c.ImagePullPolicy {
		case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
		case "":
			allErrs = append(allErrs, field.Required(idx.Child("imagePullPolicy"), ""))
		default:
			allErrs = append(allErrs, field.NotSupported(idx.Child("imagePullPolicy"), c.ImagePullPolicy,
				[]corev1.PullPolicy{corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever}))
		}
		switch c.TerminationMessagePolicy {
		case corev1.TerminationMessageReadFile, corev1.TerminationMessageFallbackToLogsOnError:
		case "":
			allErrs = append(allErrs, field.Required(idx.Child("terminationMessagePolicy"), ""))
		default:
			allErrs = append(allErrs, field.NotSupported(idx.Child("terminationMessagePolicy"), c.TerminationMessagePolicy,
				[]corev1.TerminationMessagePolicy{corev1.TerminationMessageReadFile, corev1.TerminationMessageFallbackToLogsOnError}))
		}
		allErrs = append(allErrs, validatePorts(c.Ports, spec.HostNetwork, idx.Child("ports"))...)
		allErrs = append(allErrs, validateEnv(c.Env, idx.Child("env"))...)
		allErrs = append(allErrs, validateVolumeMounts(c.VolumeMounts, vols, idx.Child("volumeMounts"))...)
		allErrs = append(allErrs, validateResources(&c.Resources, idx.Child("resources"))...)
		allErrs = append(allErrs, validateProbe(c.LivenessProbe, true, idx.Child("livenessProbe"))...)
		allErrs = append(allErrs, validateProbe(c.ReadinessProbe, false, idx.Child("readinessProbe"))...)
		allErrs = append(allErrs, validateProbe(c.StartupProbe, true, idx.Child("startupProbe"))...)
	}
	return allErrs
}

func validatePorts(ports []corev1.ContainerPort, hostNetwork bool, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	names := sets.New[string]()
	for i, p := range ports {
		idx := fldPath.Index(i)
		if p.Name != "" {
			for _, msg := range utilvalidation.IsValidPortName(p.Name) {
				allErrs = append(allErrs, field.Invalid(idx.Child("name"), p.Name, msg))
			}
			if names.Has(p.Name) {
				allErrs = append(allErrs, field.Duplicate(idx.Child("name"), p.Name))
			}
			names.Insert(p.Name)
		}
		if p.ContainerPort == 0 {
			allErrs = append(allErrs, field.Required(idx.Child("containerPort"), ""))
		} else {
			for _, msg := range utilvalidation.IsValidPortNum(int(p.ContainerPort)) {
				allErrs = append(allErrs, field.Invalid(idx.Child("containerPort"), p.ContainerPort, msg))
			}
		}
		if p.HostPort != 0 {
			for _, msg := range utilvalidation.IsValidPortNum(int(p.HostPort)) {
				allErrs = append(allErrs, field.Invalid(idx.Child("hostPort"), p.HostPort, msg))
			}
			if hostNetwork && p.HostPort != p.ContainerPort {
				allErrs = append(allErrs, field.Invalid(idx.Child("containerPort"), p.ContainerPort, "must match `hostPort` when `hostNetwork` is true"))
			}
		}
		switch p.Protocol {
		case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
		case "":
			allErrs = append(allErrs, field.Required(idx.Child("protocol"), ""))
		default:
			allErrs = append(allErrs, field.NotSupported(idx.Child("protocol"), p.Protocol,
				[]corev1.Protocol{corev1.ProtocolSCTP, corev1.ProtocolTCP, corev1.ProtocolUDP}))
		}
	}
	return allErrs
}

// uniqueHostPorts is Kubernetes' AccumulateUniqueHostPorts: a host port may
// be claimed once per protocol and host IP in a pod.
func uniqueHostPorts(cs []corev1.Container, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	seen := sets.New[string]()
	for ci, c := range cs {
		for pi, p := range c.Ports {
			if p.HostPort == 0 {
				continue
			}
			key := fmt.Sprintf("%s/%s/%d", p.Protocol, p.HostIP, p.HostPort)
			if seen.Has(key) {
				allErrs = append(allErrs, field.Duplicate(fldPath.Index(ci).Child("ports").Index(pi).Child("hostPort"), key))
			}
			seen.Insert(key)
		}
	}
	return allErrs
}

func validateEnv(env []corev1.EnvVar, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for i, e := range env {
		idx := fldPath.Index(i)
		if e.Name == "" {
			allErrs = append(allErrs, field.Required(idx.Child("name"), ""))
		} else {
			for _, msg := range utilvalidation.IsRelaxedEnvVarName(e.Name) {
				allErrs = append(allErrs, field.Invalid(idx.Child("name"), e.Name, msg))
			}
		}
		if vf := e.ValueFrom; vf != nil {
			if e.Value != "" {
				allErrs = append(allErrs, field.Invalid(idx.Child("valueFrom"), "", "may not be specified when `value` is not empty"))
			}
			allErrs = append(allErrs, validateEnvVarSource(vf, idx.Child("valueFrom"))...)
		}
	}
	return allErrs
}

// validateEnvVarSource requires exactly one source and a field path for fieldRef.
func validateEnvVarSource(vf *corev1.EnvVarSource, fldPath *field.Path) field.ErrorList {
	n := 0
	for _, set := range []bool{vf.FieldRef != nil, vf.ResourceFieldRef != nil, vf.ConfigMapKeyRef != nil,
		vf.SecretKeyRef != nil, vf.FileKeyRef != nil} {
		if set {
			n++
		}
	}
	switch {
	case n == 0:
		return field.ErrorList{field.Invalid(fldPath, "", "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`")}
	case n > 1:
		return field.ErrorList{field.Invalid(fldPath, "", "may not have more than one field specified at a time")}
	}
	if fr := vf.FieldRef; fr != nil && fr.FieldPath == "" {
		return field.ErrorList{field.Required(fldPath.Child("fieldRef", "fieldPath"), "")}
	}
	if rr := vf.ResourceFieldRef; rr != nil && rr.Resource == "" {
		return field.ErrorList{field.Required(fldPath.Child("resourceFieldRef", "resource"), "")}
	}
	return nil
}

func validateVolumeMounts(mounts []corev1.VolumeMount, vols sets.Set[string], fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	paths := sets.New[string]()
	for i, m := range mounts {
		idx := fldPath.Index(i)
		if m.Name == "" {
			allErrs = append(allErrs, field.Required(idx.Child("name"), ""))
		} else if !vols.Has(m.Name) {
			allErrs = append(allErrs, field.NotFound(idx.Child("name"), m.Name))
		}
		if m.MountPath == "" {
			allErrs = append(allErrs, field.Required(idx.Child("mountPath"), ""))
		} else if paths.Has(m.MountPath) {
			allErrs = append(allErrs, field.Invalid(idx.Child("mountPath"), m.MountPath, "must be unique"))
		}
		paths.Insert(m.MountPath)
		if hasBackstep(m.SubPath) || strings.HasPrefix(m.SubPath, "/") {
			allErrs = append(allErrs, field.Invalid(idx.Child("subPath"), m.SubPath, "must be a relative path without '..'"))
		}
	}
	return allErrs
}

// validateResources checks resource names, non-negative quantities and
// requests not above limits.
func validateResources(rr *corev1.ResourceRequirements, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for _, l := range []struct {
		name string
		list corev1.ResourceList
	}{{"limits", rr.Limits}, {"requests", rr.Requests}} {
		for name, q := range l.list {
			p := fldPath.Child(l.name).Key(string(name))
			allErrs = append(allErrs, validateResourceName(string(name), p)...)
			if q.Sign() < 0 {
				allErrs = append(allErrs, field.Invalid(p, q.String(), "must be greater than or equal to 0"))
			}
		}
	}
	for name, req := range rr.Requests {
		lim, ok := rr.Limits[name]
		if ok && req.Cmp(lim) > 0 {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("requests").Key(string(name)), req.String(),
				fmt.Sprintf("must be less than or equal to %s limit of %s", name, lim.String())))
		}
	}
	return allErrs
}

func validateResourceName(name string, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for _, msg := range utilvalidation.IsQualifiedName(name) {
		allErrs = append(allErrs, field.Invalid(p, name, msg))
	}
	if len(allErrs) == 0 && !strings.Contains(name, "/") {
		switch corev1.ResourceName(name) {
		case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage, corev1.ResourceStorage:
		default:
			if !strings.HasPrefix(name, corev1.ResourceHugePagesPrefix) {
				allErrs = append(allErrs, field.Invalid(p, name, "must be a standard resource type or fully qualified"))
			}
		}
	}
	return allErrs
}

func validateProbe(p *corev1.Probe, successMustBeOne bool, fldPath *field.Path) field.ErrorList {
	if p == nil {
		return nil
	}
	var allErrs field.ErrorList
	n := 0
	for _, set := range []bool{p.Exec != nil, p.HTTPGet != nil, p.TCPSocket != nil, p.GRPC != nil} {
		if set {
			n++
		}
	}
	switch {
	case n == 0:
		allErrs = append(allErrs, field.Required(fldPath, "must specify a handler type"))
	case n > 1:
		allErrs = append(allErrs, field.Forbidden(fldPath, "may not specify more than 1 handler type"))
	}
	if h := p.HTTPGet; h != nil {
		allErrs = append(allErrs, validatePortNumOrName(h.Port.IntValue(), h.Port.StrVal, fldPath.Child("httpGet", "port"))...)
	}
	if t := p.TCPSocket; t != nil {
		allErrs = append(allErrs, validatePortNumOrName(t.Port.IntValue(), t.Port.StrVal, fldPath.Child("tcpSocket", "port"))...)
	}
	for _, f := range []struct {
		name string
		v    int32
	}{{"initialDelaySeconds", p.InitialDelaySeconds}, {"timeoutSeconds", p.TimeoutSeconds}, {"periodSeconds", p.PeriodSeconds},
		{"successThreshold", p.SuccessThreshold}, {"failureThreshold", p.FailureThreshold}} {
		allErrs = append(allErrs, apivalidation.ValidateNonnegativeField(int64(f.v), fldPath.Child(f.name))...)
	}
	if successMustBeOne && p.SuccessThreshold != 1 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("successThreshold"), p.SuccessThreshold, "must be 1"))
	}
	return allErrs
}

func validatePortNumOrName(num int, name string, p *field.Path) field.ErrorList {
	if name != "" {
		var errs field.ErrorList
		if num == 0 { // a name, not a numeric string
			for _, msg := range utilvalidation.IsValidPortName(name) {
				errs = append(errs, field.Invalid(p, name, msg))
			}
			return errs
		}
	}
	var errs field.ErrorList
	for _, msg := range utilvalidation.IsValidPortNum(num) {
		errs = append(errs, field.Invalid(p, num, msg))
	}
	return errs
}

// podUpdatableFields is Kubernetes' message for forbidden pod spec updates.
const podUpdatableFields = "pod updates may not change fields other than `spec.containers[*].image`," +
	"`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations)," +
	"`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"

// validatePodSpecUpdate allows only the spec changes Kubernetes allows on a
// pod update, plus binding: spec.nodeName may go from empty to a node (the
// DaemonSet controller binds pods itself; there is no binding subresource).
func validatePodSpecUpdate(spec, old *corev1.PodSpec, fldPath *field.Path) field.ErrorList {
	mungedOld := old.DeepCopy()
	mungedNew := spec.DeepCopy()
	if len(mungedNew.Containers) == len(mungedOld.Containers) {
		for i := range mungedNew.Containers {
			mungedOld.Containers[i].Image = mungedNew.Containers[i].Image
		}
	}
	if len(mungedNew.InitContainers) == len(mungedOld.InitContainers) {
		for i := range mungedNew.InitContainers {
			mungedOld.InitContainers[i].Image = mungedNew.InitContainers[i].Image
		}
	}
	mungedOld.ActiveDeadlineSeconds = mungedNew.ActiveDeadlineSeconds
	mungedOld.TerminationGracePeriodSeconds = mungedNew.TerminationGracePeriodSeconds
	if old.NodeName == "" {
		mungedOld.NodeName = mungedNew.NodeName
	}
	// Tolerations may only be added.
	tolerationsOK := true
	for _, ot := range old.Tolerations {
		found := false
		for _, nt := range spec.Tolerations {
			if apiequality.Semantic.DeepEqual(ot, nt) {
				found = true
				break
			}
		}
		tolerationsOK = tolerationsOK && found
	}
	var allErrs field.ErrorList
	if !tolerationsOK {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("tolerations"), "existing toleration can not be modified except its tolerationSeconds"))
	}
	mungedOld.Tolerations = mungedNew.Tolerations
	if !apiequal.Equal(mungedNew, mungedOld) {
		allErrs = append(allErrs, field.Forbidden(fldPath, podUpdatableFields))
	}
	return allErrs
}
