package nodelabelindex

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
)

// informerHandle is the part of the scheduler's handle the plugin reads when
// it starts: the shared informer factory its node informer comes from.
type informerHandle struct {
	fwk.Handle
	factory informers.SharedInformerFactory
}

func (h informerHandle) SharedInformerFactory() informers.SharedInformerFactory { return h.factory }

// onInformer starts the plugin on a real node informer over a fake clientset
// holding `nodes`.
func onInformer(t *testing.T, nodes ...*v1.Node) (*NodeLabelIndex, kubernetes.Interface) {
	t.Helper()
	client := fake.NewClientset()
	for _, n := range nodes {
		if _, err := client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return startOn(t, client), client
}

// startOn starts the plugin as the scheduler starts it: New registers its
// handlers on the factory's node informer, then the factory starts.
func startOn(t *testing.T, client kubernetes.Interface) *NodeLabelIndex {
	t.Helper()
	factory := informers.NewSharedInformerFactory(client, 0)
	p, err := New(context.Background(), nil, informerHandle{factory: factory})
	if err != nil {
		t.Fatal(err)
	}
	pl := p.(*NodeLabelIndex)
	pl.activate = func(klog.Logger, map[string]*v1.Pod) {}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	return pl
}

// indexed: node -> labels, as the index holds them.
func indexed(pl *NodeLabelIndex) map[string]map[string]string {
	pl.index.mu.Lock()
	defer pl.index.mu.Unlock()
	out := make(map[string]map[string]string, len(pl.index.labels))
	for name, labels := range pl.index.labels {
		out[name] = labels
	}
	return out
}

// eventually waits until the index holds exactly `want` (the informer's
// handlers run on their own goroutine), or fails.
func eventually(t *testing.T, pl *NodeLabelIndex, want []*v1.Node, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := indexed(pl)
		if holds(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the index holds %v, the cluster %d nodes", what, got, len(want))
		}
		time.Sleep(time.Millisecond)
	}
}

func holds(got map[string]map[string]string, want []*v1.Node) bool {
	if len(got) != len(want) {
		return false
	}
	for _, n := range want {
		labels, ok := got[n.Name]
		if !ok || !equal(labels, n.Labels) {
			return false
		}
	}
	return true
}

