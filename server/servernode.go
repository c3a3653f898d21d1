package server

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/everynode/everynode/apiserver"
	"github.com/everynode/everynode/client"
	"github.com/everynode/everynode/resources"
)

// serverNodeCheck is how often a server checks that its local agent's Node
// carries apiserver.ServerNodeLabel (the agent may register it anew).
const serverNodeCheck = 10 * time.Second

// labelServerNode gives the local agent's Node, named like this server's
// etcd member, apiserver.ServerNodeLabel — which a node cannot set on
// itself (NodeRestriction) — so that deleting the Node removes the member
// (docs/ha.md). It runs until ctx ends, labelling the Node again whenever it
// is registered anew without the label.
func (s *Server) labelServerNode(ctx context.Context, name string) {
	log := s.log.With("component", "server-node", "node", name)
	patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, apiserver.ServerNodeLabel))
	wait := time.Second // soon after the local agent registers, then rarely
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		obj, err := s.local.Get(ctx, resources.Nodes, "", name)
		if err != nil {
			continue // not registered yet, or etcd busy: try again
		}
		if _, ok := obj.GetLabels()[apiserver.ServerNodeLabel]; ok {
			wait = serverNodeCheck
			continue
		}
		if _, err := s.local.Patch(ctx, resources.Nodes, "", name, types.MergePatchType, patch, client.WriteOptions{FieldManager: "everynode-server"}, ""); err != nil {
			log.Debug("label the server's node", "err", err)
			continue
		}
		log.Info("labelled the server's node: deleting it removes this server from the etcd cluster", "label", apiserver.ServerNodeLabel)
		wait = serverNodeCheck
	}
}
