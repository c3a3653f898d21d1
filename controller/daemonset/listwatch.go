package daemonset

import (
	"github.com/everynode/everynode/controller/internal/informer"
)

// namespaceIndex indexes cached objects by namespace.
const namespaceIndex = informer.NamespaceIndex
