// Command incluster is the process of the in-cluster access test's image
// (FROM scratch, this static binary): every second it lists the nodes with
// client-go's in-cluster configuration (the mounted service account token
// and ca.crt, KUBERNETES_SERVICE_HOST/PORT) and prints one line saying how
// that went and where it went: "result: ok", "result: 403", "result: 401" or
// "result: error …", then " via HOST:PORT".
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func main() {
	for {
		fmt.Println("result: " + listNodes() + " via " +
			net.JoinHostPort(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")))
		time.Sleep(time.Second)
	}
}

func listNodes() string {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return "error " + err.Error()
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "error " + err.Error()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	switch {
	case err == nil:
		return "ok"
	case apierrors.IsForbidden(err):
		return "403"
	case apierrors.IsUnauthorized(err):
		return "401"
	}
	return "error " + err.Error()
}
