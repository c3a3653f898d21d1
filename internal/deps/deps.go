// Package deps pins the project's chosen libraries until the code that uses them lands.
package deps

import (
	_ "github.com/docker/docker/client"
	_ "github.com/hashicorp/memberlist"
	_ "go.etcd.io/etcd/client/v3"
	_ "go.etcd.io/etcd/client/v3/concurrency"
	_ "go.etcd.io/etcd/server/v3/embed"
	_ "gopkg.in/evanphx/json-patch.v4"
	_ "k8s.io/api/apidiscovery/v2"
	_ "k8s.io/api/apps/v1"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/apimachinery/pkg/api/errors"
	_ "k8s.io/apimachinery/pkg/util/strategicpatch"
	_ "k8s.io/apimachinery/pkg/util/validation"
	_ "k8s.io/client-go/tools/cache"
	_ "k8s.io/client-go/tools/clientcmd"
	_ "k8s.io/client-go/util/flowcontrol"
	_ "k8s.io/client-go/util/workqueue"
	_ "k8s.io/component-helpers/scheduling/corev1"
	_ "k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	_ "k8s.io/kube-openapi/pkg/validation/spec"
	_ "sigs.k8s.io/yaml"
)
