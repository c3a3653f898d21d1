package nodeagent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	resources "github.com/everynode/everynode/resources/core"
)

// Service account token defaults, as the ServiceAccount admission plugin and
// kubelet use them.
const (
	// serviceAccountMountPath is where a pod's API credentials appear.
	serviceAccountMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"
	// serviceAccountVolume names the agent-written credentials volume under
	// the pod's volumes dir (a name pod volumes cannot have: it has a dot).
	serviceAccountVolume = "kube-api-access.everynode"
	// defaultTokenSeconds is the admission plugin's expirationSeconds
	// (3607: one hour plus the marker kube-apiserver extends).
	defaultTokenSeconds = 3607
	// tokensDir holds the tokens kept for offline restarts, under
	// DataDir/objects.
	tokensDir = "tokens"
)

// TokenRequester is what the agent needs of its client to get service
// account tokens: client.HTTP's RawPost.
type TokenRequester interface {
	RawPost(ctx context.Context, path string, body []byte) ([]byte, error)
}

// tokenManager gets the bound tokens of the pods' service accounts through
// TokenRequest and keeps them (in memory and, 0600, on disk) until 80% of
// their lifetime has passed or they are a day old, as kubelet's token
// manager.
type tokenManager struct {
	req   TokenRequester // nil: the client cannot request tokens
	dir   string
	clock clock.Clock

	mu     sync.Mutex
	tokens map[string]*authenticationv1.TokenRequest
}

func newTokenManager(req TokenRequester, dataDir string, clk clock.Clock) *tokenManager {
	m := &tokenManager{req: req, clock: clk, tokens: map[string]*authenticationv1.TokenRequest{}}
	if dataDir != "" {
		m.dir = filepath.Join(dataDir, objectsDir, tokensDir)
	}
	return m
}

func tokenKey(pod *corev1.Pod, sa string, p *corev1.ServiceAccountTokenProjection) string {
	exp := int64(defaultTokenSeconds)
	if p.ExpirationSeconds != nil {
		exp = *p.ExpirationSeconds
	}
	h := sha256.Sum256([]byte(strings.Join([]string{pod.Namespace, sa, p.Audience, strconv.FormatInt(exp, 10)}, "\x00")))
	return string(pod.UID) + "-" + hex.EncodeToString(h[:8])
}

// fresh reports whether tr needs no refresh yet.
func (m *tokenManager) fresh(tr *authenticationv1.TokenRequest) bool {
	if tr == nil || tr.Spec.ExpirationSeconds == nil {
		return false
	}
	exp := tr.Status.ExpirationTimestamp.Time
	ttl := time.Duration(*tr.Spec.ExpirationSeconds) * time.Second
	now := m.clock.Now()
	return now.Before(exp.Add(-ttl/5)) && now.Before(exp.Add(-ttl).Add(24*time.Hour))
}

// token returns pod's token for the projection p; offline, a kept token that
// has not expired.
func (m *tokenManager) token(ctx context.Context, pod *corev1.Pod, p *corev1.ServiceAccountTokenProjection) (string, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	key := tokenKey(pod, sa, p)
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.tokens[key]
	if cur == nil {
		cur = m.load(key)
	}
	if m.fresh(cur) {
		m.tokens[key] = cur
		return cur.Status.Token, nil
	}
	if m.req == nil {
		return "", errors.New("serviceAccountToken: the agent's client cannot request tokens")
	}
	exp := int64(defaultTokenSeconds)
	if p.ExpirationSeconds != nil {
		exp = *p.ExpirationSeconds
	}
	tr := &authenticationv1.TokenRequest{
		TypeMeta: metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "TokenRequest"},
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &exp,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID},
		},
	}
	if p.Audience != "" {
		tr.Spec.Audiences = []string{p.Audience}
	}
	body, err := json.Marshal(tr)
	if err != nil {
		return "", err
	}
	rctx, cancel := context.WithTimeout(ctx, apiCallTimeout)
	defer cancel()
	out, err := m.req.RawPost(rctx, "/api/v1/namespaces/"+pod.Namespace+"/serviceaccounts/"+sa+"/token", body)
	if err != nil {
		if cur != nil && m.clock.Now().Before(cur.Status.ExpirationTimestamp.Time) {
			return cur.Status.Token, nil // unreachable: the kept token is still valid
		}
		return "", fmt.Errorf("failed to fetch token for service account %s/%s: %w", pod.Namespace, sa, err)
	}
	got := &authenticationv1.TokenRequest{}
	if err := json.Unmarshal(out, got); err != nil || got.Status.Token == "" {
		return "", fmt.Errorf("token request for service account %s/%s: unreadable answer (%v)", pod.Namespace, sa, err)
	}
	if got.Spec.ExpirationSeconds == nil {
		got.Spec.ExpirationSeconds = &exp
	}
	m.tokens[key] = got
	m.save(key, got)
	return got.Status.Token, nil
}

// forget drops the tokens of pod uid, in memory and on disk.
func (m *tokenManager) forget(uid string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.tokens {
		if strings.HasPrefix(k, uid+"-") {
			delete(m.tokens, k)
		}
	}
	if m.dir == "" {
		return
	}
	matches, _ := filepath.Glob(filepath.Join(m.dir, uid+"-*.json"))
	for _, f := range matches {
		_ = os.Remove(f)
	}
}

