package apiserver

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// latencyBuckets are the histogram upper bounds in seconds, from 1 ms (an
// in-memory watch-cache list) to 60 s (a stuck etcd).
func latencyBuckets() []float64 {
	return []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
}

// metrics holds what /metrics reports, on a registry the Server owns (no
// global default registry), with the Go runtime and process collectors every
// exporter registers. Safe for concurrent use.
type metrics struct {
	reg     *prometheus.Registry
	reqs    *prometheus.CounterVec   // verb, resource, code
	reqLat  *prometheus.HistogramVec // verb, resource
	stLat   *prometheus.HistogramVec // operation, type
	watches prometheus.Gauge         // open watch streams, HTTP and in process
	http    http.Handler             // serves reg
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		reqs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "apiserver_request_total",
			Help: "Counter of API requests by verb, resource and HTTP response code.",
		}, []string{"verb", "resource", "code"}),
		reqLat: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "apiserver_request_duration_seconds",
			Help:    "Latency of API requests (watches excluded) by verb and resource, in seconds.",
			Buckets: latencyBuckets(),
		}, []string{"verb", "resource"}),
		stLat: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "etcd_request_duration_seconds",
			Help:    "Latency of store (etcd and watch cache) calls by operation and resource, in seconds.",
			Buckets: latencyBuckets(),
		}, []string{"operation", "type"}),
		watches: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "apiserver_current_watches",
			Help: "Number of open watch streams.",
		}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.reqs, m.reqLat, m.stLat, m.watches,
	)
	m.http = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
	return m
}

// observeRequest records one finished HTTP request. Watches are counted but
// not timed: their duration is the client's choice.
func (m *metrics) observeRequest(verb, resource string, code int, d time.Duration) {
	m.reqs.WithLabelValues(verb, resource, strconv.Itoa(code)).Inc()
	if verb != "watch" {
		m.reqLat.WithLabelValues(verb, resource).Observe(d.Seconds())
	}
}

func (m *metrics) observeStore(op, resource string, d time.Duration) {
	m.stLat.WithLabelValues(op, resource).Observe(d.Seconds())
}

func (m *metrics) watchStarted() { m.watches.Inc() }
func (m *metrics) watchEnded()   { m.watches.Dec() }

// serveMetrics serves the registry in the exposition format the scraper
// negotiates (Prometheus text by default).
func (s *Server) serveMetrics(w http.ResponseWriter, req *http.Request) {
	setScope(req.Context(), "get", "")
	s.metrics.http.ServeHTTP(w, req)
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

// ListCached and GetCached read the watch cache, not etcd: not timed.
func (i *instrumentedStore) ListCached(ctx context.Context, r *resources.Resource, namespace string, sel store.Selector) ([]resources.Object, int64, error) {
	return i.st.ListCached(ctx, r, namespace, sel)
}

func (i *instrumentedStore) GetCached(ctx context.Context, r *resources.Resource, namespace, name string) (resources.Object, error) {
	return i.st.GetCached(ctx, r, namespace, name)
}

func (i *instrumentedStore) Watch(ctx context.Context, r *resources.Resource, namespace string, rv int64, sel store.Selector) (*store.Watcher, error) {
	defer i.done("watch", r, time.Now())
	return i.st.Watch(ctx, r, namespace, rv, sel)
}
