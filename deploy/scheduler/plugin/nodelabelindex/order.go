package nodelabelindex

import (
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
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
//
// Each node is scored first, from its labels or its device counts alone, and
// checked for room only when it scores at least the best found so far with
// room: a cycle checks a handful of nodes, not every node of the Pod's types.
func best(args Args, pod *v1.Pod, infos []fwk.NodeInfo) (names []string, ok bool) {
	if args.Order == Class || !orderable(pod) {
		return nil, false
	}
	need := demandOf(pod, args.Resources)
	var preferred *preferences
	if args.Order == PreferredTypes {
		if preferred, ok = preferencesOf(pod); !ok {
			return nil, false
		}
	} else if len(need.shares) == 0 {
		return nil, false
	}
	required := nodeaffinity.GetRequiredNodeAffinity(pod)
	top := int64(-1)
	var uncounted []string
	for _, info := range infos {
		node := info.Node()
		if !need.counted(info) {
			if matches, err := required.Match(node); err == nil && matches {
				uncounted = append(uncounted, node.Name)
			}
			continue
		}
		var score int64
		if preferred != nil {
			score = preferred.score(node)
		} else {
			score = need.shareScore(args.Order, info)
		}
		if score < top || (score == top && preferred == nil && args.Nodes > 0 && len(names) >= args.Nodes) {
			continue
		}
		if matches, err := required.Match(node); err != nil || !matches {
			continue // NodeAffinity's Filter refuses it (the index keeps every node of an `In`)
		}
		if !need.fits(pod, info) {
			continue
		}
		if score > top {
			top, names = score, names[:0]
		}
		names = append(names, node.Name)
	}
	if len(names) == 0 {
		return nil, false
	}
	return append(names, uncounted...), true
}

// preferences is the Pod's preferred node affinity as NodeAffinity's Score
// reads it (a term of weight 0 or with no expression counts nothing), parsed
// once for the cycle: the library's own terms build a map of the node's
// fields for every node they score. A term's match depends only on the values
// of the label keys it names, so each combination of them is scored once.
type preferences struct {
	terms  []weightedTerm
	keys   []string         // every label key the terms name
	scores map[string]int64 // the values of keys on a node (values) -> its score
	values []byte
}

type weightedTerm struct {
	weight   int64
	selector labels.Selector
}

var labelOperators = map[v1.NodeSelectorOperator]selection.Operator{
	v1.NodeSelectorOpIn: selection.In, v1.NodeSelectorOpNotIn: selection.NotIn,
	v1.NodeSelectorOpExists: selection.Exists, v1.NodeSelectorOpDoesNotExist: selection.DoesNotExist,
	v1.NodeSelectorOpGt: selection.GreaterThan, v1.NodeSelectorOpLt: selection.LessThan,
}

// preferencesOf: ok false when the Pod prefers nothing, when a term names
// fields (metadata.name: a Pod placed by name, not by type) or when one does
// not parse.
func preferencesOf(pod *v1.Pod) (*preferences, bool) {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil {
		return nil, false
	}
	p := &preferences{scores: map[string]int64{}}
	for _, t := range a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
		if len(t.Preference.MatchFields) > 0 {
			return nil, false
		}
		if t.Weight == 0 || len(t.Preference.MatchExpressions) == 0 {
			continue
		}
		selector := labels.NewSelector()
		for _, e := range t.Preference.MatchExpressions {
			op, known := labelOperators[e.Operator]
			if !known {
				return nil, false
			}
			r, err := labels.NewRequirement(e.Key, op, e.Values)
			if err != nil {
				return nil, false
			}
			selector = selector.Add(*r)
			if !slices.Contains(p.keys, e.Key) {
				p.keys = append(p.keys, e.Key)
			}
		}
		p.terms = append(p.terms, weightedTerm{weight: int64(t.Weight), selector: selector})
	}
	return p, len(p.terms) > 0
}