func (m *tokenManager) load(key string) *authenticationv1.TokenRequest {
	if m.dir == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(m.dir, key+".json"))
	if err != nil {
		return nil
	}
	tr := &authenticationv1.TokenRequest{}
	if json.Unmarshal(b, tr) != nil {
		return nil
	}
	return tr
}

func (m *tokenManager) save(key string, tr *authenticationv1.TokenRequest) {
	if m.dir == "" {
		return
	}
	b, err := json.Marshal(tr)
	if err != nil {
		return
	}
	if os.MkdirAll(m.dir, 0o700) != nil {
		return
	}
	tmp := filepath.Join(m.dir, "."+key+".tmp")
	if os.WriteFile(tmp, b, 0o600) == nil {
		_ = os.Rename(tmp, filepath.Join(m.dir, key+".json"))
	}
}

// projectToken adds a serviceAccountToken projection to out.
func (a *Agent) projectToken(ctx context.Context, pod *corev1.Pod, out map[string]fileProjection, p *corev1.ServiceAccountTokenProjection, defMode *int32) error {
	tok, err := a.tokens.token(ctx, pod, p)
	if err != nil {
		return err
	}
	mode := fileMode(nil, defMode)
	if defMode == nil {
		mode = 0o600 // kubelet's default for token files without a mode
	}
	out[p.Path] = fileProjection{Data: []byte(tok), Mode: mode}
	return nil
}

// automountToken reports whether pod gets the API credentials volume: the
// pod's automountServiceAccountToken, else its ServiceAccount's, else yes.
// Static pods get none (as in Kubernetes, where they may not use service
// accounts), nor do pods of an agent whose client cannot request tokens
// (a fake API).
func (a *Agent) automountToken(ctx context.Context, pod *corev1.Pod) bool {
	if a.tokens.req == nil || pod.Annotations[AnnotationConfigSource] == "file" {
		return false
	}
	if pod.Spec.AutomountServiceAccountToken != nil {
		return *pod.Spec.AutomountServiceAccountToken
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	gctx, cancel := context.WithTimeout(ctx, apiCallTimeout)
	defer cancel()
	if obj, err := a.api.Get(gctx, resources.ServiceAccounts, pod.Namespace, sa); err == nil {
		if s, ok := obj.(*corev1.ServiceAccount); ok && s.AutomountServiceAccountToken != nil {
			return *s.AutomountServiceAccountToken
		}
	}
	return true
}

// setUpServiceAccountVolume writes the pod's token, ca.crt and namespace,
// as the projected volume Kubernetes' admission adds (kube-api-access-*).
func (a *Agent) setUpServiceAccountVolume(ctx context.Context, pod *corev1.Pod) (string, error) {
	if a.cfg.DataDir == "" {
		return "", errors.New("service account token: the agent needs a data dir (--data-dir)")
	}
	payload := map[string]fileProjection{
		"namespace": {Data: []byte(pod.Namespace), Mode: defaultFileMode},
		"ca.crt":    {Data: a.cfg.ClusterCA, Mode: defaultFileMode},
	}
	exp := int64(defaultTokenSeconds)
	if err := a.projectToken(ctx, pod, payload, &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &exp}, ptrInt32(defaultFileMode)); err != nil {
		return "", fmt.Errorf("MountVolume.SetUp failed for volume %q : %w", "kube-api-access", err)
	}
	dir, err := a.writeVolume(pod, serviceAccountVolume, payload)
	if err != nil {
		return "", fmt.Errorf("MountVolume.SetUp failed for volume %q : %w", "kube-api-access", err)
	}
	return dir, nil
}

func ptrInt32(v int32) *int32 { return &v }

// serviceEnv is the KUBERNETES_SERVICE_* and KUBERNETES_PORT_* variables
// kubelet sets for the API's service, naming the API server as this pod can
// reach it: the agent's address of it, or for a pod without host networking
// when that is a loopback address, the API forwarder's (bridgeAPI); none
// when the pod cannot reach it.
func (a *Agent) serviceEnv(pod *corev1.Pod) []corev1.EnvVar {
	host, port, ok := a.apiServerHostPort()
	if !ok {
		return nil
	}
	if isLoopbackHost(host) && !pod.Spec.HostNetwork {
		if a.bridgeAPI == "" {
			return nil
		}
		host, port, _ = net.SplitHostPort(a.bridgeAPI)
	}
	hp := net.JoinHostPort(host, port)
	return []corev1.EnvVar{
		{Name: "KUBERNETES_SERVICE_HOST", Value: host},
		{Name: "KUBERNETES_SERVICE_PORT", Value: port},
		{Name: "KUBERNETES_SERVICE_PORT_HTTPS", Value: port},
		{Name: "KUBERNETES_PORT", Value: "tcp://" + hp},
		{Name: "KUBERNETES_PORT_" + port + "_TCP", Value: "tcp://" + hp},
		{Name: "KUBERNETES_PORT_" + port + "_TCP_PROTO", Value: "tcp"},
		{Name: "KUBERNETES_PORT_" + port + "_TCP_PORT", Value: port},
		{Name: "KUBERNETES_PORT_" + port + "_TCP_ADDR", Value: host},
	}
}
