package apiserver

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/everynode/everynode/internal/testkit"
)

// scrape fetches /metrics with the test token and parses it with the
// Prometheus text parser, as a scraper would.
func scrape(t *testing.T, e *env) map[string]*dto.MetricFamily {
	t.Helper()
	r := e.get("/metrics").must(t, http.StatusOK, nil)
	if ct := r.header.Get("Content-Type"); !bytes.HasPrefix([]byte(ct), []byte("text/plain")) {
		t.Errorf("Content-Type %q", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(r.body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, r.body)
	}
	return fams
}

// sample returns the metric of family name whose labels are exactly want, or nil.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) != len(want) {
			continue
		}
		for _, l := range m.GetLabel() {
			if v, ok := want[l.GetName()]; !ok || v != l.GetValue() {
				continue next
			}
		}
		return m
	}
	return nil
}

// TestMetrics: /metrics parses as Prometheus text; the API server's families
// and the Go and process collectors' are there with their types; requests
// move the request counter and the latency histograms.
func TestMetrics(t *testing.T) {
	e := newEnv(t)
	e.createDS(newDS("agent"))
	e.get(dsPath + "/agent")
	e.get(dsPath + "/missing")
	fams := scrape(t, e)
	for name, typ := range map[string]dto.MetricType{
		"apiserver_request_total":            dto.MetricType_COUNTER,
		"apiserver_request_duration_seconds": dto.MetricType_HISTOGRAM,
		"apiserver_current_watches":          dto.MetricType_GAUGE,
		"etcd_request_duration_seconds":      dto.MetricType_HISTOGRAM,
		"go_goroutines":                      dto.MetricType_GAUGE,
		"go_memstats_alloc_bytes":            dto.MetricType_GAUGE,
		"process_cpu_seconds_total":          dto.MetricType_COUNTER,
		"process_resident_memory_bytes":      dto.MetricType_GAUGE,
	} {
		f := fams[name]
		if f == nil {
			t.Errorf("no family %s", name)
			continue
		}
		if f.GetType() != typ {
			t.Errorf("%s is a %v, want %v", name, f.GetType(), typ)
		}
	}
	count := func(fams map[string]*dto.MetricFamily, verb, code string) float64 {
		m := sample(fams, "apiserver_request_total", map[string]string{"verb": verb, "resource": "daemonsets", "code": code})
		if m == nil {
			return 0
		}
		return m.GetCounter().GetValue()
	}
	if n := count(fams, "create", "201"); n != 1 {
		t.Errorf("create daemonsets 201: %v, want 1", n)
	}
	if n := count(fams, "get", "404"); n != 1 {
		t.Errorf("get daemonsets 404: %v, want 1", n)
	}
	if m := sample(fams, "apiserver_request_duration_seconds", map[string]string{"verb": "get", "resource": "daemonsets"}); m == nil || m.GetHistogram().GetSampleCount() != 2 {
		t.Errorf("get daemonsets latency: %v, want 2 samples", m)
	}
	if m := sample(fams, "etcd_request_duration_seconds", map[string]string{"operation": "create", "type": "daemonsets"}); m == nil || m.GetHistogram().GetSampleCount() != 1 {
		t.Errorf("store create daemonsets latency: %v, want 1 sample", m)
	}
	if m := sample(fams, "apiserver_current_watches", map[string]string{}); m == nil || m.GetGauge().GetValue() != 0 {
		t.Errorf("open watches: %v, want 0", m)
	}

	// One more request moves the counter by one.
	e.get(dsPath + "/missing")
	if n := count(scrape(t, e), "get", "404"); n != 2 {
		t.Errorf("get daemonsets 404 after one more: %v, want 2", n)
	}
}

// openWatches reads the open-watch gauge.
func openWatches(t *testing.T, e *env) float64 {
	t.Helper()
	var m dto.Metric
	if err := e.s.metrics.watches.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// TestWatchCountMetric: open watches are counted and uncounted.
func TestWatchCountMetric(t *testing.T) {
	e := newEnv(t)
	w := e.watch(podsPath + "?watch=true&timeoutSeconds=1")
	if n := openWatches(t, e); n != 1 {
		t.Errorf("watches %v while one is open", n)
	}
	w.waitEnd(10 * time.Second)
	testkit.EventuallyTrue(t, 5*time.Second, "the watch count to drop to 0", func() bool { return openWatches(t, e) == 0 })
}
