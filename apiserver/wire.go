package apiserver

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/munnerz/goautoneg"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	apidiscoveryv2beta1 "k8s.io/api/apidiscovery/v2beta1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"github.com/everynode/everynode/resources"
)

// wire holds the media types the API reads and writes — JSON, YAML and
// Kubernetes protobuf — as apimachinery's CodecFactory serves them, over a
// scheme of the served k8s.io/api types. One is built per Server; it is
// read-only afterwards.
//
// Negotiation follows k8s.io/apiserver/pkg/endpoints/handlers/negotiation:
// Content-Type picks the decoder (415 otherwise), Accept with its q-values
// picks the encoder (406 when nothing fits). JSON responses keep the
// server's direct encoding/json path; YAML and protobuf go through the
// factory's serializers.
type wire struct {
	scheme *runtime.Scheme
	infos  []runtime.SerializerInfo // JSON first: the default for */* and no Accept
	json   runtime.SerializerInfo
	proto  runtime.SerializerInfo
	// mediaTypes and streamMediaTypes are the lists 406 and 415 answers name.
	mediaTypes, streamMediaTypes []string

	// negotiated remembers the outcome for Accept headers seen before
	// (clients send the same few over and over), up to maxNegotiated of them.
	negotiated     sync.Map // negotiationKey → negotiation
	negotiatedSize atomic.Int32
}

// maxNegotiated bounds the negotiation cache.
const maxNegotiated = 256

type negotiationKey struct {
	accept string
	rs     restrictions
}

type negotiation struct {
	out output
	ok  bool
}

func newWire() (*wire, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, metav1.AddMetaToScheme,
		rbacv1.AddToScheme, authorizationv1.AddToScheme, authenticationv1.AddToScheme,
		apidiscoveryv2.AddToScheme, apidiscoveryv2beta1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("apiserver: build scheme: %w", err)
		}
	}
	// Every served kind of the other groups, with its list.
	resources.AddToScheme(scheme)
	// DeleteOptions and the other option types under meta.k8s.io/v1, as
	// clients may send them.
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
	w := &wire{scheme: scheme, infos: serializer.NewCodecFactory(scheme).SupportedMediaTypes()}
	for _, info := range w.infos {
		w.mediaTypes = append(w.mediaTypes, info.MediaType)
		if info.StreamSerializer != nil {
			w.streamMediaTypes = append(w.streamMediaTypes, info.MediaType+";stream=watch")
		}
		switch info.MediaType {
		case runtime.ContentTypeJSON:
			w.json = info
		case runtime.ContentTypeProtobuf:
			w.proto = info
		}
	}
	if w.json.Serializer == nil || w.proto.Serializer == nil || w.infos[0].MediaType != runtime.ContentTypeJSON {
		return nil, fmt.Errorf("apiserver: codec factory lacks JSON or protobuf")
	}
	return w, nil
}

// output is the negotiated response encoding.
type output struct {
	info runtime.SerializerInfo
	// convert is the as=/g=/v= transform the client asked for (a Table or
	// an aggregated discovery list), nil for the object itself.
	convert *schema.GroupVersionKind
}

func (o output) isJSON() bool { return o.info.MediaType == runtime.ContentTypeJSON }

// restrictions says which transforms and stream schemas an endpoint serves,
// as negotiation.EndpointRestrictions does upstream.
type restrictions interface {
	allowsTransform(info *runtime.SerializerInfo, target *schema.GroupVersionKind) bool
	allowsServerVersion(v string) bool
}

// plainRestrictions serve the object as it is (errors, discovery documents):
// negotiation.DefaultEndpointRestrictions.
type plainRestrictions struct{}

func (plainRestrictions) allowsTransform(_ *runtime.SerializerInfo, target *schema.GroupVersionKind) bool {
	return target == nil
}
func (plainRestrictions) allowsServerVersion(string) bool { return false }

// resourceRestrictions are a resource endpoint's: the object itself in any
// media type, or a Table in JSON or YAML (RequestScope.AllowsMediaTypeTransform
// in k8s.io/apiserver pkg/endpoints/handlers/rest.go; kube-apiserver has no
// protobuf Tables). PartialObjectMetadata, which upstream also serves, is not
// served here: such clauses are skipped.
type resourceRestrictions struct{}

func (resourceRestrictions) allowsTransform(info *runtime.SerializerInfo, target *schema.GroupVersionKind) bool {
	if target == nil {
		return true
	}
	return isTable(target) && info.MediaTypeType == "application" &&
		(info.MediaTypeSubType == "json" || info.MediaTypeSubType == "yaml")
}
func (resourceRestrictions) allowsServerVersion(v string) bool { return v == "v1" }

