package apiserver

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/watch"

	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// latencyBuckets are the histogram upper bounds in seconds, from 1 ms (an
// in-memory watch-cache list) to 60 s (a stuck etcd).
func latencyBuckets() []float64 {
	return []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
}

// histogram is a cumulative Prometheus histogram.
type histogram struct {
	counts []uint64 // per bucket, not cumulative; len(bounds)+1 with +Inf last
	sum    float64
	count  uint64
}

type requestKey struct {
	verb, resource string
	code           int
}

type latencyKey struct{ a, b string }

// metrics counts what /metrics reports. Safe for concurrent use.
type metrics struct {
	bounds []float64
	mu     sync.Mutex
	reqs   map[requestKey]uint64
	reqLat map[latencyKey]*histogram // verb, resource
	stLat  map[latencyKey]*histogram // operation, resource
	// watches is the number of open watch streams (HTTP and in process).
	watches atomic.Int64
}

func newMetrics() *metrics {
	return &metrics{
		bounds: latencyBuckets(),
		reqs:   map[requestKey]uint64{},
		reqLat: map[latencyKey]*histogram{},
		stLat:  map[latencyKey]*histogram{},
	}
}

func (m *metrics) observe(hs map[latencyKey]*histogram, k latencyKey, d time.Duration) {
	h := hs[k]
	if h == nil {
		h = &histogram{counts: make([]uint64, len(m.bounds)+1)}
		hs[k] = h
	}
	sec := d.Seconds()
	i, _ := slices.BinarySearch(m.bounds, sec)
	h.counts[i]++
	h.sum += sec
	h.count++
}

// observeRequest records one finished HTTP request. Watches are counted but
// not timed: their duration is the client's choice.
func (m *metrics) observeRequest(verb, resource string, code int, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reqs[requestKey{verb, resource, code}]++
	if verb != "watch" {
		m.observe(m.reqLat, latencyKey{verb, resource}, d)
	}
}

func (m *metrics) observeStore(op, resource string, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.observe(m.stLat, latencyKey{op, resource}, d)
}

func (m *metrics) watchStarted() { m.watches.Add(1) }
func (m *metrics) watchEnded()   { m.watches.Add(-1) }

// write renders the metrics in the Prometheus text exposition format.
func (m *metrics) write(w *bufio.Writer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	fmt.Fprintln(w, "# HELP apiserver_request_total Counter of API requests by verb, resource and HTTP response code.")
	fmt.Fprintln(w, "# TYPE apiserver_request_total counter")
	keys := make([]requestKey, 0, len(m.reqs))
	for k := range m.reqs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b requestKey) int {
		return cmp.Or(cmp.Compare(a.verb, b.verb), cmp.Compare(a.resource, b.resource), cmp.Compare(a.code, b.code))
	})
	for _, k := range keys {
		fmt.Fprintf(w, "apiserver_request_total{verb=%s,resource=%s,code=\"%d\"} %d\n",
			quoteLabel(k.verb), quoteLabel(k.resource), k.code, m.reqs[k])
	}
	m.writeHistograms(w, "apiserver_request_duration_seconds",
		"Latency of API requests (watches excluded) by verb and resource, in seconds.", "verb", "resource", m.reqLat)
	fmt.Fprintln(w, "# HELP apiserver_current_watches Number of open watch streams.")
	fmt.Fprintln(w, "# TYPE apiserver_current_watches gauge")
	fmt.Fprintf(w, "apiserver_current_watches %d\n", m.watches.Load())
	m.writeHistograms(w, "etcd_request_duration_seconds",
		"Latency of store (etcd and watch cache) calls by operation and resource, in seconds.", "operation", "type", m.stLat)
}

func (m *metrics) writeHistograms(w *bufio.Writer, name, help, la, lb string, hs map[latencyKey]*histogram) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
	keys := make([]latencyKey, 0, len(hs))
	for k := range hs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y latencyKey) int { return cmp.Or(cmp.Compare(x.a, y.a), cmp.Compare(x.b, y.b)) })
	for _, k := range keys {
		h := hs[k]
		labels := fmt.Sprintf("%s=%s,%s=%s", la, quoteLabel(k.a), lb, quoteLabel(k.b))
		var cum uint64
		for i, bound := range m.bounds {
			cum += h.counts[i]
			fmt.Fprintf(w, "%s_bucket{%s,le=\"%s\"} %d\n", name, labels, strconv.FormatFloat(bound, 'g', -1, 64), cum)
		}
		fmt.Fprintf(w, "%s_bucket{%s,le=\"+Inf\"} %d\n", name, labels, h.count)
		fmt.Fprintf(w, "%s_sum{%s} %s\n", name, labels, strconv.FormatFloat(h.sum, 'g', -1, 64))
		fmt.Fprintf(w, "%s_count{%s} %d\n", name, labels, h.count)
	}
}

// quoteLabel quotes a label value as the exposition format wants.
func quoteLabel(v string) string {
	v = strings.ReplaceAll(v, `\`, `\\`)
	v = strings.ReplaceAll(v, "\n", `\n`)
	return `"` + strings.ReplaceAll(v, `"`, `\"`) + `"`
}

func (s *Server) serveMetrics(w http.ResponseWriter, req *http.Request) {
	setScope(req.Context(), "get", "")
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	bw := bufio.NewWriter(w)
	s.metrics.write(bw)
	_ = bw.Flush()
}

// instrumentedStore times every store call for etcd_request_duration_seconds.
type instrumentedStore struct {
	st *store.Store
	m  *metrics
}

func (i *instrumentedStore) done(op string, r *resources.Resource, start time.Time) {
	i.m.observeStore(op, r.Name, time.Since(start))
}

func (i *instrumentedStore) Create(ctx context.Context, r *resources.Resource, obj resources.Object) (resources.Object, error) {
	defer i.done("create", r, time.Now())
	return i.st.Create(ctx, r, obj)
}

func (i *instrumentedStore) Get(ctx context.Context, r *resources.Resource, namespace, name string) (resources.Object, error) {
	defer i.done("get", r, time.Now())
	return i.st.Get(ctx, r, namespace, name)
}

func (i *instrumentedStore) Update(ctx context.Context, r *resources.Resource, obj resources.Object) (resources.Object, error) {
	defer i.done("update", r, time.Now())
	return i.st.Update(ctx, r, obj)
}

func (i *instrumentedStore) GuaranteedUpdate(ctx context.Context, r *resources.Resource, namespace, name string,
	try func(cur resources.Object) (resources.Object, error)) (resources.Object, error) {
	defer i.done("guaranteedUpdate", r, time.Now())
	return i.st.GuaranteedUpdate(ctx, r, namespace, name, try)
}

func (i *instrumentedStore) Delete(ctx context.Context, r *resources.Resource, namespace, name string, pre *store.Preconditions) (resources.Object, error) {
	defer i.done("delete", r, time.Now())
	return i.st.Delete(ctx, r, namespace, name, pre)
}

func (i *instrumentedStore) List(ctx context.Context, r *resources.Resource, namespace string, sel store.Selector) ([]resources.Object, int64, error) {
	defer i.done("list", r, time.Now())
	return i.st.List(ctx, r, namespace, sel)
}

func (i *instrumentedStore) Watch(ctx context.Context, r *resources.Resource, namespace string, rv int64, sel store.Selector) (watch.Interface, error) {
	defer i.done("watch", r, time.Now())
	return i.st.Watch(ctx, r, namespace, rv, sel)
}
