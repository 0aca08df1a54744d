package nodelabelindex

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
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
	index   *Index
	args    Args
	handle  fwk.Handle
	widened *widened
	pods    corelisters.PodLister
	wakes   *wakes
	now     func() time.Time
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

// New registers the index's handlers on the scheduler's own node informer,
// the one its cache is fed from, before the informers start.
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
	index := NewIndex()
	_, err := h.SharedInformerFactory().Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { setNode(index, obj) },
		UpdateFunc: func(_, obj any) { setNode(index, obj) },
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if node, ok := obj.(*v1.Node); ok {
				index.Delete(node.Name)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("%s: watching nodes: %w", Name, err)
	}
	return &NodeLabelIndex{index: index, args: args, handle: h, widened: newWidened(),
		pods: h.SharedInformerFactory().Core().V1().Pods().Lister(), wakes: newWakes(time.Now), now: time.Now}, nil
}

func setNode(index *Index, obj any) {
	if node, ok := obj.(*v1.Node); ok {
		index.Set(node.Name, node.Labels)
	}
}

func (pl *NodeLabelIndex) Name() string { return Name }

// PreFilter returns the candidates of the Pod's required node affinity and
// nodeSelector. It narrows nothing when they do not narrow, when no node is a
// candidate (NodeAffinity's Filter then rejects every node with its own
// message and requeues on its own events) and when the index does not hold
// exactly the nodes of this cycle's snapshot: the index and the scheduler's
// cache are fed by the same informer but by different handlers, so for a
// moment after a node is added or deleted one can be ahead of the other, and
// a node the snapshot holds must never be left out.
//
// With an order, it then keeps only the best of the candidates (order.go's
// best), unless the Pod's last cycle was given only those and none took it.
//
// A Pod that waits for its best type (wait.go) is given that type's nodes alone.
func (pl *NodeLabelIndex) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if result, status, ok := pl.preFilterWait(ctx, state, pod, nodes); ok {
		return result, status
	}
	candidates, narrowed := pl.index.Candidates(pod)
	if !narrowed || candidates.Len() == 0 || pl.index.Len() != len(nodes) {
		return nil, nil
	}
	if pl.args.Order == Class || pl.widened.take(pod.UID) {
		return &fwk.PreFilterResult{NodeNames: candidates}, nil
	}
	infos := make([]fwk.NodeInfo, 0, candidates.Len())
	lister := pl.handle.SnapshotSharedLister().NodeInfos()
	for name := range candidates {
		if info, err := lister.Get(name); err == nil && info.Node() != nil {
			infos = append(infos, info)
		}
	}
	if len(infos) != candidates.Len() {
		return &fwk.PreFilterResult{NodeNames: candidates}, nil
	}
	names, ok := best(pl.args, pod, infos)
	if !ok || len(names) == candidates.Len() {
		return &fwk.PreFilterResult{NodeNames: candidates}, nil
	}
	state.Write(narrowedKey, narrowedState{})
	return &fwk.PreFilterResult{NodeNames: sets.New(names...)}, nil
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
	if _, err := state.Read(narrowedKey); err != nil {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	pl.widened.add(pod.UID)
	pl.handle.Activate(klog.FromContext(ctx), map[string]*v1.Pod{string(pod.UID): pod})
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
// and nodeSelector and did not before (or is new). It indexes the node first:
// the hint runs in the scheduler's own handler of the event, before the Pod
// goes back to the queue, while the index's handler of the same event may
// not have run yet, and the Pod's next cycle would then leave the very node
// that brought it back out. (A node added is safe either way: the index then
// holds one node less than the snapshot, and PreFilter narrows nothing.)
func (pl *NodeLabelIndex) nodeNowMatches(_ klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	was, now, err := util.As[*v1.Node](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	pl.index.Set(now.Name, now.Labels)
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
