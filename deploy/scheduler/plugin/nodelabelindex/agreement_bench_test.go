package nodelabelindex

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
)

func namedNodes(count int) ([]*v1.Node, []fwk.NodeInfo) {
	nodes := make([]*v1.Node, count)
	for i := range nodes {
		nodes[i] = node(fmt.Sprintf("gpu-node-%05d.example.internal", i), map[string]string{product: "NVIDIA-A100-SXM4-80GB"})
	}
	infos, _ := schedcache.NewSnapshot(nil, nodes).NodeInfos().List()
	return nodes, infos
}

// What a cycle pays to know the index holds its snapshot's nodes (the same
// node list as the cycle before), and what hashing a new list costs (once
// per node added or deleted), at 1,000, 5,000 and 15,000 nodes.
func BenchmarkAgreement(b *testing.B) {
	for _, count := range []int{1000, 5000, 15000} {
		nodes, infos := namedNodes(count)
		pl := &NodeLabelIndex{index: NewIndex(), drift: &drift{now: time.Now}}
		for _, n := range nodes {
			pl.index.SetNode(n)
		}
		b.Run(fmt.Sprintf("each-cycle-%d", count), func(b *testing.B) {
			pl.agrees(klog.Background(), infos) // the list's first cycle hashes it
			for b.Loop() {
				if !pl.agrees(klog.Background(), infos) {
					b.Fatal("disagrees")
				}
			}
		})
		b.Run(fmt.Sprintf("new-node-list-%d", count), func(b *testing.B) {
			for b.Loop() {
				namesOf(infos)
			}
		})
	}
}