func isTable(gvk *schema.GroupVersionKind) bool {
	return gvk.Kind == "Table" && gvk.Group == metav1.GroupName && (gvk.Version == "v1" || gvk.Version == "v1beta1")
}

// discoveryRestrictions accept only the aggregated discovery list
// (aggregated.DiscoveryEndpointRestrictions upstream).
type discoveryRestrictions struct{}

func (discoveryRestrictions) allowsTransform(_ *runtime.SerializerInfo, target *schema.GroupVersionKind) bool {
	return target != nil && target.Group == apidiscoveryv2.GroupName && target.Kind == "APIGroupDiscoveryList" &&
		(target.Version == "v2" || target.Version == "v2beta1")
}
func (discoveryRestrictions) allowsServerVersion(string) bool { return false }

// negotiate picks the response encoding from an Accept header: the first
// clause (by q-value) that names a supported media type and whose parameters
// the endpoint allows (negotiation.NegotiateMediaTypeOptions upstream). No
// Accept, or exactly application/json, is JSON at once.
func (wr *wire) negotiate(accept string, rs restrictions) (output, bool) {
	if accept == "" || accept == runtime.ContentTypeJSON {
		return output{info: wr.json}, true
	}
	key := negotiationKey{accept, rs}
	if n, ok := wr.negotiated.Load(key); ok {
		n := n.(negotiation)
		return n.out, n.ok
	}
	out, ok := wr.negotiateClauses(accept, rs)
	if wr.negotiatedSize.Load() < maxNegotiated {
		if _, loaded := wr.negotiated.LoadOrStore(key, negotiation{out, ok}); !loaded {
			wr.negotiatedSize.Add(1)
		}
	}
	return out, ok
}

// negotiateClauses is negotiate without the cache. Results are shared:
// callers must not modify them.
func (wr *wire) negotiateClauses(accept string, rs restrictions) (output, bool) {
	clauses := goautoneg.ParseAccept(accept)
	for i := range clauses {
		cl := &clauses[i]
		for j := range wr.infos {
			info := &wr.infos[j]
			if !(cl.Type == info.MediaTypeType && cl.SubType == info.MediaTypeSubType) &&
				!(cl.Type == info.MediaTypeType && cl.SubType == "*") &&
				!(cl.Type == "*" && cl.SubType == "*") {
				continue
			}
			if out, ok := acceptOptions(cl.Params, info, rs); ok {
				return out, true
			}
		}
	}
	return output{}, false
}

// acceptOptions reads one clause's parameters (acceptMediaTypeOptions
// upstream); unknown parameters are ignored.
func acceptOptions(params map[string]string, info *runtime.SerializerInfo, rs restrictions) (output, bool) {
	var convert *schema.GroupVersionKind
	target := func() *schema.GroupVersionKind {
		if convert == nil {
			convert = &schema.GroupVersionKind{}
		}
		return convert
	}
	for k, v := range params {
		switch k {
		case "as":
			target().Kind = v
		case "g":
			target().Group = v
		case "v":
			target().Version = v
		case "stream":
			if v != "" && (info.StreamSerializer == nil || v != "watch") {
				return output{}, false
			}
		case "sv":
			if v != "" && !rs.allowsServerVersion(v) {
				return output{}, false
			}
		}
	}
	if !rs.allowsTransform(info, convert) {
		return output{}, false
	}
	return output{info: *info, convert: convert}, true
}

// negotiateOutput negotiates a response, or returns the 406 Status.
func (wr *wire) negotiateOutput(req *http.Request, rs restrictions) (output, error) {
	out, ok := wr.negotiate(req.Header.Get("Accept"), rs)
	if !ok {
		return output{}, notAcceptable(wr.mediaTypes)
	}
	return out, nil
}

// negotiateStream negotiates a watch response: the chosen media type must
// have a stream form (JSON or protobuf), else 406 naming the stream types.
func (wr *wire) negotiateStream(req *http.Request, rs restrictions) (output, error) {
	out, ok := wr.negotiate(req.Header.Get("Accept"), rs)
	if !ok || out.info.StreamSerializer == nil {
		return output{}, notAcceptable(wr.streamMediaTypes)
	}
	return out, nil
}

// notAcceptable is negotiation.NewNotAcceptableError's Status.
func notAcceptable(accepted []string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusNotAcceptable, Reason: metav1.StatusReasonNotAcceptable,
		Message: "only the following media types are accepted: " + strings.Join(accepted, ", "),
	}}
}

// unsupportedMediaType is negotiation.NewUnsupportedMediaTypeError's Status.
func unsupportedMediaType(accepted []string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType,
		Reason:  metav1.StatusReasonUnsupportedMediaType,
		Message: "the body of the request was in an unknown format - accepted media types include: " + strings.Join(accepted, ", "),
	}}
}

