package apiserver

import (
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

const servicesPath = "/api/v1/namespaces/default/services"

func svcBody(name, typ, clusterIP string, nodePort int) string {
	ip := ""
	if clusterIP != "" {
		ip = `,"clusterIP":"` + clusterIP + `"`
	}
	np := ""
	if nodePort != 0 {
		np = `,"nodePort":` + strconv.Itoa(nodePort)
	}
	return `{"apiVersion":"v1","kind":"Service","metadata":{"name":"` + name + `"},"spec":{"type":"` + typ + `"` + ip +
		`,"selector":{"app":"x"},"ports":[{"port":80` + np + `}]}}`
}

// TestServiceAllocation: a Service gets a cluster IP from the service range
// and NodePort ports a node port, as kube-apiserver allocates them; no two
// Services get the same; a requested one must be in range and free (422
// otherwise, nothing stored); an update that leaves them out keeps them; a
// dry run reserves nothing; a headless or ExternalName Service gets none.
func TestServiceAllocation(t *testing.T) {
	e := newEnv(t)
	create := func(body string) (corev1.Service, resp) {
		var svc corev1.Service
		r := e.do(req{method: "POST", path: servicesPath, body: body})
		if r.code == http.StatusCreated {
			r.must(t, http.StatusCreated, &svc)
		}
		return svc, r
	}
	cidr := netip.MustParsePrefix(serviceCIDR)
	a, _ := create(svcBody("a", "ClusterIP", "", 0))
	b, _ := create(svcBody("b", "NodePort", "", 0))
	for _, s := range []corev1.Service{a, b} {
		ip, err := netip.ParseAddr(s.Spec.ClusterIP)
		if err != nil || !cidr.Contains(ip) || len(s.Spec.ClusterIPs) != 1 || s.Spec.ClusterIPs[0] != s.Spec.ClusterIP {
			t.Fatalf("%s: clusterIP %q clusterIPs %v, want one address of %s", s.Name, s.Spec.ClusterIP, s.Spec.ClusterIPs, serviceCIDR)
		}
		if len(s.Spec.IPFamilies) != 1 || s.Spec.IPFamilies[0] != corev1.IPv4Protocol ||
			s.Spec.IPFamilyPolicy == nil || *s.Spec.IPFamilyPolicy != corev1.IPFamilyPolicySingleStack {
			t.Errorf("%s: ipFamilies %v policy %v", s.Name, s.Spec.IPFamilies, s.Spec.IPFamilyPolicy)
		}
	}
	if a.Spec.ClusterIP == b.Spec.ClusterIP {
		t.Fatalf("two Services share %s", a.Spec.ClusterIP)
	}
	if p := b.Spec.Ports[0].NodePort; p < 30000 || p > 32767 {
		t.Errorf("node port %d", p)
	}
	if a.Spec.Ports[0].NodePort != 0 {
		t.Errorf("a ClusterIP Service got node port %d", a.Spec.Ports[0].NodePort)
	}

	// Taken, out of range: 422 with kube-apiserver's message, nothing stored.
	for _, tc := range []struct{ body, msg string }{
		{svcBody("c", "ClusterIP", a.Spec.ClusterIP, 0), "provided IP is already allocated"},
		{svcBody("c", "ClusterIP", "192.168.1.1", 0), "provided IP is not in the valid range. The range of valid IPs is 10.43.0.0/16"},
		{svcBody("c", "NodePort", "", int(b.Spec.Ports[0].NodePort)), "provided port is already allocated"},
		{svcBody("c", "NodePort", "", 8080), "provided port is not in the valid range. The range of valid ports is 30000-32767"},
	} {
		_, r := create(tc.body)
		if st := r.status(t); r.code != http.StatusUnprocessableEntity || !strings.Contains(st.Message, tc.msg) {
			t.Errorf("got %d %q, want 422 with %q", r.code, st.Message, tc.msg)
		}
		e.get(servicesPath+"/c").must(t, http.StatusNotFound, nil)
	}

	// A dry run allocates nothing: the same address is free afterwards.
	const want = "10.43.7.7"
	var dry corev1.Service
	e.do(req{method: "POST", path: servicesPath + "?dryRun=All", body: svcBody("d", "ClusterIP", want, 0)}).must(t, http.StatusCreated, &dry)
	if dry.Spec.ClusterIP != want {
		t.Errorf("dry run: clusterIP %q", dry.Spec.ClusterIP)
	}
	d, r := create(svcBody("d", "ClusterIP", want, 0))
	if r.code != http.StatusCreated || d.Spec.ClusterIP != want {
		t.Fatalf("after a dry run: %d %s", r.code, r.body)
	}

	// A PUT without the allocated values keeps them (kubectl replace of
	// a manifest that never had them).
	var upd corev1.Service
	put := strings.Replace(svcBody("b", "NodePort", "", 0), `"name":"b"`, `"name":"b","resourceVersion":"`+b.ResourceVersion+`"`, 1)
	e.do(req{method: "PUT", path: servicesPath + "/b", body: put}).must(t, http.StatusOK, &upd)
	if upd.Spec.ClusterIP != b.Spec.ClusterIP || upd.Spec.Ports[0].NodePort != b.Spec.Ports[0].NodePort {
		t.Errorf("update lost allocations: %q %d, had %q %d", upd.Spec.ClusterIP, upd.Spec.Ports[0].NodePort,
			b.Spec.ClusterIP, b.Spec.Ports[0].NodePort)
	}

	h, _ := create(svcBody("headless", "ClusterIP", "None", 0))
	if h.Spec.ClusterIP != "None" || len(h.Spec.ClusterIPs) != 1 || h.Spec.ClusterIPs[0] != "None" {
		t.Errorf("headless: %q %v", h.Spec.ClusterIP, h.Spec.ClusterIPs)
	}
	x, _ := create(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"ext"},"spec":{"type":"ExternalName","externalName":"example.com"}}`)
	if x.Spec.ClusterIP != "" || len(x.Spec.ClusterIPs) != 0 {
		t.Errorf("ExternalName got %q", x.Spec.ClusterIP)
	}
}

// TestServiceAllocationReclaim: an address whose Service was deleted, or
// whose reservation is left from a create that failed, is handed out again
// once its reservation is old; a fresh reservation is respected.
func TestServiceAllocationReclaim(t *testing.T) {
	e := newEnv(t)
	const ip = "10.43.9.9"
	e.do(req{method: "POST", path: servicesPath, body: svcBody("a", "ClusterIP", ip, 0)}).must(t, http.StatusCreated, nil)
	e.do(req{method: "DELETE", path: servicesPath + "/a"}).must(t, http.StatusOK, nil)
	// Freshly reserved (by a create still in flight, say): not yet free.
	if _, err := e.st.Client().Put(testCtx(t), serviceIPPrefix+ip, "default/gone@"+strconv.FormatInt(time.Now().UnixNano(), 10)); err != nil {
		t.Fatal(err)
	}
	r := e.do(req{method: "POST", path: servicesPath, body: svcBody("b", "ClusterIP", ip, 0)})
	if r.code != http.StatusUnprocessableEntity {
		t.Fatalf("a fresh reservation was taken: %d %s", r.code, r.body)
	}
	// Old and held by no Service: reclaimed.
	old := time.Now().Add(-2 * reservationGrace).UnixNano()
	if _, err := e.st.Client().Put(testCtx(t), serviceIPPrefix+ip, "default/a@"+strconv.FormatInt(old, 10)); err != nil {
		t.Fatal(err)
	}
	e.do(req{method: "POST", path: servicesPath, body: svcBody("b", "ClusterIP", ip, 0)}).must(t, http.StatusCreated, nil)
	// Old but its Service still holds it: refused.
	if _, err := e.st.Client().Put(testCtx(t), serviceIPPrefix+ip, "default/b@"+strconv.FormatInt(old, 10)); err != nil {
		t.Fatal(err)
	}
	r = e.do(req{method: "POST", path: servicesPath, body: svcBody("c", "ClusterIP", ip, 0)})
	if r.code != http.StatusUnprocessableEntity {
		t.Fatalf("an address in use was reclaimed: %d %s", r.code, r.body)
	}
}
