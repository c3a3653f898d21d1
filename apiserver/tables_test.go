package apiserver

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"

// getTable GETs path with kubectl's human-readable Accept and decodes a Table.
func (e *env) getTable(path, accept string) metav1.Table {
	e.t.Helper()
	hr, err := http.NewRequest("GET", e.srv.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	hr.Header.Set("Authorization", "Bearer "+adminToken)
	hr.Header.Set("Accept", accept)
	res, err := e.srv.Client().Do(hr)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	var tbl metav1.Table
	if res.StatusCode != http.StatusOK {
		e.t.Fatalf("GET %s: code %d", path, res.StatusCode)
	}
	if err := json.NewDecoder(res.Body).Decode(&tbl); err != nil {
		e.t.Fatalf("decode Table: %v", err)
	}
	return tbl
}

func columnNames(t metav1.Table) (names []string, wide []string) {
	for _, c := range t.ColumnDefinitions {
		if c.Priority > 0 {
			wide = append(wide, c.Name)
		} else {
			names = append(names, c.Name)
		}
	}
	return names, wide
}

func rowMeta(t testing.TB, row metav1.TableRow) metav1.PartialObjectMetadata {
	t.Helper()
	var m metav1.PartialObjectMetadata
	if err := json.Unmarshal(row.Object.Raw, &m); err != nil {
		t.Fatalf("decode row object %s: %v", row.Object.Raw, err)
	}
	return m
}

func TestTablePerResource(t *testing.T) {
	e := newEnv(t)
	ds := e.createDS(newDS("agent"))
	e.createPod(newPod("agent-x", ""))
	e.do(req{method: "POST", path: "/api/v1/nodes", body: `{"apiVersion":"v1","kind":"Node","metadata":{"name":"node-1","labels":{"node-role.kubernetes.io/master":""}},"spec":{"unschedulable":true}}`}).must(t, http.StatusCreated, nil)
	cr := &appsv1.ControllerRevision{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ControllerRevision"},
		ObjectMeta: metav1.ObjectMeta{Name: "agent-1", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: ds.UID, Controller: ptr.To(true)}}},
		Data:     runtime.RawExtension{Raw: []byte(`{"spec":{}}`)},
		Revision: 1,
	}
	e.do(req{method: "POST", path: "/apis/apps/v1/namespaces/default/controllerrevisions", body: toJSON(t, cr)}).must(t, http.StatusCreated, nil)
	ev := &corev1.Event{
		TypeMeta:       metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
		ObjectMeta:     metav1.ObjectMeta{Name: "agent.1"},
		InvolvedObject: corev1.ObjectReference{Kind: "DaemonSet", Name: "agent", Namespace: "default"},
		Reason:         "SuccessfulCreate", Type: "Normal", Message: "Created pod: agent-x",
		Source: corev1.EventSource{Component: "daemonset-controller"},
		// Half an hour ago prints as "30m" for a whole minute: a timestamp of now
		// printed as "1s" when the second turned between the create and the GET.
		FirstTimestamp: metav1.NewTime(time.Now().Add(-time.Hour)), LastTimestamp: metav1.NewTime(time.Now().Add(-30 * time.Minute)), Count: 2,
	}
	e.do(req{method: "POST", path: "/api/v1/namespaces/default/events", body: toJSON(t, ev)}).must(t, http.StatusCreated, nil)

	tests := []struct {
		path       string
		cols, wide []string
		cells      []any // leading cells to check (JSON-decoded: numbers are float64)
	}{
		{dsPath, []string{"Name", "Desired", "Current", "Ready", "Up-to-date", "Available", "Node Selector", "Age"},
			[]string{"Containers", "Images", "Selector"}, []any{"agent", 0.0, 0.0, 0.0, 0.0, 0.0, "<none>"}},
		{podsPath, []string{"Name", "Ready", "Status", "Restarts", "Age"},
			[]string{"IP", "Node", "Nominated Node", "Readiness Gates"}, []any{"agent-x", "0/1", "Pending", "0"}},
		{"/api/v1/nodes", []string{"Name", "Status", "Roles", "Age", "Version"},
			[]string{"Internal-IP", "External-IP", "OS-Image", "Kernel-Version", "Container-Runtime"},
			[]any{"node-1", "Unknown,SchedulingDisabled", "master"}},
		{"/apis/apps/v1/namespaces/default/controllerrevisions", []string{"Name", "Controller", "Revision", "Age"}, nil,
			[]any{"agent-1", "daemonset.apps/agent", 1.0}},
		{"/api/v1/namespaces", []string{"Name", "Status", "Age"}, nil, []any{"default", "Active"}},
		{"/api/v1/namespaces/default/events", []string{"Last Seen", "Type", "Reason", "Object", "Message"},
			[]string{"Subobject", "Source", "First Seen", "Count", "Name"}, []any{"30m", "Normal", "SuccessfulCreate", "daemonset/agent", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			tbl := e.getTable(tt.path, tableAccept)
			if tbl.Kind != "Table" || tbl.APIVersion != "meta.k8s.io/v1" || tbl.ResourceVersion == "" {
				t.Fatalf("kind %q apiVersion %q resourceVersion %q", tbl.Kind, tbl.APIVersion, tbl.ResourceVersion)
			}
			cols, wide := columnNames(tbl)
			if toJSON(t, cols) != toJSON(t, tt.cols) || toJSON(t, wide) != toJSON(t, tt.wide) {
				t.Fatalf("columns %v wide %v, want %v %v", cols, wide, tt.cols, tt.wide)
			}
			if len(tbl.Rows) == 0 {
				t.Fatal("no rows")
			}
			row := tbl.Rows[0]
			if len(row.Cells) != len(tbl.ColumnDefinitions) {
				t.Fatalf("%d cells for %d columns", len(row.Cells), len(tbl.ColumnDefinitions))
			}
			for i, want := range tt.cells {
				if want == "" {
					continue
				}
				if row.Cells[i] != want {
					t.Errorf("cell %d (%s) = %#v, want %#v", i, tbl.ColumnDefinitions[i].Name, row.Cells[i], want)
				}
			}
			m := rowMeta(t, row)
			if m.Kind != "PartialObjectMetadata" || m.APIVersion != "meta.k8s.io/v1" || m.Name == "" || m.UID == "" {
				t.Fatalf("row object %s", row.Object.Raw)
			}
		})
	}
}

