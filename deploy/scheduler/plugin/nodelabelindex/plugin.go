package nodelabelindex

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "NodeLabelIndex"

// NodeLabelIndex is a PreFilter plugin: it only ever narrows the nodes a
// cycle looks at, never rejects a Pod and never scores.
type NodeLabelIndex struct {
	index *Index
}

var (
	_ fwk.PreFilterPlugin   = &NodeLabelIndex{}
	_ fwk.EnqueueExtensions = &NodeLabelIndex{}
	_ fwk.SignPlugin        = &NodeLabelIndex{}
)

// New registers the index's handlers on the scheduler's own node informer,
// the one its cache is fed from, before the informers start.
func New(_ context.Context, _ runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
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
	return &NodeLabelIndex{index: index}, nil
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
func (pl *NodeLabelIndex) PreFilter(_ context.Context, _ fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	candidates, narrowed := pl.index.Candidates(pod)
	if !narrowed || candidates.Len() == 0 || pl.index.Len() != len(nodes) {
		return nil, nil
	}
	return &fwk.PreFilterResult{NodeNames: candidates}, nil
}

func (pl *NodeLabelIndex) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// EventsToRegister is empty: the plugin never rejects a Pod, so no event can
// make a Pod it rejected schedulable.
func (pl *NodeLabelIndex) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return nil, nil
}

// SignPod says what the plugin reads of a Pod, as NodeAffinity does: Pods
// alike in it get the same candidates, so the scheduler's batching of alike
// Pods stays on.
func (pl *NodeLabelIndex) SignPod(_ context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	affinity, err := fwk.NodeAffinitySigner(pod)
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	return []fwk.SignFragment{
		{Key: fwk.NodeAffinitySignerName, Value: affinity},
		{Key: fwk.NodeSelectorSignerName, Value: pod.Spec.NodeSelector},
	}, nil
}