// score is NodeAffinity's score before normalizing: the sum of the weights
// of the terms the node's labels match.
func (p *preferences) score(node *v1.Node) int64 {
	p.values = p.values[:0]
	for _, k := range p.keys {
		v, has := node.Labels[k]
		if has {
			p.values = append(p.values, '=')
			p.values = append(p.values, v...)
		}
		p.values = append(p.values, 0) // a label value holds no NUL
	}
	if score, known := p.scores[string(p.values)]; known {
		return score
	}
	var score int64
	for _, t := range p.terms {
		if t.selector.Matches(labels.Set(node.Labels)) {
			score += t.weight
		}
	}
	p.scores[string(p.values)] = score
	return score
}

// demand is what the Pod asks of a node, read once for the cycle.
type demand struct {
	milliCPU, memory int64
	devices          []amount // extended resources (devices, hugepages), each asked for
	shares           []share  // of them, those the profile's NodeResourcesFit scores
}

type amount struct {
	name  v1.ResourceName
	count int64
}

type share struct {
	amount
	weight int64
}

func demandOf(pod *v1.Pod, scored []Resource) demand {
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	d := demand{milliCPU: requests.Cpu().MilliValue(), memory: requests.Memory().Value()}
	for name, q := range requests {
		switch name {
		case v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage, v1.ResourcePods:
			// ephemeral storage and Pod slots are not counted here: at worst a node kept that a Filter refuses
		default:
			if !q.IsZero() { // NodeResourcesFit skips a zero request too
				d.devices = append(d.devices, amount{name, q.Value()})
			}
		}
	}
	for _, r := range scored {
		if q, ok := requests[v1.ResourceName(r.Name)]; ok && !q.IsZero() {
			d.shares = append(d.shares, share{amount{v1.ResourceName(r.Name), q.Value()}, r.Weight})
		}
	}
	return d
}

// counted says whether the node counts every device the Pod asks for (false:
// a DRA driver may offer it what the node does not count).
func (d demand) counted(info fwk.NodeInfo) bool {
	allocatable := info.GetAllocatable().GetScalarResources()
	for _, a := range d.devices {
		if _, has := allocatable[a.name]; !has {
			return false
		}
	}
	return true
}

// fits is what NodeResourcesFit, TaintToleration and NodeUnschedulable
// decide from a node that counts the Pod's devices, taken no stricter than
// they are.
func (d demand) fits(pod *v1.Pod, info fwk.NodeInfo) bool {
	free, used := info.GetAllocatable(), info.GetRequested()
	if d.milliCPU > free.GetMilliCPU()-used.GetMilliCPU() || d.memory > free.GetMemory()-used.GetMemory() {
		return false
	}
	allocatable, requested := free.GetScalarResources(), used.GetScalarResources()
	for _, a := range d.devices {
		if a.count > allocatable[a.name]-requested[a.name] {
			return false
		}
	}
	node := info.Node()
	if node.Spec.Unschedulable && !v1helper.TolerationsTolerateTaint(klog.Background(), pod.Spec.Tolerations,
		&v1.Taint{Key: v1.TaintNodeUnschedulable, Effect: v1.TaintEffectNoSchedule}, true) {
		return false
	}
	_, untolerated := v1helper.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations,
		func(t *v1.Taint) bool {
			return t.Effect == v1.TaintEffectNoSchedule || t.Effect == v1.TaintEffectNoExecute
		}, true)
	return !untolerated
}

// shareScore is NodeResourcesFit's score of the node once the Pod is placed,
// over the resources the Pod requests (the others it does not score).
func (d demand) shareScore(order Order, info fwk.NodeInfo) int64 {
	var sum, weights int64
	allocatable, requested := info.GetAllocatable().GetScalarResources(), info.GetRequested().GetScalarResources()
	for _, s := range d.shares {
		capacity := allocatable[s.name]
		if capacity == 0 {
			continue
		}
		after := requested[s.name] + s.count
		switch {
		case order == MostUsed:
			sum += s.weight * (min(after, capacity) * fwk.MaxNodeScore / capacity)
		case after <= capacity:
			sum += s.weight * ((capacity - after) * fwk.MaxNodeScore / capacity)
		}
		weights += s.weight
	}
	if weights == 0 {
		return 0
	}
	return sum / weights
}
