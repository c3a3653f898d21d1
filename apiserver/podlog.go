package apiserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/everynode/everynode/resources"
)

// Pod logs: GET /api/v1/namespaces/{ns}/pods/{name}/log is proxied to the
// agent of the pod's node, as the Kubernetes API server proxies to kubelet:
// the pod names its node (spec.nodeName), the Node publishes its address
// (InternalIP, else Hostname) and the agent's log port
// (status.daemonEndpoints.kubeletEndpoint.Port), and the agent serves
// /containerLogs/{ns}/{pod}/{container} over HTTPS.
//
// The agent's certificate is self-signed and not verified; the server
// authenticates itself to the agent with the bearer token
// Config.NodeCredential returns for the node (the node's log token), which
// opens that node's logs and nothing else. The answer is plain text, flushed
// as it arrives, so follow=true streams.

// podLogPath is the route of the pods/log subresource.
const podLogPath = "GET /api/v1/namespaces/{namespace}/pods/{name}/log"

// podLogDialTimeout bounds connecting to an agent and its answer's headers.
const podLogDialTimeout = 10 * time.Second

// podLogs proxies pods/log to agents.
type podLogs struct {
	credential func(node string) string
	client     *http.Client
}

func newPodLogs(credential func(node string) string) *podLogs {
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: podLogDialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, // see the comment above: the token authenticates this hop
		TLSHandshakeTimeout:   podLogDialTimeout,
		ResponseHeaderTimeout: podLogDialTimeout,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       time.Minute,
	}
	return &podLogs{credential: credential, client: &http.Client{Transport: tr}}
}

// podLogParams are the PodLogOptions the API accepts on the query.
var podLogParams = []string{"follow", "previous", "timestamps", "tailLines", "sinceSeconds", "sinceTime"}

func (s *Server) servePodLog(w http.ResponseWriter, req *http.Request, c call) error {
	ctx := req.Context()
	q := req.URL.Query()
	if err := validatePodLogQuery(q); err != nil {
		return err
	}
	obj, err := s.getObject(ctx, c)
	if err != nil {
		return err
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return fmt.Errorf("apiserver: pod log: got %T", obj)
	}
	container, err := logContainer(pod, q.Get("container"))
	if err != nil {
		return err
	}
	if pod.Spec.NodeName == "" {
		return apierrors.NewBadRequest(fmt.Sprintf("pod %s does not have a host assigned", pod.Name))
	}
	if s.podLogs.credential == nil {
		return apierrors.NewServiceUnavailable("this server cannot reach node agents for logs (it has no node credentials)")
	}
	target, err := s.agentLogURL(ctx, pod, container, q)
	if err != nil {
		return err
	}
	// Follows end with the server, like watches.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	areq, err := http.NewRequestWithContext(ctx, http.MethodGet, target.String(), nil)
	if err != nil {
		return fmt.Errorf("apiserver: pod log: %w", err)
	}
	areq.Header.Set("Authorization", "Bearer "+s.podLogs.credential(pod.Spec.NodeName))
	resp, err := s.podLogs.client.Do(areq)
	if err != nil {
		if req.Context().Err() != nil {
			return req.Context().Err()
		}
		return apierrors.NewServiceUnavailable(fmt.Sprintf("cannot reach the agent of node %s at %s for logs: %v",
			pod.Spec.NodeName, target.Host, errors.Unwrap(err)))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		msg := strings.TrimSpace(string(body))
		if resp.StatusCode == http.StatusUnauthorized {
			s.log.Warn("node agent refused the server's log token", "node", pod.Spec.NodeName)
			return apierrors.NewInternalError(fmt.Errorf("the agent of node %s refused the server's credentials", pod.Spec.NodeName))
		}
		if resp.StatusCode == http.StatusNotFound {
			// kubelet's answer for a container that has not run (yet).
			return apierrors.NewBadRequest(msg)
		}
		return apierrors.NewGenericServerResponse(resp.StatusCode, "get", schema.GroupResource{Resource: "pods/log"}, pod.Name, msg, 0, false)
	}
	var limit int64 = -1
	if v := q.Get("limitBytes"); v != "" {
		limit, _ = strconv.ParseInt(v, 10, 64) // validated above
	}
	return streamLog(w, resp.Body, limit)
}

