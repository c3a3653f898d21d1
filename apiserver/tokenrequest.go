package apiserver

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/kubernetes/pkg/apis/authentication"
	authenticationv1conv "k8s.io/kubernetes/pkg/apis/authentication/v1"
	authenticationvalidation "k8s.io/kubernetes/pkg/apis/authentication/validation"
	"k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/serviceaccount"

	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// ServiceAccountIssuer is the issuer of service account tokens and the
// audience the API server accepts, kube-apiserver's usual
// --service-account-issuer and --api-audiences.
const ServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// ServiceAccountTokens issues service account tokens (TokenRequest, the
// serviceaccounts/token subresource that `kubectl create token` and kubelet
// use) and authenticates them, with Kubernetes' own JWT code
// (k8s.io/kubernetes pkg/serviceaccount): ES256 JWTs naming the issuer, the
// audiences, an expiry, the account's name and uid, and the object the token
// is bound to (a Pod or Secret). A token is accepted while it has not
// expired, carries the API audience, and its account — and bound object —
// still exist with the uids it names (docs/rbac.md §6).
type ServiceAccountTokens struct {
	st    *store.Store
	gen   serviceaccount.TokenGenerator
	authn authenticator.Token
}

var _ Authenticator = (*ServiceAccountTokens)(nil)

// NewServiceAccountTokens signs with key and checks accounts and bound
// objects in st.
func NewServiceAccountTokens(st *store.Store, key *ecdsa.PrivateKey) (*ServiceAccountTokens, error) {
	gen, err := serviceaccount.JWTTokenGenerator(ServiceAccountIssuer, key)
	if err != nil {
		return nil, fmt.Errorf("apiserver: service account token signer: %w", err)
	}
	keys, err := serviceaccount.StaticPublicKeysGetter([]any{&key.PublicKey})
	if err != nil {
		return nil, fmt.Errorf("apiserver: service account token keys: %w", err)
	}
	authn := serviceaccount.JWTTokenAuthenticator([]string{ServiceAccountIssuer}, keys,
		authenticator.Audiences{ServiceAccountIssuer}, serviceaccount.NewValidator(tokenObjects{st: st}))
	return &ServiceAccountTokens{st: st, gen: gen, authn: authn}, nil
}

// AuthenticateToken implements Authenticator for service account JWTs:
// user system:serviceaccount:<ns>:<name>, groups system:serviceaccounts and
// system:serviceaccounts:<ns>.
func (t *ServiceAccountTokens) AuthenticateToken(token string) (string, []string, bool) {
	if strings.Count(token, ".") != 2 {
		return "", nil, false // not a JWT
	}
	res, ok, err := t.authn.AuthenticateToken(context.Background(), token)
	if err != nil || !ok || res == nil || res.User == nil {
		return "", nil, false
	}
	return res.User.GetName(), res.User.GetGroups(), true
}

