package nodelabelindex

import (
	"cmp"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/sets"
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
// It ranks by the share of devices (MostFree, MostUsed; PreferredTypes is
// bestOfTypes). Each node is scored first, from its device counts alone, and
// checked for room only when it scores at least the best found so far with
// room.
func best(args Args, pod *v1.Pod, infos []fwk.NodeInfo) (names []string, ok bool) {
	if (args.Order != MostFree && args.Order != MostUsed) || !orderable(pod) {
		return nil, false
	}
	need := demandOf(pod, args.Resources)
	if len(need.shares) == 0 {
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
		score := need.shareScore(args.Order, info)
		if score < top || (score == top && args.Nodes > 0 && len(names) >= args.Nodes) {
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

// bestOfTypes is best for the order PreferredTypes, read from the index's
// groups of the nodes of the Pod's types (Index.Groups): a node's score and whether its labels meet
// the Pod's required affinity depend only on the values of the label keys
// those name, and whether it counts the Pod's devices only on its devices,
// so each is worked out once a group. The groups are then walked from the
// best score down, and a node's room checked only in the first level where
// some node has it: a cycle reads the nodes of the best type with room (and
// of any better type found full), not every node of the Pod's types.
//
// The groups come from the index and the room from the cycle's snapshot
// (nodeInfo); a node read whose snapshot labels or devices say other than
// its group (the two handlers a moment apart), or that the snapshot does not
// hold, makes it not tell (ok false). members is the number of nodes in the
// groups (-1 when the Pod is not one it orders).
func bestOfTypes(pod *v1.Pod, index *Index, nodeInfo func(string) (fwk.NodeInfo, error)) (names []string, members int, ok bool) {
	preferred, ok := preferencesOf(pod)
	if !ok || !orderable(pod) {
		return nil, -1, false
	}
	required := nodeaffinity.GetRequiredNodeAffinity(pod)
	keys, byGroup := requiredKeys(pod)
	for _, k := range preferred.keys {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	groups, ok := index.Groups(pod, keys)
	if !ok {
		return nil, -1, false
	}
	need := demandOf(pod, nil)
	type level struct {
		score  int64
		groups []*Group
	}
	var levels []level
	var uncounted []string
	for i := range groups {
		g := &groups[i]
		members += len(g.Nodes)
		labelled := &v1.Node{ObjectMeta: metav1.ObjectMeta{Labels: g.Labels}}
		if byGroup {
			if matches, err := required.Match(labelled); err != nil || !matches {
				continue // NodeAffinity's Filter refuses them (the index keeps every node of an `In`)
			}
		}
		if !need.countedBy(g.Devices) {
			uncounted = append(uncounted, matching(required, byGroup, g)...)
			continue
		}
		score := preferred.score(labelled)
		at := slices.IndexFunc(levels, func(l level) bool { return l.score == score })
		if at < 0 {
			at = len(levels)
			levels = append(levels, level{score: score})
		}
		levels[at].groups = append(levels[at].groups, g)
	}
	slices.SortFunc(levels, func(a, b level) int { return cmp.Compare(b.score, a.score) })
	for _, l := range levels {
		for _, g := range l.groups {
			for _, name := range matching(required, byGroup, g) {
				info, err := nodeInfo(name)
				if err != nil || info.Node() == nil || !need.counted(info) || !sameLabels(info.Node().Labels, g.Labels, keys) {
					return nil, members, false
				}
				if need.fits(pod, info) {
					names = append(names, name)
				}
			}
		}
		if len(names) > 0 {
			return append(names, uncounted...), members, true
		}
	}
	return nil, members, false
}

// matching: the group's nodes that the required affinity admits, when it
// names nodes (byGroup false: the whole group, the match being the group's).
func matching(required nodeaffinity.RequiredNodeAffinity, byGroup bool, g *Group) []string {
	if byGroup {
		return g.Nodes
	}
	var names []string
	for _, name := range g.Nodes {
		named := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: g.Labels}}
		if matches, err := required.Match(named); err == nil && matches {
			names = append(names, name)
		}
	}
	return names
}

// requiredKeys: the label keys the Pod's nodeSelector and required affinity
// name, and whether they alone decide the match (byGroup; false when a term
// names fields, metadata.name: then each node is matched on its own).
func requiredKeys(pod *v1.Pod) (keys []string, byGroup bool) {
	for k := range pod.Spec.NodeSelector {
		keys = append(keys, k)
	}
	byGroup = true
	for _, term := range requiredTerms(pod) {
		byGroup = byGroup && len(term.MatchFields) == 0
		for _, e := range term.MatchExpressions {
			if !slices.Contains(keys, e.Key) {
				keys = append(keys, e.Key)
			}
		}
	}
	slices.Sort(keys) // Groups caches by keys: one order for one Pod shape
	return keys, byGroup
}

// sameLabels: the node carries the group's values of keys, and no other of them.
func sameLabels(node, group map[string]string, keys []string) bool {
	for _, k := range keys {
		v, has := node[k]
		if w, in := group[k]; has != in || v != w {
			return false
		}
	}
	return true
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
		// ephemeral storage and Pod slots are not counted here: at worst a node kept that a Filter refuses
		if !isBaseResource(name) && !q.IsZero() { // NodeResourcesFit skips a zero request too
			d.devices = append(d.devices, amount{name, q.Value()})
		}
	}
	for _, r := range scored {
		if q, ok := requests[v1.ResourceName(r.Name)]; ok && !q.IsZero() {
			d.shares = append(d.shares, share{amount{v1.ResourceName(r.Name), q.Value()}, r.Weight})
		}
	}
	return d
}

// isBaseResource: what every node counts; the rest are devices (extended
// resources, hugepages), which a node may not count at all.
func isBaseResource(name v1.ResourceName) bool {
	switch name {
	case v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage, v1.ResourcePods:
		return true
	}
	return false
}

// countedBy says whether a node counting `devices` counts every device the Pod asks for.
func (d demand) countedBy(devices sets.Set[string]) bool {
	for _, a := range d.devices {
		if !devices.Has(string(a.name)) {
			return false
		}
	}
	return true
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
