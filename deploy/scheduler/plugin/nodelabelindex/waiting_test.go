package nodelabelindex

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// The scheduler's handler of a relabel brings a waiting Pod back; its cycle
// can run before the index's handler has the relabel, and leave that node
// out. Whenever the index's handler then indexes it, the Pod gets another
// cycle, and only a Pod the node could take.
func TestACycleAheadOfTheIndexGetsAnotherOnceTheIndexCatchesUp(t *testing.T) {
	h100 := map[string]string{product: "NVIDIA-H100-80GB-HBM3"}
	l4 := map[string]string{product: "NVIDIA-L4"}
	for _, c := range []struct {
		name string
		// indexed runs when the index's handler gets the relabel: before the cycle's PostFilter or after it.
		beforePostFilter bool
		relabelled       string // "b" when empty
		relabelledTo     map[string]string
		woken            bool
	}{
		{name: "indexed-after-the-pod-waits", relabelledTo: h100, woken: true},
		{name: "indexed-while-the-cycle-runs", beforePostFilter: true, relabelledTo: h100, woken: true},
		{name: "a-node-the-pod-cannot-take", relabelledTo: map[string]string{product: "NVIDIA-A100"}},
		{name: "a-node-it-could-take-before-changes-another-label", relabelled: "a",
			relabelledTo: map[string]string{product: "NVIDIA-H100-80GB-HBM3", "zone": "b"}},
		{name: "a-node-the-pod-cannot-take-while-the-cycle-runs", beforePostFilter: true,
			relabelledTo: map[string]string{product: "NVIDIA-A100"}, woken: true}, // the index changed under the cycle
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.relabelled == "" {
				c.relabelled = "b"
			}
			var woken []string
			pl := &NodeLabelIndex{index: NewIndex(), widened: newWidened(), parked: newParked(), drift: &drift{now: time.Now},
				activate: func(_ klog.Logger, pods map[string]*v1.Pod) {
					for uid := range pods {
						woken = append(woken, uid)
					}
				}}
			pl.nodeSeen(node("a", h100))
			pl.nodeSeen(node("b", l4))
			wants := pod(nil, []v1.NodeSelectorRequirement{in(product, "NVIDIA-H100-80GB-HBM3")})
			wants.UID = types.UID("p")
			// The snapshot has the node relabelled already; the index does not.
			snapshot := map[string]*v1.Node{"a": node("a", h100), "b": node("b", l4)}
			snapshot[c.relabelled] = node(c.relabelled, c.relabelledTo)
			nodes, _ := schedcache.NewSnapshot(nil, []*v1.Node{snapshot["a"], snapshot["b"]}).NodeInfos().List()
			state := framework.NewCycleState()
			result, _ := pl.PreFilter(context.Background(), state, wants, nodes)
			if result == nil || result.NodeNames.Has("b") {
				t.Fatalf("the cycle is not narrowed to the index as it was: %v", result)
			}
			if c.beforePostFilter {
				pl.nodeSeen(snapshot[c.relabelled])
			}
			if _, status := pl.PostFilter(context.Background(), state, wants, nil); status.Code() != fwk.Unschedulable {
				t.Errorf("the Pod goes on to preemption as before: %v", status)
			}
			if !c.beforePostFilter {
				pl.nodeSeen(snapshot[c.relabelled])
			}
			pl.nodeSeen(snapshot[c.relabelled]) // an update that changes no label wakes no one
			if got := len(woken) == 1 && woken[0] == "p"; got != c.woken || len(woken) > 1 {
				t.Errorf("woken %v, want the Pod woken once: %v", woken, c.woken)
			}
		})
	}
}

func TestParkedPodsAreForgotten(t *testing.T) {
	h100 := node("n", map[string]string{product: "NVIDIA-H100-80GB-HBM3"})
	wants := pod(nil, []v1.NodeSelectorRequirement{in(product, "NVIDIA-H100-80GB-HBM3")})
	now := time.Unix(0, 0)
	p := newParked()
	p.now = func() time.Time { return now }
	gen := func() uint64 { return 1 }
	for _, uid := range []types.UID{"cycled-again", "old", "woken"} {
		q := wants.DeepCopy()
		q.UID = uid
		if p.park(q, 1, gen) {
			t.Fatal("a Pod parked at the index's generation needs no cycle now")
		}
	}
	p.forget("cycled-again")
	now = now.Add(widenedFor / 2)
	late := wants.DeepCopy()
	late.UID = "late"
	p.park(late, 1, gen)
	now = now.Add(widenedFor/2 + time.Second)
	if got := p.wake(nil, h100, 2); len(got) != 1 || got["late"] == nil {
		t.Errorf("woken %v: only the Pod parked within widenedFor, not forgotten", got)
	}
	if len(p.pods) != 0 {
		t.Errorf("left parked: %v", p.pods)
	}
}