// A queueing hint runs on the scheduler's own handler of node events, which
// replays the events a Pod's cycle overlapped once the cycle ends: an Add
// replayed after the node's Delete must not bring the node back, and the
// cycle after it narrows as before.
func TestAReplayedAddAfterADeleteLeavesNoDeletedNode(t *testing.T) {
	h100 := map[string]string{product: "NVIDIA-H100-80GB-HBM3"}
	a, b := node("a", h100), node("b", h100)
	pl, client := onInformer(t, a, b)
	eventually(t, pl, []*v1.Node{a, b}, "at start")
	if err := client.CoreV1().Nodes().Delete(context.Background(), "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, pl, []*v1.Node{a}, "after the delete")

	wants := pod(nil, []v1.NodeSelectorRequirement{in(product, "NVIDIA-H100-80GB-HBM3")})
	if _, err := pl.nodeNowMatches(klog.Background(), wants, nil, b); err != nil {
		t.Fatal(err)
	}
	if got := indexed(pl); !holds(got, []*v1.Node{a}) {
		t.Errorf("a replayed Add brought a deleted node back: the index holds %v", got)
	}
	snapshot := schedcache.NewSnapshot(nil, []*v1.Node{a})
	nodes, _ := snapshot.NodeInfos().List()
	result, status := pl.PreFilter(context.Background(), framework.NewCycleState(), wants, nodes)
	if !status.IsSuccess() || result == nil || !result.NodeNames.Has("a") || result.NodeNames.Len() != 1 {
		t.Errorf("the cycle after the replay does not narrow to the one node of the type: %v %v", result, status)
	}
}

// counterValue reads a counter as kube-scheduler's /metrics serves it: from
// the legacy registry.
func counterValue(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("%s%v is not in the legacy registry", name, labels)
	return 0
}

func narrowsTo(t *testing.T, pl *NodeLabelIndex, wants *v1.Pod, nodes []fwk.NodeInfo, want ...string) bool {
	t.Helper()
	result, status := pl.PreFilter(context.Background(), framework.NewCycleState(), wants, nodes)
	if !status.IsSuccess() {
		t.Fatal(status)
	}
	return result != nil && result.NodeNames.Equal(sets.New(want...))
}

// However the index came to disagree with the scheduler's nodes (here: a
// node indexed that no informer sent), a disagreement that lasts with
// neither side changing is repaired from the informer's lister, counted and
// logged, and the plugin narrows again; until then its cycles narrow nothing.
func TestADisagreementThatLastsIsRepaired(t *testing.T) {
	h100 := map[string]string{product: "NVIDIA-H100-80GB-HBM3"}
	a, b := node("a", h100), node("b", map[string]string{product: "NVIDIA-L4"})
	pl, _ := onInformer(t, a, b)
	eventually(t, pl, []*v1.Node{a, b}, "at start")
	now := time.Unix(0, 0)
	pl.drift.now = func() time.Time { return now }
	nodes, _ := schedcache.NewSnapshot(nil, []*v1.Node{a, b}).NodeInfos().List()
	wants := pod(nil, []v1.NodeSelectorRequirement{in(product, "NVIDIA-H100-80GB-HBM3")})
	if !narrowsTo(t, pl, wants, nodes, "a") {
		t.Fatal("the index agrees and does not narrow")
	}
	repairs := counterValue(t, "gpu_class_scheduler_index_repairs_total", nil)

	pl.index.Set("ghost", h100, "")
	if narrowsTo(t, pl, wants, nodes, "a", "ghost") || narrowsTo(t, pl, wants, nodes, "a") {
		t.Error("a cycle narrowed from an index that disagrees with its snapshot")
	}
	now = now.Add(repairAfter - time.Millisecond)
	if narrowsTo(t, pl, wants, nodes, "a") {
		t.Error("repaired before the disagreement outlasted events in flight")
	}
	now = now.Add(time.Millisecond)
	if !narrowsTo(t, pl, wants, nodes, "a") {
		t.Error("the cycle after the disagreement lasted does not narrow")
	}
	if got := counterValue(t, "gpu_class_scheduler_index_repairs_total", nil); got != repairs+1 {
		t.Errorf("repairs counted %v, want %v", got, repairs+1)
	}
	if got := indexed(pl); !holds(got, []*v1.Node{a, b}) {
		t.Errorf("the repair left %v", got)
	}
}

// A disagreement that keeps changing is events in flight, not drift: no repair.
func TestEventsInFlightAreNotRepaired(t *testing.T) {
	now := time.Unix(0, 0)
	d := &drift{now: func() time.Time { return now }}
	for i := uint64(0); i < 10; i++ {
		if v := d.observe(i, 3, 100+i, 3); v.agrees || v.repair {
			t.Fatalf("step %d: %+v", i, v)
		}
		now = now.Add(repairAfter)
	}
	if v := d.observe(9, 3, 109, 3); !v.repair || !v.say {
		t.Errorf("the same disagreement a second later is repaired and said: %+v", v)
	}
	now = now.Add(repairAfter)
	if v := d.observe(9, 3, 109, 3); !v.repair || v.say {
		t.Errorf("a second repair in one episode is counted, not said again: %+v", v)
	}
	if v := d.observe(5, 3, 5, 3); !v.agrees {
		t.Errorf("equal names agree: %+v", v)
	}
	now = now.Add(repairAfter)
	d.observe(9, 3, 109, 3)
	now = now.Add(repairAfter)
	if v := d.observe(9, 3, 109, 3); !v.repair || !v.say {
		t.Errorf("an agreement ends the episode; the next repair is said: %+v", v)
	}
}

// agreement.go hashes the scheduler's node list once per list, trusting the
// scheduler to build a new list when its set of nodes changes and to update
// the nodes of the list in place otherwise. This holds the release this
// module builds with to it.
func TestTheSchedulerRebuildsItsNodeListOnlyWhenItsNodesChange(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logger := klog.Background()
	schedmetrics.Register() // the cache reports into the scheduler's metrics
	c := schedcache.New(ctx, nil, false, false)
	snapshot := schedcache.NewEmptySnapshot()
	list := func() []fwk.NodeInfo {
		if err := c.UpdateSnapshot(logger, snapshot); err != nil {
			t.Fatal(err)
		}
		nodes, _ := snapshot.NodeInfos().List()
		return nodes
	}
	var names snapshotNames
	namesAre := func(nodes []fwk.NodeInfo, want ...string) {
		t.Helper()
		var h uint64
		for _, n := range want {
			h ^= nameHash(n)
		}
		if names.of(nodes) != h {
			t.Errorf("the list's names hash as another set than %v", want)
		}
	}
	a, b := node("a", map[string]string{product: "x"}), node("b", nil)
	c.AddNode(logger, a)
	c.AddNode(logger, b)
	first := list()
	namesAre(first, "a", "b")
	relabelled := node("a", map[string]string{product: "y"})
	c.UpdateNode(logger, a, relabelled)
	c.AddPod(logger, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "p"}, Spec: v1.PodSpec{NodeName: "b"}})
	same := list()
	if !sameList(first, same) {
		t.Error("a relabel and a Pod gave a new list: the list's hash would be recomputed every cycle")
	}
	namesAre(same, "a", "b")
	c.AddNode(logger, node("c", nil))
	added := list()
	if sameList(same, added) {
		t.Fatal("a node added kept the list: a hash of its names would be stale")
	}
	namesAre(added, "a", "b", "c")
	if err := c.RemoveNode(logger, relabelled); err != nil {
		t.Fatal(err)
	}
	removed := list()
	if sameList(added, removed) {
		t.Fatal("a node deleted kept the list: a hash of its names would be stale")
	}
	namesAre(removed, "b", "c")
}
