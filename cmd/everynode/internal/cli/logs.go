package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spf13/pflag"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// LogsCommand is "everynode logs": a container's output through the API
// (pods/log), which the server proxies to the node's agent.
type LogsCommand struct {
	main *Main

	clientFlags
	container  string
	follow     bool
	tail       int64
	timestamps bool
	since      time.Duration
	sinceTime  string
	previous   bool
	limitBytes int64

	target string // POD or TYPE/NAME
}

func (c *LogsCommand) flags(fs *pflag.FlagSet) {
	fs.StringVarP(&c.container, "container", "c", "", "container name (may be omitted for a pod of one container)")
	fs.BoolVarP(&c.follow, "follow", "f", false, "stream the output as it is written")
	fs.Int64Var(&c.tail, "tail", -1, "lines of recent output to show; -1 shows all")
	fs.BoolVar(&c.timestamps, "timestamps", false, "prefix each line with its RFC 3339 time")
	fs.DurationVar(&c.since, "since", 0, "only output newer than this relative duration (5s, 2m, 3h)")
	fs.StringVar(&c.sinceTime, "since-time", "", "only output after this RFC 3339 time")
	fs.BoolVarP(&c.previous, "previous", "p", false, "the output of the previous, terminated run of the container")
	fs.Int64Var(&c.limitBytes, "limit-bytes", 0, "at most this many bytes of output; 0 means no limit")
}

// complete reads POD [CONTAINER] and checks the flags.
func (c *LogsCommand) complete(pos []string) error {
	switch {
	case len(pos) == 0:
		return usageError("logs needs a pod name", "run \"everynode logs POD\" (see \"everynode get pods\")")
	case len(pos) > 2 || (len(pos) == 2 && c.container != ""):
		return usageError(fmt.Sprintf("unexpected arguments %q", pos[1:]), "usage: everynode logs POD|TYPE/NAME [CONTAINER] [flags]")
	case len(pos) == 2:
		c.container = pos[1] // kubectl's "logs POD CONTAINER"
	}
	if c.since < 0 {
		return usageError("--since must be positive", "give a duration such as 10m")
	}
	if c.since > 0 && c.sinceTime != "" {
		return usageError("at most one of --since and --since-time may be given", "drop one of them")
	}
	if c.sinceTime != "" {
		if _, err := time.Parse(time.RFC3339, c.sinceTime); err != nil {
			return usageError(fmt.Sprintf("invalid --since-time %q", c.sinceTime), "use RFC 3339, e.g. 2026-01-02T15:04:05Z")
		}
	}
	if c.tail < -1 || c.limitBytes < 0 {
		return usageError("--tail and --limit-bytes must not be negative", "use -1 (tail) or 0 (limit) for all output")
	}
	c.target = pos[0]
	return nil
}

// query is the pods/log query for the flags.
func (c *LogsCommand) query(container string) url.Values {
	q := url.Values{}
	if container != "" {
		q.Set("container", container)
	}
	if c.follow {
		q.Set("follow", "true")
	}
	if c.previous {
		q.Set("previous", "true")
	}
	if c.timestamps {
		q.Set("timestamps", "true")
	}
	if c.tail >= 0 {
		q.Set("tailLines", strconv.FormatInt(c.tail, 10))
	}
	if c.since > 0 {
		q.Set("sinceSeconds", strconv.FormatInt(int64(math.Ceil(c.since.Seconds())), 10))
	}
	if c.sinceTime != "" {
		q.Set("sinceTime", c.sinceTime)
	}
	if c.limitBytes > 0 {
		q.Set("limitBytes", strconv.FormatInt(c.limitBytes, 10))
	}
	return q
}

