package nodelabelindex

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/util"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "NodeLabelIndex"

// NodeLabelIndex is a PreFilter plugin: it only ever narrows the nodes a
// cycle looks at, never rejects a Pod and never scores. With an order, its
// PostFilter gives a Pod whose best nodes all refused it every candidate in
// its next cycle.
type NodeLabelIndex struct {
	index    *Index
	args     Args
	handle   fwk.Handle
	widened  *widened
	parked   *parked
	drift    *drift
	snapshot snapshotNames
	nodes    corelisters.NodeLister // the informer's own store, for a repair
	pods     corelisters.PodLister
	wakes    *wakes
	now      func() time.Time
	// activate gives Pods another cycle (the handle's Activate).
	activate func(logger klog.Logger, pods map[string]*v1.Pod)
}

var (
	_ fwk.PreFilterPlugin   = &NodeLabelIndex{}
	_ fwk.PostFilterPlugin  = &NodeLabelIndex{}
	_ fwk.EnqueueExtensions = &NodeLabelIndex{}
	_ fwk.SignPlugin        = &NodeLabelIndex{}
)

// narrowedKey marks, in a cycle's state, a cycle given only the best nodes.
const narrowedKey fwk.StateKey = Name + "/narrowed"

type narrowedState struct{}

func (narrowedState) Clone() fwk.StateData { return narrowedState{} }

// indexedKey marks a cycle narrowed by the index (to the best nodes or to the
// Pod's types), with the index's generation it read.
const indexedKey fwk.StateKey = Name + "/indexed"

type indexedState struct{ gen uint64 }

func (s indexedState) Clone() fwk.StateData { return s }

// New registers the index's handlers on the scheduler's own node informer,
// the one its cache is fed from, before the informers start. Those handlers
// are the only writers of the index (and a repair, from the same informer's
// lister): a queueing hint runs on the scheduler's handler, which replays
// events for Pods in flight after their cycle, so an index written from hints
// could take back a node deleted since or labels changed since.
func New(_ context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	var args Args
	if obj != nil {
		if err := frameworkruntime.DecodeInto(obj, &args); err != nil {
			return nil, fmt.Errorf("%s: args: %w", Name, err)
		}
	}
	if err := args.check(); err != nil {
		return nil, fmt.Errorf("%s: args: %w", Name, err)
	}
	register()
	informer := h.SharedInformerFactory().Core().V1().Nodes()
	pl := &NodeLabelIndex{
		index: NewIndex(), args: args, handle: h, widened: newWidened(), parked: newParked(),
		drift: &drift{now: time.Now}, nodes: informer.Lister(),
		pods: h.SharedInformerFactory().Core().V1().Pods().Lister(), wakes: newWakes(time.Now), now: time.Now,
		activate: func(logger klog.Logger, pods map[string]*v1.Pod) { h.Activate(logger, pods) },
	}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { pl.nodeSeen(obj) },
		UpdateFunc: func(_, obj any) { pl.nodeSeen(obj) },
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if node, ok := obj.(*v1.Node); ok {
				pl.index.Delete(node.Name)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("%s: watching nodes: %w", Name, err)
	}
	return pl, nil
}

// nodeSeen indexes a node added or updated and, when its labels changed,
// gives another cycle to the Pods parked before it that it could take now
// and could not as the index held it.
func (pl *NodeLabelIndex) nodeSeen(obj any) {
	node, ok := obj.(*v1.Node)
	if !ok {
		return
	}
	gen, was, changed := pl.index.SetNode(node)
	if !changed {
		return
	}
	var before *v1.Node
	if was != nil {
		before = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name, Labels: was}}
	}
	if pods := pl.parked.wake(before, node, gen); len(pods) > 0 {
		pl.activate(klog.Background(), pods)
	}
}

func (pl *NodeLabelIndex) Name() string { return Name }

