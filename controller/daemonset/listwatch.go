package daemonset

import (
	"k8s.io/client-go/tools/cache"

	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/controller/internal/informer"
	"github.com/everynode/everynode/resources"
)

// namespaceIndex indexes cached objects by namespace.
const namespaceIndex = informer.NamespaceIndex

func newInformer(c client.Interface, r *resources.Resource) cache.SharedIndexInformer {
	return informer.New(c, r, nil)
}