// Run implements the command: it finds the pod (a DaemonSet's first pod for
// ds/NAME), then copies the log stream to stdout until it ends or ctx does.
func (c *LogsCommand) Run(ctx context.Context, std IO) error {
	paths := client.KubeconfigPaths(c.kubeconfig, c.main.getenv("KUBECONFIG"), c.main.getenv("HOME"))
	cfg, err := client.LoadKubeconfigFrom(paths)
	if err != nil {
		return withFix(fmt.Errorf("cannot read kubeconfig: %w", err),
			"set --kubeconfig or KUBECONFIG to the admin.kubeconfig in the server's data dir")
	}
	h, err := c.connect(c.main)
	if err != nil {
		return err
	}
	defer h.Close()
	pod, err := c.resolvePod(ctx, h, c.target)
	if err != nil {
		return err
	}
	container := c.container
	if container == "" {
		container = pod.Annotations["kubectl.kubernetes.io/default-container"]
	}
	if container == "" && len(pod.Spec.Containers) > 1 {
		fmt.Fprintf(std.Err, "Defaulted container %q out of: %s\n", pod.Spec.Containers[0].Name, containerNames(pod))
		container = pod.Spec.Containers[0].Name
	}
	return streamPodLog(ctx, cfg, pod.Namespace, pod.Name, c.query(container), std.Out)
}

// resolvePod reads the pod named by target: POD, pod/POD, or a DaemonSet
// (ds/NAME), whose first pod by name is taken, as kubectl does.
func (c *LogsCommand) resolvePod(ctx context.Context, h *client.HTTP, target string) (*corev1.Pod, error) {
	kind, name, typed := strings.Cut(target, "/")
	r := resources.Pods
	if typed {
		var err error
		if r, err = resolveKind(kind); err != nil {
			return nil, err
		}
	} else {
		name = target
	}
	switch r {
	case resources.Pods:
		obj, err := h.Get(ctx, resources.Pods, c.ns(), name)
		if err != nil {
			return nil, explainTransport(err, h.Server())
		}
		return obj.(*corev1.Pod), nil
	case resources.DaemonSets:
		obj, err := h.Get(ctx, resources.DaemonSets, c.ns(), name)
		if err != nil {
			return nil, explainTransport(err, h.Server())
		}
		ds := obj.(*appsv1.DaemonSet)
		sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
		if err != nil {
			return nil, fmt.Errorf("daemonset %s: selector: %w", name, err)
		}
		items, _, err := h.List(ctx, resources.Pods, c.ns(), client.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return nil, explainTransport(err, h.Server())
		}
		var pods []*corev1.Pod
		for _, it := range items {
			if p, ok := it.(*corev1.Pod); ok && metav1.IsControlledBy(p, ds) {
				pods = append(pods, p)
			}
		}
		if len(pods) == 0 {
			return nil, withFix(fmt.Errorf("daemonset %s has no pods", name), "check \"everynode describe ds "+name+"\"")
		}
		sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
		return pods[0], nil
	}
	return nil, usageError(fmt.Sprintf("cannot get logs of a %s", r.Singular), "name a pod or a daemonset (ds/NAME)")
}

func containerNames(p *corev1.Pod) string {
	var n []string
	for _, c := range p.Spec.Containers {
		n = append(n, c.Name)
	}
	return strings.Join(n, ", ")
}

// streamPodLog GETs pods/log and copies the answer to out as it arrives.
func streamPodLog(ctx context.Context, cfg client.Config, namespace, pod string, q url.Values, out io.Writer) error {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(cfg.CAPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(cfg.CAPEM) {
			return withFix(errors.New("the kubeconfig's CA data holds no certificate"), "use the admin.kubeconfig the server wrote")
		}
		tlsCfg.RootCAs = pool
	}
	tr := &http.Transport{TLSClientConfig: tlsCfg, ForceAttemptHTTP2: true, TLSHandshakeTimeout: 10 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second}
	defer tr.CloseIdleConnections()
	u := strings.TrimRight(cfg.Server, "/") + client.Path(resources.Pods, namespace, pod, "log")
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("logs: %w", err)
	}
	req.Header.Set("Accept", "text/plain, application/json")
	req.Header.Set("User-Agent", "everynode/"+Version())
	if cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.Token)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return explainTransport(fmt.Errorf("GET %s: %w", u, err), cfg.Server)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var st metav1.Status
		if json.Unmarshal(body, &st) == nil && st.Kind == "Status" {
			return &apierrors.StatusError{ErrStatus: st}
		}
		return fmt.Errorf("GET %s: %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
	}
	if _, err := io.Copy(out, resp.Body); err != nil && ctx.Err() == nil {
		return fmt.Errorf("reading the log stream: %w", err)
	}
	return nil
}