func TestTableWideCellsAndObjects(t *testing.T) {
	e := newEnv(t)
	ds := newDS("agent")
	ds.Spec.Template.Spec.NodeSelector = map[string]string{"tier": "edge"}
	e.createDS(ds)

	tbl := e.getTable(dsPath+"/agent", "application/json;as=Table;v=v1beta1;g=meta.k8s.io")
	if tbl.APIVersion != "meta.k8s.io/v1beta1" || len(tbl.Rows) != 1 {
		t.Fatalf("apiVersion %q rows %d", tbl.APIVersion, len(tbl.Rows))
	}
	got := tbl.Rows[0].Cells
	// Age counts whole seconds since the create: the second may turn before the GET.
	if age, _ := got[7].(string); age == "1s" || age == "2s" {
		got[7] = "0s"
	}
	want := []any{"agent", 0.0, 0.0, 0.0, 0.0, 0.0, "tier=edge", "0s", "c", "busybox:1.36", "app=agent"}
	if toJSON(t, got) != toJSON(t, want) {
		t.Fatalf("cells %v, want %v", got, want)
	}
	if m := rowMeta(t, tbl.Rows[0]); m.Labels["app"] != "agent" || m.Namespace != "default" {
		t.Fatalf("row metadata %+v", m.ObjectMeta)
	}

	full := e.getTable(dsPath+"?includeObject=Object", tableAccept)
	var obj appsv1.DaemonSet
	if err := json.Unmarshal(full.Rows[0].Object.Raw, &obj); err != nil || obj.Kind != "DaemonSet" || obj.Spec.Template.Spec.Containers[0].Image != "busybox:1.36" {
		t.Fatalf("includeObject=Object row: %s (%v)", full.Rows[0].Object.Raw, err)
	}
	none := e.getTable(dsPath+"?includeObject=None", tableAccept)
	if none.Rows[0].Object.Raw != nil {
		t.Fatalf("includeObject=None row object %s", none.Rows[0].Object.Raw)
	}
	e.do(req{method: "GET", path: dsPath + "?includeObject=Bogus"}).must(t, http.StatusOK, nil) // ignored without a Table Accept

	// Plain JSON Accept keeps returning objects and lists.
	var list appsv1.DaemonSetList
	e.get(dsPath).must(t, http.StatusOK, &list)
	if list.Kind != "DaemonSetList" || len(list.Items) != 1 {
		t.Fatalf("plain list %+v", list.TypeMeta)
	}
}

