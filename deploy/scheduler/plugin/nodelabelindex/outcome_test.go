package nodelabelindex

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	schedcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// snapshotHandle is the part of the scheduler's handle PreFilter reads: the
// cycle's snapshot.
type snapshotHandle struct {
	fwk.Handle
	snapshot *schedcache.Snapshot
}

func (h snapshotHandle) SnapshotSharedLister() fwk.SharedLister { return h.snapshot }

// Each cycle is counted once, by what PreFilter gave it, on the series
// kube-scheduler's /metrics serves.
func TestCyclesAreCountedByOutcome(t *testing.T) {
	register()
	h := gpuNode{name: "h-0", product: "H100", gpus: 8}.info().Node()
	a := gpuNode{name: "a-0", product: "A100", gpus: 8}.info().Node()
	ofTypes := func(s *v1.PodSpec) {
		s.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &v1.NodeSelector{
			NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{in(product, "H100", "A100")}}}}
	}
	withVolume := func(s *v1.PodSpec) {
		s.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
	}
	for _, c := range []struct {
		name    string
		args    Args
		pod     *v1.Pod
		indexed []*v1.Node // nil: the snapshot's nodes
		widened bool       // the Pod's best nodes refused it last cycle
		want    Outcome
		nodes   []string // nil: every node
	}{
		{name: "the-best-type-with-room", args: Args{Order: PreferredTypes}, pod: classPod(1, ofTypes),
			want: Narrowed, nodes: []string{"h-0"}},
		{name: "no-order-the-pods-types", pod: classPod(1, ofTypes), want: Narrowed, nodes: []string{"h-0", "a-0"}},
		{name: "best-nodes-refused-it-last-cycle", args: Args{Order: PreferredTypes}, pod: classPod(1, ofTypes),
			widened: true, want: Widened, nodes: []string{"h-0", "a-0"}},
		{name: "the-order-cannot-rank-it", args: Args{Order: PreferredTypes}, pod: classPod(1, ofTypes, withVolume),
			want: Widened, nodes: []string{"h-0", "a-0"}},
		{name: "the-index-disagrees-with-the-snapshot", args: Args{Order: PreferredTypes}, pod: classPod(1, ofTypes),
			indexed: []*v1.Node{h}, want: FellBack},
		{name: "no-node-of-its-types", args: Args{Order: PreferredTypes}, pod: forType("B200"), want: FellBack},
		{name: "nothing-to-narrow-by", args: Args{Order: PreferredTypes}, pod: classPod(1), want: Unnarrowed},
	} {
		t.Run(c.name, func(t *testing.T) {
			snapshot := schedcache.NewSnapshot(nil, []*v1.Node{h, a})
			pl := &NodeLabelIndex{index: NewIndex(), args: c.args, handle: snapshotHandle{snapshot: snapshot},
				widened: newWidened(), parked: newParked(), drift: &drift{now: time.Now}}
			indexed := c.indexed
			if indexed == nil {
				indexed = []*v1.Node{h, a}
			}
			for _, n := range indexed {
				pl.nodeSeen(n)
			}
			c.pod.UID = "p"
			if c.widened {
				pl.widened.add(c.pod.UID)
			}
			before := map[Outcome]float64{}
			for _, o := range []Outcome{Narrowed, Widened, FellBack, Unnarrowed} {
				before[o] = counterValue(t, "gpu_class_scheduler_prefilter_cycles_total", map[string]string{"outcome": string(o)})
			}
			nodes, _ := snapshot.NodeInfos().List()
			result, _ := pl.PreFilter(context.Background(), framework.NewCycleState(), c.pod, nodes)
			switch {
			case c.nodes == nil && result != nil:
				t.Errorf("narrowed to %v, want every node", result.NodeNames)
			case c.nodes != nil && (result == nil || !result.NodeNames.HasAll(c.nodes...) || result.NodeNames.Len() != len(c.nodes)):
				t.Errorf("narrowed to %v, want %v", result, c.nodes)
			}
			for o, was := range before {
				want := was
				if o == c.want {
					want++
				}
				if got := counterValue(t, "gpu_class_scheduler_prefilter_cycles_total", map[string]string{"outcome": string(o)}); got != want {
					t.Errorf("%s: %v, want %v", o, got, want)
				}
			}
		})
	}
}