// serveTokenRequest is POST .../serviceaccounts/{name}/token: the caller
// needs create on serviceaccounts/token; the request is defaulted (an
// hour) and validated as upstream (at least 10 minutes, at most 2^32 s),
// the account and the bound object must exist, and the answer (201) is the
// request with status.token and status.expirationTimestamp.
func (s *Server) serveTokenRequest(w http.ResponseWriter, req *http.Request, c call) error {
	if s.tokens == nil {
		return apierrors.NewMethodNotSupported(resources.ServiceAccounts.GroupResource(), "create")
	}
	if err := s.authorize(req.Context(), c, "create"); err != nil {
		return err
	}
	out, err := s.wire.negotiateOutput(req, plainRestrictions{})
	if err != nil {
		return err
	}
	gvk := authenticationv1.SchemeGroupVersion.WithKind("TokenRequest")
	tr := &authenticationv1.TokenRequest{}
	if err := s.decodeInto(w, req, gvk, tr); err != nil {
		return err
	}
	authenticationv1conv.SetObjectDefaults_TokenRequest(tr)
	in := &authentication.TokenRequest{}
	if err := authenticationv1conv.Convert_v1_TokenRequest_To_authentication_TokenRequest(tr, in, nil); err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	if errs := authenticationvalidation.ValidateTokenRequest(in); len(errs) > 0 {
		return apierrors.NewInvalid(gvk.GroupKind(), "", errs)
	}
	ctx := req.Context()
	if err := s.admitNodeTokenRequest(ctx, c, tr); err != nil {
		return err
	}
	obj, err := s.store.Get(ctx, resources.ServiceAccounts, c.namespace, c.name)
	if err != nil {
		return s.missingNamespace(ctx, c, err)
	}
	sa := obj.(*corev1.ServiceAccount)
	var pod *core.Pod
	var secret *core.Secret
	if ref := tr.Spec.BoundObjectRef; ref != nil {
		bgvk := schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind)
		var uid string
		switch {
		case bgvk.Group == "" && bgvk.Kind == "Pod":
			o, err := s.store.Get(ctx, resources.Pods, c.namespace, ref.Name)
			if err != nil {
				return err
			}
			p := o.(*corev1.Pod)
			// A pod without serviceAccountName runs as "default" (the
			// ServiceAccount admission plugin would have set it).
			if psa := p.Spec.ServiceAccountName; psa != c.name && (psa != "" || c.name != "default") {
				return apierrors.NewBadRequest(fmt.Sprintf("cannot bind token for serviceaccount %q to pod running with different serviceaccount name.", c.name))
			}
			pod = &core.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID}}
			uid = string(p.UID)
		case bgvk.Group == "" && bgvk.Kind == "Secret":
			o, err := s.store.Get(ctx, resources.Secrets, c.namespace, ref.Name)
			if err != nil {
				return err
			}
			secret = &core.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: o.GetNamespace(), Name: o.GetName(), UID: o.GetUID()}}
			uid = string(o.GetUID())
		default:
			return apierrors.NewBadRequest(fmt.Sprintf("cannot bind token to object of type %s", bgvk.String()))
		}
		if ref.UID != "" && string(ref.UID) != uid {
			return apierrors.NewConflict(schema.GroupResource{Group: bgvk.Group, Resource: bgvk.Kind}, ref.Name,
				fmt.Errorf("the UID in the bound object reference (%s) does not match the UID in record. The object might have been deleted and then recreated", ref.UID))
		}
	}
	if len(tr.Spec.Audiences) == 0 {
		tr.Spec.Audiences = []string{ServiceAccountIssuer}
	}
	exp := *tr.Spec.ExpirationSeconds
	account := core.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: sa.Namespace, Name: sa.Name, UID: sa.UID}}
	sc, pc, err := serviceaccount.Claims(account, pod, secret, nil, nil, nil, exp, 0, tr.Spec.Audiences, nil)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	token, err := s.tokens.gen.GenerateToken(ctx, sc, pc)
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("sign token: %w", err))
	}
	tr.Namespace, tr.Name = c.namespace, c.name
	tr.Status = authenticationv1.TokenRequestStatus{Token: token, ExpirationTimestamp: metav1.NewTime(sc.Expiry.Time())}
	tr.SetGroupVersionKind(gvk)
	s.wire.write(w, http.StatusCreated, out, "", tr)
	return nil
}

// decodeInto decodes a JSON, YAML or protobuf body of kind gvk into into.
func (s *Server) decodeInto(w http.ResponseWriter, req *http.Request, gvk schema.GroupVersionKind, into runtime.Object) error {
	mt, err := s.wire.inputMediaType(req)
	if err != nil {
		return err
	}
	body, err := s.readBody(w, req)
	if err != nil {
		return err
	}
	info, ok := runtime.SerializerInfoForMediaType(s.reviews.codecs.SupportedMediaTypes(), mt)
	if !ok {
		return unsupportedMediaType(s.wire.mediaTypes)
	}
	obj, got, err := info.Serializer.Decode(body, &gvk, into)
	if err != nil || obj != into {
		return apierrors.NewBadRequest(fmt.Sprintf("the object provided is unrecognized (must be of type %s): %v (%s)", gvk.Kind, err, summarizeData(body, 30)))
	}
	if got.GroupVersion() != gvk.GroupVersion() {
		return apierrors.NewBadRequest(fmt.Sprintf("the API version in the data (%s) does not match the expected API version (%s)", got.GroupVersion(), gvk.GroupVersion()))
	}
	return nil
}

// tokenObjects is the token validator's view of the store: the watch
// cache, as kube-apiserver's token getter reads informers, so that
// authenticating a token costs no etcd read. The cache holds every write
// this server made before the read: a token dies the moment the delete of
// its account or pod returned here. An object the cache lacks is read from
// etcd, as the getter falls back to a live read, for one written through
// another server moments ago.
type tokenObjects struct{ st *store.Store }

// getTyped reads namespace/name of r for the token validator (shared with
// the cache: read-only, as the validator treats it).
func getTyped[T resources.Object](ctx context.Context, st *store.Store, r *resources.Resource, namespace, name string) (T, error) {
	var zero T
	obj, err := st.GetCached(ctx, r, namespace, name)
	if store.IsNotFound(err) {
		obj, err = st.Get(ctx, r, namespace, name)
	}
	if store.IsNotFound(err) {
		return zero, apierrors.NewNotFound(r.GroupResource(), name)
	}
	if err != nil {
		return zero, err
	}
	return typed[T](obj)
}

