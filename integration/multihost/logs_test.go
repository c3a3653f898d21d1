package multihost_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/apiserver"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/nodeagent"
	"github.com/everynode/everynode/nodeagent/runtime/docker"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/store"
)

// mhTokens is the logs test's authenticator: one admin token.
type mhTokens struct{}

func (mhTokens) AuthenticateToken(tok string) (string, []string, bool) {
	if tok == "mh-admin" {
		return "admin", []string{"system:masters"}, true
	}
	return "", nil, false
}

// TestDockerLogsThroughAPI runs, in this process, the API server on a real
// store and an agent on the real Docker runtime serving its log endpoint,
// starts the example daemon in a container and reads its output through
// GET pods/{name}/log: a plain read, tailLines, and a follow that receives
// lines as the daemon writes them.
func TestDockerLogsThroughAPI(t *testing.T) {
	e := newMHEnv(t, false)
	node := "mhl-" + e.run
	e.nodes = []string{node} // cleanup removes its containers
	ctx, cancel := context.WithTimeout(e.ctx, 3*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))

	st, err := store.Open(ctx, store.Config{DataDir: t.TempDir(), CompactInterval: -1, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	nodeToken := "node-token-" + node
	api, err := apiserver.New(apiserver.Config{Store: st, Authenticator: mhTokens{}, Logger: log,
		NodeCredential: func(n string) string { return nodeagent.LogToken("node-token-" + n) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := api.EnsureNamespaces(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()
	defer api.Stop()
	cli, err := client.NewHTTP(client.Config{Server: srv.URL, Token: "mh-admin", Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	rt, err := docker.New(ctx, docker.Config{NodeName: node, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	logLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ag, err := nodeagent.New(nodeagent.Config{NodeName: node, NodeIP: "127.0.0.1", Client: cli, Runtime: rt, Logger: log,
		DataDir: t.TempDir(), LogPort: int32(logLn.Addr().(*net.TCPAddr).Port)})
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := nodeagent.SelfSignedTLS("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	actx, stopAgent := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	go func() { _ = ag.ServeLogs(actx, logLn, tlsCfg, nodeagent.LogAuthorizer(nodeToken)); done <- struct{}{} }()
	go func() { _ = ag.Run(actx); done <- struct{}{} }()
	defer func() {
		stopAgent()
		<-done
		<-done
	}()

	grace := int64(2)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "talker", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName: node, TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "daemon", Image: e.daemon, ImagePullPolicy: corev1.PullIfNotPresent,
				Args: []string{"-every", "300ms"},
				Env:  []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
			}},
		},
	}
	resources.Pods.SetTypeMeta(pod)
	if _, err := cli.Create(ctx, pod, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	mhEventually(t, time.Minute, "the pod Running", func() error {
		obj, err := cli.Get(ctx, resources.Pods, "default", "talker")
		if err != nil {
			return err
		}
		if p := obj.(*corev1.Pod).Status.Phase; p != corev1.PodRunning {
			return errStr("phase " + string(p))
		}
		return nil
	})

	get := func(query string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/v1/namespaces/default/pods/talker/log"+query, nil)
		req.Header.Set("Authorization", "Bearer mh-admin")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	mhEventually(t, 30*time.Second, "two log lines", func() error {
		code, body := get("")
		if code != 200 || strings.Count(body, "\n") < 2 || !strings.Contains(body, "node="+node) {
			return errStr(body)
		}
		return nil
	})
	if code, body := get("?tailLines=1&timestamps=true"); code != 200 || strings.Count(body, "\n") != 1 ||
		!regexp.MustCompile(`^\d{4}-\d\d-\d\dT\S+Z time=`).MatchString(body) {
		t.Errorf("tailLines=1&timestamps=true: %d %q", code, body)
	}
	if code, body := get("?container=nope"); code != 400 || !strings.Contains(body, "container nope is not valid for pod talker") {
		t.Errorf("bad container: %d %s", code, body)
	}

	// follow: new lines arrive while the daemon writes them.
	fctx, fcancel := context.WithTimeout(ctx, 20*time.Second)
	defer fcancel()
	req, _ := http.NewRequestWithContext(fctx, http.MethodGet, srv.URL+"/api/v1/namespaces/default/pods/talker/log?follow=true&tailLines=0", nil)
	req.Header.Set("Authorization", "Bearer mh-admin")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	seen := 0
	start := time.Now()
	for seen < 3 && sc.Scan() {
		if strings.Contains(sc.Text(), "msg=alive") {
			seen++
		}
	}
	if seen < 3 {
		t.Fatalf("follow: %d new lines in %s (%v)", seen, time.Since(start), sc.Err())
	}
	t.Logf("follow received 3 new lines within %s", time.Since(start).Round(time.Millisecond))
}

type errStr string

func (e errStr) Error() string { return string(e) }
