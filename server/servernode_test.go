package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/everynode/everynode/agent"
	"github.com/everynode/everynode/apiserver"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/internal/testkit"
	"github.com/everynode/everynode/resources"
)

// withAgent gives a clustered server's config a fake local agent named
// like the server.
func withAgent(c Config, name string) Config {
	c.Agent = &agent.NodeOptions{Name: name, IP: "127.0.0.1", Runtime: agent.RuntimeFake, LogListen: "127.0.0.1:0"}
	return c
}

// waitServerNode waits until node name carries apiserver.ServerNodeLabel.
func waitServerNode(t *testing.T, h client.Interface, name string) {
	t.Helper()
	testkit.Eventually(t, 90*time.Second, func() error {
		obj, err := h.Get(context.Background(), resources.Nodes, "", name)
		if err != nil {
			return err
		}
		if obj.GetLabels()[apiserver.ServerNodeLabel] != "true" {
			return fmt.Errorf("node %s labels %v, want %s", name, obj.GetLabels(), apiserver.ServerNodeLabel)
		}
		return nil
	})
}

// TestClusterNodeDelete: three servers with local agents; each server
// labels its Node as a server's. Deleting an ordinary Node leaves the
// members alone; deleting the Node of a stopped server removes its etcd
// member, and the remaining two keep writing.
func TestClusterNodeDelete(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three embedded etcds")
	}
	defer testkit.LeakCheck(t)()
	ctx := context.Background()
	c1 := withAgent(clusterConfig(t, "s1"), "s1")
	c1.ClusterInit = true
	s1, err := Start(ctx, c1)
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	var rest []*Server
	for _, name := range []string{"s2", "s3"} {
		c := withAgent(clusterConfig(t, name), name)
		c.JoinURL, c.JoinToken = s1.URL(), s1.JoinToken()
		s, err := Start(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		rest = append(rest, s)
	}
	s2, s3 := rest[0], rest[1]
	defer s2.Close()
	s3Closed := false
	defer func() {
		if !s3Closed {
			s3.Close()
		}
	}()
	h := s1.Admin()
	for _, n := range []string{"s1", "s2", "s3"} {
		waitServerNode(t, h, n)
	}

	// An agent's Node (no label) is deleted as any: no member goes.
	plain := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "plain"}}
	resources.Nodes.SetTypeMeta(plain)
	if _, err := h.Create(ctx, plain, client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Delete(ctx, resources.Nodes, "", "plain", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := voters(t, s1); len(got) != 3 {
		t.Fatalf("voters after deleting an agent's node: %v", got)
	}

	// A stopped server's Node: deleting it removes the member.
	s3.Close()
	s3Closed = true
	testkit.Eventually(t, 60*time.Second, func() error {
		_, err := h.Delete(ctx, resources.Nodes, "", "s3", metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	got := voters(t, s1)
	slices.Sort(got)
	if !slices.Equal(got, []string{"s1", "s2"}) {
		t.Fatalf("voters after deleting s3's node: %v, want s1, s2", got)
	}
	if _, err := h.Get(ctx, resources.Nodes, "", "s3"); !apierrors.IsNotFound(err) {
		t.Fatalf("s3's node after its delete: %v", err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-remove", Namespace: "default"}}
	resources.ConfigMaps.SetTypeMeta(cm)
	if _, err := s2.Admin().Create(ctx, cm, client.WriteOptions{}); err != nil {
		t.Fatalf("write with two of the two remaining servers: %v", err)
	}
}

// TestClusterNodeDeleteLast: deleting the Node of the only server of a
// cluster is refused in one line, and the Node and the member stay.
func TestClusterNodeDeleteLast(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	defer testkit.LeakCheck(t)()
	ctx := context.Background()
	c := withAgent(clusterConfig(t, "only"), "only")
	c.ClusterInit = true
	s, err := Start(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := s.Admin()
	waitServerNode(t, h, "only")
	_, err = h.Delete(ctx, resources.Nodes, "", "only", metav1.DeleteOptions{})
	if err == nil || !strings.Contains(err.Error(), "last server") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("deleting the last server's node: %v, want refused as the last server", err)
	}
	if _, err := h.Get(ctx, resources.Nodes, "", "only"); err != nil {
		t.Fatalf("the node after the refused delete: %v", err)
	}
	if got := voters(t, s); len(got) != 1 {
		t.Fatalf("members: %v", got)
	}
}
