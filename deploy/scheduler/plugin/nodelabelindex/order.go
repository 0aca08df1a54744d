package nodelabelindex

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

// Order is how a profile's scores rank the nodes of a Pod's types, as far as
// the strategy it keeps promises anything: the best nodes are those every
// other node of the class scores below, whatever the smaller scores say.
type Order string

const (
	// Class: the Pod's candidates, with no order of ours (the narrowing of the index alone).
	Class Order = ""
	// PreferredTypes: the preferred node affinity, weighted far above every
	// other score (performance and cost): the best nodes are those of the
	// best type that has room.
	PreferredTypes Order = "PreferredTypes"
	// MostFree: NodeResourcesFit's LeastAllocated over Resources, weighted far
	// above every other score (balanced): the best nodes have the largest
	// share of their devices free once the Pod is placed.
	MostFree Order = "MostFree"
	// MostUsed: NodeResourcesFit's MostAllocated over Resources (binpack): the
	// largest share in use once the Pod is placed.
	MostUsed Order = "MostUsed"
)

// Args is NodeLabelIndex's pluginConfig in a profile.
type Args struct {
	Order Order `json:"order,omitempty"`
	// Resources scored by the profile's NodeResourcesFit (MostFree, MostUsed),
	// as its scoringStrategy lists them (a YAML anchor keeps the two one list).
	Resources []Resource `json:"resources,omitempty"`
	// Nodes: at most this many of the best nodes in a cycle (MostFree,
	// MostUsed), where every one of them is equally right; 0 for all of them.
	Nodes int `json:"nodes,omitempty"`
}

// Resource is one of NodeResourcesFit's scoringStrategy.resources.
type Resource struct {
	Name   string `json:"name"`
	Weight int64  `json:"weight"`
}

func (a Args) check() error {
	switch a.Order {
	case Class, PreferredTypes:
		if len(a.Resources) > 0 {
			return fmt.Errorf("resources are for the orders %s and %s, not %q", MostFree, MostUsed, a.Order)
		}
	case MostFree, MostUsed:
		if len(a.Resources) == 0 {
			return fmt.Errorf("order %s needs the resources the profile's NodeResourcesFit scores", a.Order)
		}
	default:
		return fmt.Errorf("order %q is not one of %q, %s, %s, %s", a.Order, Class, PreferredTypes, MostFree, MostUsed)
	}
	for _, r := range a.Resources {
		if r.Name == "" || r.Weight < 1 {
			return fmt.Errorf("each resource needs a name and a weight of 1 or more: %+v", r)
		}
	}
	if a.Nodes < 0 {
		return fmt.Errorf("nodes must be 0 (all of the best) or more, not %d", a.Nodes)
	}
	return nil
}

