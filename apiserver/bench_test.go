package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// benchPod is the object both sides of BenchmarkCreate write.
func benchPod(i int) *corev1.Pod {
	p := newPod("bench-"+strconv.Itoa(i), "node-"+strconv.Itoa(i%100))
	p.Namespace = "default"
	return p
}

// latencies summarizes a sample of durations.
type latencies []time.Duration

func (l latencies) report(b *testing.B, prefix string) {
	if len(l) == 0 {
		return
	}
	slices.Sort(l)
	var sum time.Duration
	for _, d := range l {
		sum += d
	}
	b.ReportMetric(float64(sum.Nanoseconds())/float64(len(l)), prefix+"-mean-ns")
	b.ReportMetric(float64(l[len(l)/2].Nanoseconds()), prefix+"-p50-ns")
	b.ReportMetric(float64(l[len(l)*99/100].Nanoseconds()), prefix+"-p99-ns")
}

// BenchmarkCreate measures pod creates through the API (over HTTP, and in
// process) against raw etcd puts of the same JSON in the same run; the
// api/etcd ratio is the API's overhead (decode, defaults, validation,
// namespace admission, watch-cache feed, encode).
func BenchmarkCreate(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	hc, err := client.NewHTTP(client.Config{Server: e.srv.URL, Token: adminToken, ResourceFor: resources.ForObject})
	if err != nil {
		b.Fatal(err)
	}
	defer hc.Close()
	clients := []struct {
		name string
		c    client.Interface
	}{{"http", hc}, {"local", NewLocalClient(e.s, "bench", mastersGroup)}}

	n := b.N
	b.ResetTimer()
	var etcd latencies
	start := time.Now()
	for i := range n {
		data, err := json.Marshal(benchPod(i))
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if _, err := e.st.Client().Put(ctx, "/bench/pods/default/bench-"+strconv.Itoa(i), string(data)); err != nil {
			b.Fatal(err)
		}
		etcd = append(etcd, time.Since(t0))
	}
	etcdTotal := time.Since(start)
	etcd.report(b, "etcd")
	for k, cl := range clients {
		var api latencies
		start = time.Now()
		for i := range n {
			t0 := time.Now()
			if _, err := cl.c.Create(ctx, benchPod(k*n+i), client.WriteOptions{}); err != nil {
				b.Fatal(err)
			}
			api = append(api, time.Since(t0))
		}
		total := time.Since(start)
		api.report(b, cl.name)
		b.ReportMetric(float64(total)/float64(etcdTotal), cl.name+"/etcd-ratio")
	}
}

// BenchmarkWatchFanout: 1,000 agents each watch the pods of their node over
// HTTP; each op creates a pod bound to one node and waits for that node's
// watcher to see it. The cost of an event must not grow with the number of
// watchers that do not want it.
func BenchmarkWatchFanout(b *testing.B) {
	const nodes = 1000
	e := newEnv(b)
	ctx := context.Background()
	watchers := make([]*stream, nodes)
	for i := range watchers {
		watchers[i] = openStream(b, e.srv.Client(),
			e.srv.URL+podsPath+"?watch=true&fieldSelector=spec.nodeName%3Dnode-"+strconv.Itoa(i))
	}
	lc := NewLocalClient(e.s, "bench", mastersGroup)
	var lat latencies
	b.ResetTimer()
	for i := range b.N {
		node := i % nodes
		p := newPod("fan-"+strconv.Itoa(i), "node-"+strconv.Itoa(node))
		t0 := time.Now()
		if _, err := lc.Create(ctx, p, client.WriteOptions{}); err != nil {
			b.Fatal(err)
		}
		ev := watchers[node].next()
		lat = append(lat, time.Since(t0))
		if ev.meta(b).Metadata.Name != p.Name {
			b.Fatalf("node-%d watcher saw %s, want %s", node, ev.meta(b).Metadata.Name, p.Name)
		}
	}
	b.StopTimer()
	lat.report(b, "create-to-event")
}

// BenchmarkWatchBroadcast: 1,000 watches of the same Services (a
// kubelet's Service informer on each of 1,000 nodes) over HTTP; each op
// updates one Service and waits until every watch saw it. "shared" encodes
// each event once for every stream (watchEncodings), "per-stream" once per
// stream, as before.
func BenchmarkWatchBroadcast(b *testing.B) {
	const watches = 1000
	for _, shared := range []bool{true, false} {
		name := "per-stream"
		if shared {
			name = "shared"
		}
		b.Run(name, func(b *testing.B) {
			e := newEnv(b)
			if !shared {
				e.s.watchEnc = nil
			}
			ctx := context.Background()
			lc := NewLocalClient(e.s, "bench", mastersGroup)
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "fan", Namespace: "default"},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
			obj, err := lc.Create(ctx, svc, client.WriteOptions{})
			if err != nil {
				b.Fatal(err)
			}
			streams := make([]*stream, watches)
			for i := range streams {
				streams[i] = openStream(b, e.srv.Client(), e.srv.URL+"/api/v1/namespaces/default/services?watch=true&resourceVersion="+obj.GetResourceVersion())
			}
			var lat latencies
			b.ResetTimer()
			for i := range b.N {
				cur := obj.(*corev1.Service).DeepCopy()
				cur.Labels = map[string]string{"write": strconv.Itoa(i)}
				t0 := time.Now()
				if obj, err = lc.Update(ctx, cur, client.WriteOptions{}); err != nil {
					b.Fatal(err)
				}
				for _, st := range streams {
					if ev := st.next(); ev.meta(b).Metadata.ResourceVersion != obj.GetResourceVersion() {
						b.Fatalf("a watch saw version %s, want %s", ev.meta(b).Metadata.ResourceVersion, obj.GetResourceVersion())
					}
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			lat.report(b, "write-to-all")
		})
	}
}

// BenchmarkListByNode lists one node's pods among 1,000 nodes' pods, as an
// agent does when it (re)starts.
func BenchmarkListByNode(b *testing.B) {
	const nodes = 1000
	e := newEnv(b)
	ctx := context.Background()
	lc := NewLocalClient(e.s, "bench", mastersGroup)
	for i := range nodes {
		if _, err := lc.Create(ctx, newPod("pod-"+strconv.Itoa(i), "node-"+strconv.Itoa(i)), client.WriteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		var list corev1.PodList
		e.get(fmt.Sprintf("%s?fieldSelector=spec.nodeName%%3Dnode-%d", podsPath, i%nodes)).must(b, http.StatusOK, &list)
		if len(list.Items) != 1 {
			b.Fatalf("%d pods on node-%d", len(list.Items), i%nodes)
		}
	}
}