// PreFilter returns the candidates of the Pod's required node affinity and
// nodeSelector. It narrows nothing when they do not narrow, when no node is a
// candidate (NodeAffinity's Filter then rejects every node with its own
// message and requeues on its own events) and when the index does not hold
// exactly the nodes of this cycle's snapshot (agreement.go): a node the
// snapshot holds must never be left out. A disagreement that lasts is
// repaired (the index rebuilt from the informer's lister), said once in the
// log and counted in gpu_class_scheduler_index_repairs_total. Each cycle is
// counted in gpu_class_scheduler_prefilter_cycles_total by its Outcome.
//
// With an order, it then keeps only the best of the candidates (order.go's
// best), unless the Pod's last cycle was given only those and none took it.
//
// A Pod that waits for its best type (wait.go) is given that type's nodes alone.
func (pl *NodeLabelIndex) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	pl.parked.forget(pod.UID)
	if result, status, ok := pl.preFilterWait(ctx, state, pod, nodes); ok {
		prefilterCycles.WithLabelValues(string(Waiting)).Inc()
		return result, status
	}
	result, outcome := pl.preFilter(ctx, state, pod, nodes)
	prefilterCycles.WithLabelValues(string(outcome)).Inc()
	return result, nil
}

func (pl *NodeLabelIndex) preFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, Outcome) {
	if !pl.index.Narrows(pod) {
		return nil, Unnarrowed
	}
	if !pl.agrees(klog.FromContext(ctx), nodes) {
		return nil, FellBack
	}
	// Read before the index is: a node indexed after it gives a Pod this cycle did not place another (parked).
	gen := pl.index.Generation()
	widened := pl.args.Order != Class && pl.widened.take(pod.UID)
	if pl.args.Order == PreferredTypes && !widened {
		// From the index's groups alone: the candidates are worked out only to widen.
		names, members, ok := bestOfTypes(pod, pl.index, pl.handle.SnapshotSharedLister().NodeInfos().Get)
		if members == 0 {
			return nil, FellBack
		}
		if members > 0 {
			state.Write(indexedKey, indexedState{gen: gen})
			if ok {
				if len(names) < members {
					state.Write(narrowedKey, narrowedState{})
				}
				return &fwk.PreFilterResult{NodeNames: sets.New(names...)}, Narrowed
			}
		}
	}
	candidates, _ := pl.index.Candidates(pod)
	if candidates.Len() == 0 {
		return nil, FellBack
	}
	state.Write(indexedKey, indexedState{gen: gen})
	if pl.args.Order == Class {
		return &fwk.PreFilterResult{NodeNames: candidates}, Narrowed
	}
	if widened || pl.args.Order == PreferredTypes {
		return &fwk.PreFilterResult{NodeNames: candidates}, Widened
	}
	infos := make([]fwk.NodeInfo, 0, candidates.Len())
	lister := pl.handle.SnapshotSharedLister().NodeInfos()
	for name := range candidates {
		if info, err := lister.Get(name); err == nil && info.Node() != nil {
			infos = append(infos, info)
		}
	}
	if len(infos) != candidates.Len() {
		return &fwk.PreFilterResult{NodeNames: candidates}, Widened
	}
	names, ok := best(pl.args, pod, infos)
	if !ok {
		return &fwk.PreFilterResult{NodeNames: candidates}, Widened
	}
	if len(names) == candidates.Len() { // every candidate is among the best
		return &fwk.PreFilterResult{NodeNames: candidates}, Narrowed
	}
	state.Write(narrowedKey, narrowedState{})
	return &fwk.PreFilterResult{NodeNames: sets.New(names...)}, Narrowed
}

// agrees says whether the index holds exactly the snapshot's nodes, and
// repairs it when it has not for longer than events in flight explain.
func (pl *NodeLabelIndex) agrees(logger klog.Logger, nodes []fwk.NodeInfo) bool {
	hash, count := pl.index.Names()
	v := pl.drift.observe(hash, uint64(count), pl.snapshot.of(nodes), uint64(len(nodes)))
	if !v.repair {
		return v.agrees
	}
	listed, err := pl.index.Rebuild(func() ([]*v1.Node, error) { return pl.nodes.List(labels.Everything()) })
	if err != nil {
		logger.Error(err, "NodeLabelIndex: listing nodes to rebuild the index")
		return false
	}
	indexRepairs.Inc()
	if v.say {
		logger.Info("NodeLabelIndex: the index disagreed with the scheduler's nodes by name; rebuilt it from the node informer",
			"indexed", count, "snapshot", len(nodes), "listed", listed, "disagreedFor", repairAfter)
	}
	// The lister can be ahead of the snapshot (nodes the scheduler's handler has yet to see): agreement
	// is asked again, and a new disagreement waits repairAfter again.
	hash, count = pl.index.Names()
	return pl.drift.observe(hash, uint64(count), pl.snapshot.of(nodes), uint64(len(nodes))).agrees
}

