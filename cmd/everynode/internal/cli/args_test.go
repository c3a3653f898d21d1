package cli

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/everynode/everynode/resources"
)

var discard = IO{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard}

func TestParseGet(t *testing.T) {
	tests := []struct {
		args     string
		r        *resources.Resource
		names    []string
		ns       string
		all      bool
		output   string
		selector string
		watch    bool
		wantErr  string
	}{
		{args: "ds", r: resources.DaemonSets, ns: "default"},
		{args: "daemonsets.apps -A", r: resources.DaemonSets, ns: "default", all: true},
		{args: "ds agent -n kube-system -o wide", r: resources.DaemonSets, names: []string{"agent"}, ns: "kube-system", output: "wide"},
		{args: "-n kube-system po -owide", r: resources.Pods, ns: "kube-system", output: "wide"},
		{args: "ds/a ds/b -oyaml", r: resources.DaemonSets, names: []string{"a", "b"}, ns: "default", output: "yaml"},
		{args: "no -l node-role.kubernetes.io/edge= -w", r: resources.Nodes, ns: "default", selector: "node-role.kubernetes.io/edge=", watch: true},
		{args: "Namespace --all-namespaces --output=json", r: resources.Namespaces, ns: "default", all: true, output: "json"},
		{args: "ev -nfoo", r: resources.Events, ns: "foo"},
		{args: "controllerrevisions -- -x", r: resources.ControllerRevisions, names: []string{"-x"}, ns: "default"},
		{args: "", wantErr: "you must specify the type of resource"},
		{args: "widgets", wantErr: `the server doesn't have a resource type "widgets"`},
		{args: "ds.batch", wantErr: `resource type "ds.batch"`},
		{args: "ds -o table", wantErr: "unable to match a printer"},
		{args: "ds a -l x=y", wantErr: "name cannot be provided when a selector"},
		{args: "ds po/x", wantErr: "mixed kinds"},
		{args: "ds --bogus", wantErr: "unknown flag: --bogus"},
	}
	for _, tt := range tests {
		t.Run(tt.args, func(t *testing.T) {
			c := &GetCommand{main: NewMain()}
			err := parse(c, strings.Fields(tt.args))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.r != tt.r || !slices.Equal(c.names, tt.names) || c.ns() != tt.ns || c.allNamespaces != tt.all ||
				c.output != tt.output || c.selector != tt.selector || c.watch != tt.watch {
				t.Fatalf("parsed r=%v names=%q ns=%q all=%v o=%q l=%q w=%v", c.r.Name, c.names, c.ns(), c.allNamespaces, c.output, c.selector, c.watch)
			}
		})
	}
}

func TestParseDelete(t *testing.T) {
	tests := []struct {
		args    string
		policy  metav1.DeletionPropagation
		names   []string
		wait    bool
		wantErr string
	}{
		{args: "ds agent", policy: metav1.DeletePropagationBackground, names: []string{"agent"}, wait: true},
		{args: "ds a b --cascade=foreground", policy: metav1.DeletePropagationForeground, names: []string{"a", "b"}, wait: true},
		{args: "ds a --cascade orphan --wait=false", policy: metav1.DeletePropagationOrphan, names: []string{"a"}},
		{args: "ds a --cascade=false", policy: metav1.DeletePropagationOrphan, names: []string{"a"}, wait: true},
		{args: "po -l app=x", policy: metav1.DeletePropagationBackground, wait: true},
		{args: "ds", wantErr: "resource name may not be empty"},
		{args: "ds a --cascade=sideways", wantErr: "invalid --cascade"},
		{args: "", wantErr: "must specify the type"},
	}
	for _, tt := range tests {
		t.Run(tt.args, func(t *testing.T) {
			c := &DeleteCommand{main: NewMain()}
			err := parse(c, strings.Fields(tt.args))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.policy != tt.policy || !slices.Equal(c.names, tt.names) || c.wait != tt.wait {
				t.Fatalf("parsed policy=%s names=%q wait=%v", c.policy, c.names, c.wait)
			}
		})
	}
}

func TestParseServer(t *testing.T) {
	c := &ServerCommand{}
	if err := parse(c, strings.Fields("--data-dir /d --listen :0 --gossip 0.0.0.0:7946 --no-agent --log-level debug --etcd-endpoints http://a:2379,http://b:2379 --event-ttl 90m")); err != nil {
		t.Fatal(err)
	}
	if c.dataDir != "/d" || c.listen != ":0" || !c.noAgent || c.level.String() != "DEBUG" || c.eventTTL != 90*time.Minute || !slices.Equal(splitList(c.endpoints), []string{"http://a:2379", "http://b:2379"}) {
		t.Fatalf("parsed %+v", c)
	}
	for args, want := range map[string]string{
		"--listen 6443":    "invalid --listen",
		"--log-level loud": "invalid --log-level",
		"--gossip nope":    "invalid --gossip",
		"extra":            "unexpected arguments",
		"--data-dir=":      "--data-dir is empty",
		"--event-ttl 0s":   "invalid --event-ttl",
	} {
		err := parse(&ServerCommand{}, strings.Fields(args))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", args, err, want)
		}
	}
}

func TestMainDispatch(t *testing.T) {
	m := &Main{Getenv: func(string) string { return "" }}
	if err := m.Run(t.Context(), nil, nil, io.Discard, io.Discard); err == nil {
		t.Error("no command: want error")
	}
	if err := m.Run(t.Context(), []string{"frobnicate"}, nil, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), `unknown command "frobnicate"`) {
		t.Errorf("unknown command: err = %v", err)
	}
	err := m.Run(t.Context(), []string{"get", "ds", "--bogus"}, nil, io.Discard, io.Discard)
	if got := FormatError(err); got != `error: unknown flag: --bogus; see "everynode get -h"` {
		t.Errorf("bad flag: %q", got)
	}
	err = m.Run(t.Context(), []string{"get", "ds", "--kubeconfig", "/nonexistent/kc"}, nil, io.Discard, io.Discard)
	if got := FormatError(err); !strings.HasPrefix(got, "error: cannot read kubeconfig: ") ||
		!strings.HasSuffix(got, "; set --kubeconfig or KUBECONFIG to the admin.kubeconfig in the server's data dir") {
		t.Errorf("missing kubeconfig: %q", got)
	}
}

func TestFormatError(t *testing.T) {
	gr := schema.GroupResource{Group: "apps", Resource: "daemonsets"}
	tests := []struct {
		err  error
		want string
	}{
		{apierrors.NewNotFound(gr, "x"), `Error from server (NotFound): daemonsets.apps "x" not found`},
		{annotateAPIError(apierrors.NewAlreadyExists(gr, "x"), "creating", "ds.yaml"), `Error from server (AlreadyExists): error when creating "ds.yaml": daemonsets.apps "x" already exists`},
		{withFix(errors.New("cannot read kubeconfig: open x: no such file"), "set --kubeconfig"), "error: cannot read kubeconfig: open x: no such file; set --kubeconfig"},
		{errors.New("two\nlines"), "error: two lines"},
		{&apierrors.StatusError{ErrStatus: metav1.Status{Message: "GET u: 502 Bad Gateway"}}, "Error from server: GET u: 502 Bad Gateway"},
	}
	for _, tt := range tests {
		if got := FormatError(tt.err); got != tt.want {
			t.Errorf("FormatError = %q, want %q", got, tt.want)
		}
	}
}