func (o tokenObjects) GetServiceAccount(ctx context.Context, namespace, name string) (*corev1.ServiceAccount, error) {
	return getTyped[*corev1.ServiceAccount](ctx, o.st, resources.ServiceAccounts, namespace, name)
}

func (o tokenObjects) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return getTyped[*corev1.Pod](ctx, o.st, resources.Pods, namespace, name)
}

func (o tokenObjects) GetSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	return getTyped[*corev1.Secret](ctx, o.st, resources.Secrets, namespace, name)
}

func (o tokenObjects) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	return getTyped[*corev1.Node](ctx, o.st, resources.Nodes, "", name)
}

func (o tokenObjects) GetValidatingWebhookConfiguration(_ context.Context, name string) (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	return nil, apierrors.NewNotFound(admissionregistrationv1.Resource("validatingwebhookconfigurations"), name)
}

func (o tokenObjects) GetMutatingWebhookConfiguration(_ context.Context, name string) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	return nil, apierrors.NewNotFound(admissionregistrationv1.Resource("mutatingwebhookconfigurations"), name)
}

// authenticators tries each Authenticator in turn.
type authenticators []Authenticator

func (as authenticators) AuthenticateToken(token string) (string, []string, bool) {
	for _, a := range as {
		if name, groups, ok := a.AuthenticateToken(token); ok {
			return name, groups, true
		}
	}
	return "", nil, false
}

// reviewAuthenticator authenticates a TokenReview's token as the server
// authenticates requests (kube-rbac-proxy and other delegating servers
// send them): a service account JWT checked against the review's audiences
// (the API audience when none), any other token by the server's
// Authenticator, which knows only the API audience. The user gets
// system:authenticated, as in the server's own requests.
func (s *Server) reviewAuthenticator() authenticator.Request {
	agnostic := authenticator.WrapAudienceAgnosticToken(authenticator.Audiences{ServiceAccountIssuer},
		authenticator.TokenFunc(func(_ context.Context, token string) (*authenticator.Response, bool, error) {
			name, groups, ok := s.authn.AuthenticateToken(token)
			if !ok || name == "" {
				return nil, false, nil
			}
			return &authenticator.Response{User: &user.DefaultInfo{Name: name, Groups: groups}}, true, nil
		}))
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		token, ok := bearerToken(req.Header.Get("Authorization"))
		if !ok {
			return nil, false, nil
		}
		a := agnostic
		if s.tokens != nil && strings.Count(token, ".") == 2 {
			a = s.tokens.authn
		}
		res, ok, err := a.AuthenticateToken(req.Context(), token)
		if !ok || err != nil || res == nil || res.User == nil {
			return res, ok, err
		}
		u := &user.DefaultInfo{Name: res.User.GetName(), UID: res.User.GetUID(), Extra: res.User.GetExtra(),
			Groups: append(slices.Clip(res.User.GetGroups()), authenticatedGroup)}
		return &authenticator.Response{Audiences: res.Audiences, User: u}, true, nil
	})
}

// admitNodeTokenRequest is NodeRestriction's rule for token requests: a node
// gets only tokens bound to a pod (by name and UID) scheduled on itself, so
// they die with the pod. Other callers pass.
func (s *Server) admitNodeTokenRequest(ctx context.Context, c call, tr *authenticationv1.TokenRequest) error {
	node, ok := nodeName(c.user)
	if !ok {
		return nil
	}
	forbid := func(why string) error {
		return apierrors.NewForbidden(schema.GroupResource{Resource: "serviceaccounts"}, c.name, errors.New(why))
	}
	ref := tr.Spec.BoundObjectRef
	if ref == nil || ref.APIVersion != "v1" || ref.Kind != "Pod" || ref.Name == "" {
		return forbid("node requested token not bound to a pod")
	}
	if ref.UID == "" {
		return forbid("node requested token with a pod binding without a uid")
	}
	obj, err := s.store.Get(ctx, resources.Pods, c.namespace, ref.Name)
	if err != nil {
		return err
	}
	pod := obj.(*corev1.Pod)
	if ref.UID != pod.UID {
		return forbid(fmt.Sprintf("the UID in the bound object reference (%s) does not match the UID in record. The object might have been deleted and then recreated", ref.UID))
	}
	if pod.Spec.NodeName != node {
		return forbid("node requested token bound to a pod scheduled on a different node")
	}
	return nil
}