// streamLog copies body to w, flushing after every read, up to limit bytes
// (negative: no limit).
func streamLog(w http.ResponseWriter, body io.Reader, limit int64) error {
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	if limit >= 0 {
		body = io.LimitReader(body, limit)
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return nil // the client went away
			}
			_ = rc.Flush()
		}
		if err != nil {
			return nil // EOF, or the agent's stream ended: the answer is committed either way
		}
	}
}

// validatePodLogQuery checks the query as Kubernetes validates PodLogOptions.
func validatePodLogQuery(q url.Values) error {
	for _, k := range []string{"follow", "previous", "timestamps", "insecureSkipTLSVerifyBackend"} {
		if v := q.Get(k); v != "" {
			if _, err := strconv.ParseBool(v); err != nil {
				return apierrors.NewBadRequest(fmt.Sprintf("invalid %s %q: want true or false", k, v))
			}
		}
	}
	for _, p := range []struct {
		name string
		min  int64
	}{{"tailLines", 0}, {"sinceSeconds", 1}, {"limitBytes", 1}} {
		if v := q.Get(p.name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < p.min {
				return apierrors.NewBadRequest(fmt.Sprintf("invalid %s %q: must be an integer of at least %d", p.name, v, p.min))
			}
		}
	}
	if q.Get("sinceSeconds") != "" && q.Get("sinceTime") != "" {
		return apierrors.NewBadRequest("at most one of sinceTime or sinceSeconds may be specified")
	}
	if v := q.Get("sinceTime"); v != "" {
		if _, err := time.Parse(time.RFC3339, v); err != nil {
			return apierrors.NewBadRequest(fmt.Sprintf("invalid sinceTime %q: want RFC 3339", v))
		}
	}
	return nil
}

// logContainer picks the container whose log is asked for, with
// Kubernetes' errors: a pod of one container needs no name; a name must be
// one of the pod's containers, init or ephemeral containers.
func logContainer(pod *corev1.Pod, name string) (string, error) {
	var names []string
	for _, c := range pod.Spec.Containers {
		names = append(names, c.Name)
	}
	var all []string
	all = append(all, names...)
	for _, c := range pod.Spec.InitContainers {
		all = append(all, c.Name)
	}
	for _, c := range pod.Spec.EphemeralContainers {
		all = append(all, c.Name)
	}
	if name == "" {
		if len(names) == 1 {
			return names[0], nil
		}
		return "", apierrors.NewBadRequest(fmt.Sprintf("a container name must be specified for pod %s, choose one of: %v", pod.Name, names))
	}
	for _, n := range all {
		if n == name {
			return name, nil
		}
	}
	return "", apierrors.NewBadRequest(fmt.Sprintf("container %s is not valid for pod %s", name, pod.Name))
}

// agentLogURL locates the agent serving the pod's node and builds the URL
// of the container's log there.
func (s *Server) agentLogURL(ctx context.Context, pod *corev1.Pod, container string, q url.Values) (*url.URL, error) {
	obj, err := s.store.Get(ctx, resources.Nodes, "", pod.Spec.NodeName)
	if err != nil {
		if se := s.statusError(err); apierrors.IsNotFound(se) {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("node %s of pod %s is not registered", pod.Spec.NodeName, pod.Name))
		}
		return nil, err
	}
	node, ok := obj.(*corev1.Node)
	if !ok {
		return nil, fmt.Errorf("apiserver: pod log: node is a %T", obj)
	}
	port := node.Status.DaemonEndpoints.KubeletEndpoint.Port
	host := nodeAddress(node)
	if port <= 0 || host == "" {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("node %s publishes no log endpoint (its agent serves no logs)", node.Name))
	}
	out := url.Values{}
	for _, k := range podLogParams {
		if v := q.Get(k); v != "" {
			out.Set(k, v)
		}
	}
	return &url.URL{
		Scheme:   "https",
		Host:     net.JoinHostPort(host, strconv.Itoa(int(port))),
		Path:     "/containerLogs/" + url.PathEscape(pod.Namespace) + "/" + url.PathEscape(pod.Name) + "/" + url.PathEscape(container),
		RawQuery: out.Encode(),
	}, nil
}

// nodeAddress is the node's first InternalIP, else its first Hostname
// address.
func nodeAddress(n *corev1.Node) string {
	for _, typ := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeHostName} {
		for _, a := range n.Status.Addresses {
			if a.Type == typ && a.Address != "" {
				return a.Address
			}
		}
	}
	return ""
}