// inputMediaType returns the media type of a request body: JSON when no
// Content-Type is given, YAML (also under its older names) or protobuf;
// anything else is a 415.
func (wr *wire) inputMediaType(req *http.Request) (string, error) {
	ct := req.Header.Get("Content-Type")
	if ct == "" {
		return runtime.ContentTypeJSON, nil
	}
	if mt, _, err := mime.ParseMediaType(ct); err == nil {
		switch mt {
		case runtime.ContentTypeJSON, runtime.ContentTypeProtobuf:
			return mt, nil
		case runtime.ContentTypeYAML, "application/x-yaml", "text/yaml":
			return runtime.ContentTypeYAML, nil
		}
	}
	return "", unsupportedMediaType(wr.mediaTypes)
}

// decodeProtobuf decodes a protobuf request body into a new object of r's
// type. As kube-apiserver, unknown fields are dropped without a warning
// (protobuf has no strict decoding), and a body of another kind is a 400
// (transformDecodeError in k8s.io/apiserver pkg/endpoints/handlers/create.go).
func (wr *wire) decodeProtobuf(r *resources.Resource, body []byte) (resources.Object, error) {
	gvk := r.GVK()
	into := r.New()
	obj, got, err := wr.proto.Serializer.Decode(body, &gvk, into)
	if err == nil && obj != into {
		// Upstream decodes the other kind, then fails to convert it to the
		// endpoint's internal type.
		err = fmt.Errorf("converting (%s) to (%s): unknown conversion", goTypeName(got.Version, got.Kind), internalTypeName(r))
	}
	if err != nil {
		if got != nil && got.Kind != "" {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: %v", got.Kind, got.Version, r.Kind, err))
		}
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the object provided is unrecognized (must be of type %s): %v (%s)", r.Kind, err, summarizeData(body, 30)))
	}
	if got.GroupVersion() != r.GroupVersion() {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the API version in the data (%s) does not match the expected API version (%s)",
			got.GroupVersion(), r.GroupVersion()))
	}
	r.SetTypeMeta(obj)
	return into, nil
}

// goTypeName is how reflection names a versioned k8s.io/api type ("v1.Pod").
func goTypeName(version, kind string) string { return version + "." + kind }

// internalTypeName is how reflection names the internal type an upstream
// endpoint decodes into ("core.Namespace", "apps.DaemonSet").
func internalTypeName(r *resources.Resource) string {
	pkg, _, _ := strings.Cut(r.Group, ".")
	if pkg == "" {
		pkg = "core"
	}
	return pkg + "." + r.Kind
}

// summarizeData is upstream's summary of an undecodable body (helpers.go in
// k8s.io/apiserver pkg/endpoints/handlers): JSON as text, anything else in
// hex, cut at maxLength bytes.
func summarizeData(data []byte, maxLength int) string {
	switch {
	case len(data) == 0:
		return "<empty>"
	case data[0] == '{':
		if len(data) > maxLength {
			return string(data[:maxLength]) + " ..."
		}
		return string(data)
	default:
		if len(data) > maxLength {
			return hex.EncodeToString(data[:maxLength]) + " ..."
		}
		return hex.EncodeToString(data)
	}
}

// decodeProtobufDeleteOptions decodes a protobuf DeleteOptions body (kubectl
// drain's typed client sends one) under any group version it is registered in.
func (wr *wire) decodeProtobufDeleteOptions(body []byte) (*metav1.DeleteOptions, error) {
	opts := &metav1.DeleteOptions{}
	gvk := metav1.SchemeGroupVersion.WithKind("DeleteOptions")
	obj, _, err := wr.proto.Serializer.Decode(body, &gvk, opts)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if obj != opts {
		return nil, apierrors.NewBadRequest("decoded object cannot be converted to DeleteOptions")
	}
	return opts, nil
}

// encode writes obj in the negotiated media type; contentType overrides the
// serializer's own media type when set (aggregated discovery names its
// kind). obj must carry its apiVersion and kind.
func (wr *wire) write(w http.ResponseWriter, code int, out output, contentType string, obj runtime.Object) {
	if out.isJSON() && contentType == "" {
		writeJSON(w, code, obj)
		return
	}
	var buf bytes.Buffer
	if err := out.info.Serializer.Encode(obj, &buf); err != nil {
		writeJSON(w, http.StatusInternalServerError, &metav1.Status{
			TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status:   metav1.StatusFailure, Code: http.StatusInternalServerError,
			Reason: metav1.StatusReasonInternalError, Message: "encoding the response: " + err.Error(),
		})
		return
	}
	if contentType == "" {
		contentType = out.info.MediaType
	}
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}