func TestTablePodStatusAndRestarts(t *testing.T) {
	e := newEnv(t)
	p := e.createPod(newPod("agent-x", "node-1"))
	p.Status = corev1.PodStatus{
		Phase:  corev1.PodRunning,
		PodIPs: []corev1.PodIP{{IP: "10.0.0.7"}}, PodIP: "10.0.0.7",
		ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Ready: true, RestartCount: 2, Image: "busybox:1.36",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 1, FinishedAt: metav1.NewTime(time.Now().Add(-5 * time.Minute))}}}},
	}
	e.do(req{method: "PUT", path: podsPath + "/agent-x/status", body: toJSON(t, p)}).must(t, http.StatusOK, nil)
	tbl := e.getTable(podsPath, tableAccept)
	want := []any{"agent-x", "1/1", "Running", "2 (5m ago)"}
	if got := tbl.Rows[0].Cells[:4]; toJSON(t, got) != toJSON(t, want) {
		t.Fatalf("cells %v, want %v", got, want)
	}
	if got := tbl.Rows[0].Cells[5:]; toJSON(t, got) != toJSON(t, []any{"10.0.0.7", "node-1", "<none>", "<none>"}) {
		t.Fatalf("wide cells %v", got)
	}
}

func TestTableWatchEvents(t *testing.T) {
	e := newEnv(t)
	e.createDS(newDS("agent"))
	tbl := e.getTable(dsPath, tableAccept)

	hr, err := http.NewRequest("GET", e.srv.URL+dsPath+"?watch=true&resourceVersion=0", nil)
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("Authorization", "Bearer "+adminToken)
	hr.Header.Set("Accept", tableAccept)
	res, err := e.srv.Client().Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	dec := json.NewDecoder(res.Body)
	next := func() (string, metav1.Table) {
		t.Helper()
		var ev struct {
			Type   string       `json:"type"`
			Object metav1.Table `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("decode event: %v", err)
		}
		return ev.Type, ev.Object
	}
	typ, first := next()
	if typ != "ADDED" || first.Kind != "Table" || len(first.ColumnDefinitions) != 11 || len(first.Rows) != 1 || first.Rows[0].Cells[0] != "agent" {
		t.Fatalf("first event %s %+v", typ, first)
	}
	if m := rowMeta(t, first.Rows[0]); m.Kind != "PartialObjectMetadata" || m.Name != "agent" {
		t.Fatalf("row object %s", first.Rows[0].Object.Raw)
	}
	e.do(req{method: "PATCH", path: dsPath + "/agent", contentType: "application/merge-patch+json",
		body: `{"metadata":{"labels":{"x":"y"}}}`}).must(t, http.StatusOK, nil)
	typ, second := next()
	if typ != "MODIFIED" || len(second.Rows) != 1 || rowMeta(t, second.Rows[0]).Labels["x"] != "y" {
		t.Fatalf("second event %s %+v", typ, second)
	}
	if tbl.ResourceVersion == "" {
		t.Fatal("list Table without resourceVersion")
	}
}