// orderable says whether only the nodes' own state decides where the Pod
// fits, beside what best checks: no Filter plugin that reads other Pods
// (inter-pod affinity, hard spread constraints, host ports), volumes or
// devices. For any other Pod the best nodes could all be refused by a Filter
// while a worse node takes it; it keeps to its candidates.
func orderable(pod *v1.Pod) bool {
	s := &pod.Spec
	if s.Resources != nil || len(s.ResourceClaims) > 0 {
		return false
	}
	if a := s.Affinity; a != nil && ((a.PodAffinity != nil && len(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0) ||
		(a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0)) {
		return false
	}
	for _, c := range s.TopologySpreadConstraints {
		if c.WhenUnsatisfiable == v1.DoNotSchedule {
			return false
		}
	}
	for _, v := range s.Volumes {
		if v.PersistentVolumeClaim != nil || v.Ephemeral != nil {
			return false
		}
	}
	for _, c := range append(append([]v1.Container{}, s.InitContainers...), s.Containers...) {
		for _, p := range c.Ports {
			if p.HostPort > 0 {
				return false
			}
		}
	}
	return true
}

// best returns the nodes among infos that the order ranks first, of those
// that can hold the Pod as far as the node's own state tells (room for its
// CPU, memory and devices, taints tolerated, not cordoned), and every node
// that does not count a device the Pod asks for (a DRA driver may offer it);
// ok false when it cannot tell (no such node, a Pod the order does not rank). A node left out here would be refused by a
// Filter or score below one kept, so the profile's choice among the nodes
// returned is its choice among all of them; when every node returned is
// refused by a Filter this does not know of, the Pod's next cycle looks at
// all of its candidates (the plugin's PostFilter).
func best(args Args, pod *v1.Pod, infos []fwk.NodeInfo) (names []string, ok bool) {
	if args.Order == Class || !orderable(pod) {
		return nil, false
	}
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	var preferred *nodeaffinity.PreferredSchedulingTerms
	if args.Order == PreferredTypes {
		a := pod.Spec.Affinity
		if a == nil || a.NodeAffinity == nil || len(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 0 {
			return nil, false
		}
		terms, err := nodeaffinity.NewPreferredSchedulingTerms(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution)
		if err != nil {
			return nil, false
		}
		preferred = terms
	} else if !requestsAny(requests, args.Resources) {
		return nil, false
	}
	required := nodeaffinity.GetRequiredNodeAffinity(pod)
	top := int64(-1)
	var uncounted []string
	for _, info := range infos {
		if matches, err := required.Match(info.Node()); err != nil || !matches {
			continue // NodeAffinity's Filter refuses it (the index keeps every node of an `In`)
		}
		room, counted := hasRoom(pod, requests, info)
		if !counted {
			uncounted = append(uncounted, info.Node().Name)
			continue
		}
		if !room {
			continue
		}
		var score int64
		if preferred != nil {
			score = preferred.Score(info.Node())
		} else {
			score = shareScore(args.Order, args.Resources, requests, info)
		}
		switch {
		case score > top:
			top, names = score, names[:0]
			fallthrough
		case score == top && (preferred != nil || args.Nodes == 0 || len(names) < args.Nodes):
			names = append(names, info.Node().Name)
		}
	}
	if len(names) == 0 {
		return nil, false
	}
	return append(names, uncounted...), true
}

func requestsAny(requests v1.ResourceList, resources []Resource) bool {
	for _, r := range resources {
		if q, ok := requests[v1.ResourceName(r.Name)]; ok && !q.IsZero() {
			return true
		}
	}
	return false
}

// hasRoom is what NodeResourcesFit, TaintToleration and NodeUnschedulable
// decide from the node alone, taken no stricter than they are (counted false:
// the Pod asks for a device the node does not count, which a DRA driver may
// offer it).
func hasRoom(pod *v1.Pod, requests v1.ResourceList, info fwk.NodeInfo) (room, counted bool) {
	node := info.Node()
	free, used := info.GetAllocatable(), info.GetRequested()
	for name, q := range requests {
		var left int64
		switch name {
		case v1.ResourceCPU:
			left = free.GetMilliCPU() - used.GetMilliCPU()
			if q.MilliValue() > left {
				return false, true
			}
			continue
		case v1.ResourceMemory:
			left = free.GetMemory() - used.GetMemory()
		case v1.ResourceEphemeralStorage, v1.ResourcePods:
			continue // not counted here: at worst a node kept that a Filter refuses
		default:
			allocatable, has := free.GetScalarResources()[name]
			if !has {
				if q.IsZero() {
					continue
				}
				return false, false
			}
			left = allocatable - used.GetScalarResources()[name]
		}
		if q.Value() > left {
			return false, true
		}
	}
	if node.Spec.Unschedulable && !v1helper.TolerationsTolerateTaint(klog.Background(), pod.Spec.Tolerations,
		&v1.Taint{Key: v1.TaintNodeUnschedulable, Effect: v1.TaintEffectNoSchedule}, true) {
		return false, true
	}
	_, untolerated := v1helper.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations,
		func(t *v1.Taint) bool {
			return t.Effect == v1.TaintEffectNoSchedule || t.Effect == v1.TaintEffectNoExecute
		}, true)
	return !untolerated, true
}

// shareScore is NodeResourcesFit's score of the node once the Pod is placed,
// over the resources the Pod requests (the others it does not score).
func shareScore(order Order, resources []Resource, requests v1.ResourceList, info fwk.NodeInfo) int64 {
	var sum, weights int64
	allocatable, requested := info.GetAllocatable().GetScalarResources(), info.GetRequested().GetScalarResources()
	for _, r := range resources {
		name := v1.ResourceName(r.Name)
		q, asked := requests[name]
		capacity := allocatable[name]
		if !asked || q.IsZero() || capacity == 0 {
			continue
		}
		after := requested[name] + q.Value()
		switch {
		case order == MostUsed:
			sum += r.Weight * (min(after, capacity) * fwk.MaxNodeScore / capacity)
		case after <= capacity:
			sum += r.Weight * ((capacity - after) * fwk.MaxNodeScore / capacity)
		}
		weights += r.Weight
	}
	if weights == 0 {
		return 0
	}
	return sum / weights
}
