package multihost_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/agent"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/gossip"
	"github.com/everynode/everynode/resources"
	"github.com/everynode/everynode/server"
)

// TestDockerLogsThroughAPI runs, in this process, a server (server.Start)
// whose local agent runs on Docker and serves its log endpoint, then
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

	// A server whose local agent runs on Docker and serves its log endpoint.
	srv, err := server.Start(ctx, server.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", CompactInterval: -1, Logger: log,
		Gossip: agent.GossipOptions{Addr: "127.0.0.1:0", Profile: gossip.ProfileLocal},
		Agent:  &agent.NodeOptions{Name: node, IP: "127.0.0.1", Runtime: agent.RuntimeDocker, LogListen: "127.0.0.1:0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := client.NewHTTP(client.Config{Server: srv.URL(), CAPEM: srv.CAPEM(), Token: srv.AdminToken(), Timeout: 10 * time.Second, ResourceFor: resources.ForObject})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(srv.CAPEM())
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	defer hc.CloseIdleConnections()

	// The pod is created once its node is Ready: a node that has not
	// reported yet carries the not-ready NoExecute taint, and the node
	// lifecycle controller would evict a pod without tolerations at once.
	mhEventually(t, time.Minute, "the node Ready", func() error {
		obj, err := cli.Get(ctx, resources.Nodes, "", node)
		if err != nil {
			return err
		}
		if st := nodeReadyStatus(obj.(*corev1.Node)); st != corev1.ConditionTrue {
			return errStr("Ready " + string(st))
		}
		return nil
	})

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
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL()+"/api/v1/namespaces/default/pods/talker/log"+query, nil)
		req.Header.Set("Authorization", "Bearer "+srv.AdminToken())
		resp, err := hc.Do(req)
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
	req, _ := http.NewRequestWithContext(fctx, http.MethodGet, srv.URL()+"/api/v1/namespaces/default/pods/talker/log?follow=true&tailLines=0", nil)
	req.Header.Set("Authorization", "Bearer "+srv.AdminToken())
	resp, err := hc.Do(req)
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