// PostFilter: a Pod that none of its best nodes took (a Filter best does not
// know of refused them all) gets all of its candidates in its next cycle, at
// once, and no preemption now: a worse node may well hold it. Any other Pod
// goes on to the next PostFilter plugin (preemption) as on the stock binary.
//
// A waiting Pod none of its best type's nodes took waits on, with no
// preemption: it asked to wait for room there, not to make it.
func (pl *NodeLabelIndex) PostFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, _ fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	if w, err := state.Read(waitingKey); err == nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, w.(waitingState).message)
	}
	logger := klog.FromContext(ctx)
	if read, err := state.Read(indexedKey); err == nil {
		if pl.parked.park(pod, read.(indexedState).gen, pl.index.Generation) {
			pl.activate(logger, map[string]*v1.Pod{string(pod.UID): pod})
		}
	}
	if _, err := state.Read(narrowedKey); err != nil {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	pl.widened.add(pod.UID)
	pl.activate(logger, map[string]*v1.Pod{string(pod.UID): pod})
	return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
		"none of the best nodes of the Pod's types took it; its next attempt looks at every node of its types")
}

func (pl *NodeLabelIndex) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// EventsToRegister: the nodes the plugin left out count as rejected by it
// (the scheduler marks them "didn't satisfy plugin(s) [NodeLabelIndex]"), and
// no other plugin saw them. A node that comes, or whose labels change, so
// that it matches a waiting Pod's affinity must bring the Pod back to the
// queue; NodeAffinity, which would say so on the stock binary, never
// filtered that node.
func (pl *NodeLabelIndex) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel}, QueueingHintFn: pl.nodeNowMatches},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.UpdateNodeAllocatable | fwk.UpdateNodeTaint}, QueueingHintFn: pl.groupNodeChanged},
		{Event: fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Add | fwk.Delete}, QueueingHintFn: pl.groupMayStart},
	}, nil
}

// nodeNowMatches queues the Pod when the node matches its required affinity
// and nodeSelector and did not before (or is new). It reads the event and
// writes nothing: the index's own handler indexes the node, and a cycle that
// runs before it does is given another once it has (parked).
func (pl *NodeLabelIndex) nodeNowMatches(_ klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	was, now, err := util.As[*v1.Node](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	required := nodeaffinity.GetRequiredNodeAffinity(pod)
	if matches, err := required.Match(now); err != nil || !matches {
		return fwk.QueueSkip, err
	}
	if was == nil {
		return fwk.Queue, nil
	}
	if matched, err := required.Match(was); err != nil || matched {
		return fwk.QueueSkip, err
	}
	return fwk.Queue, nil
}

// SignPod says what the plugin reads of a Pod, as NodeAffinity does: Pods
// alike in it get the same candidates, so the scheduler's batching of alike
// Pods stays on.
//
// A Pod with a wait is never batched: whether it waits changes with time.
func (pl *NodeLabelIndex) SignPod(_ context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	if _, has := pod.Annotations[MaxWaitAnnotation]; has {
		return nil, fwk.NewStatus(fwk.Unschedulable, "a Pod that may wait for its best type is scheduled on its own")
	}
	affinity, err := fwk.NodeAffinitySigner(pod)
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	return []fwk.SignFragment{
		{Key: fwk.NodeAffinitySignerName, Value: affinity},
		{Key: fwk.NodeSelectorSignerName, Value: pod.Spec.NodeSelector},
	}, nil
}
