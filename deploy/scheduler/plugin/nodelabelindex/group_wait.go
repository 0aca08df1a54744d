package nodelabelindex

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/util"
)

// A group (gpu-class.io/group) with a wait waits as one: until its first Pod
// binds, its Pods are given only the nodes of one value of the label its
// Pods meet on (the webhook's Pod affinity topologyKey, the product label)
// whose free devices hold every Pod of the group; while the wait runs, only
// of its best type, and once it is spent, of the first type in its order
// that holds it. Once a Pod of it is bound (or assumed), the others follow it
// there by their Pod affinity, as any group's do.
const (
	groupLabel          = "gpu-class.io/group"
	groupSizeAnnotation = "gpu-class.io/group-size"
	lwsSizeAnnotation   = "leaderworkerset.sigs.k8s.io/size"
)

type group struct {
	name, topologyKey string
	size              int
	// kept within one domain (gpu-class.io/group-required-topology): the
	// webhook writes the domain's term before the product's, and the group
	// starts only where one value of the domain's key holds all of it,
	// however long that takes (waitOf gives it a wait with no budget)
	whole bool
}

// groupOf reads the Pod's group as the webhook wrote it: its label, and the
// topologyKey of the required Pod affinity term that selects that label.
func groupOf(pod *v1.Pod) *group {
	name := pod.Labels[groupLabel]
	a := pod.Spec.Affinity
	if name == "" || a == nil || a.PodAffinity == nil {
		return nil
	}
	var found *group
	for _, term := range a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		if term.LabelSelector == nil || term.LabelSelector.MatchLabels[groupLabel] != name || term.TopologyKey == "" {
			continue
		}
		if found != nil {
			found.whole = true // a second term of the group: the first is its domain's
			break
		}
		size := 1
		for _, key := range []string{groupSizeAnnotation, lwsSizeAnnotation} {
			if n, err := strconv.Atoi(pod.Annotations[key]); err == nil && n > 0 {
				size = n
				break
			}
		}
		found = &group{name: name, topologyKey: term.TopologyKey, size: size}
	}
	return found
}

// started: a Pod of the group, other than this one, is bound or assumed on a node of the cycle.
func (g *group) started(pod *v1.Pod, nodes []fwk.NodeInfo) bool {
	for _, info := range nodes {
		for _, p := range info.GetPodsWithAffinity() {
			other := p.GetPod()
			if other.Namespace == pod.Namespace && other.Labels[groupLabel] == g.name && other.UID != pod.UID {
				return true
			}
		}
	}
	return false
}

// levels: the Pod's preferred terms by weight, heaviest first (terms of one weight together).
func levels(p *preferences) [][]labels.Selector {
	terms := slices.Clone(p.terms)
	slices.SortStableFunc(terms, func(a, b weightedTerm) int { return cmp.Compare(b.weight, a.weight) })
	var out [][]labels.Selector
	for i, t := range terms {
		if i > 0 && t.weight == terms[i-1].weight {
			out[len(out)-1] = append(out[len(out)-1], t.selector)
			continue
		}
		out = append(out, []labels.Selector{t.selector})
	}
	return out
}

// holdingNodes returns the nodes of the first value of g's topology key,
// among the nodes of `level` the Pod may use, whose free devices hold the
// whole group; nil when no value does.
func holdingNodes(pod *v1.Pod, g *group, level []labels.Selector, nodes []fwk.NodeInfo) sets.Set[string] {
	need := demandOf(pod, nil)
	if len(need.devices) == 0 {
		return nil
	}
	device := need.devices[0]
	required := nodeaffinity.GetRequiredNodeAffinity(pod)
	holds := map[string]int64{}
	names := map[string][]string{}
	var values []string
	for _, info := range nodes {
		node := info.Node()
		value, has := node.Labels[g.topologyKey]
		if !has || !slices.ContainsFunc(level, func(s labels.Selector) bool { return s.Matches(labels.Set(node.Labels)) }) {
			continue
		}
		if matches, err := required.Match(node); err != nil || !matches || !need.counted(info) || !need.fits(pod, info) {
			continue
		}
		free := info.GetAllocatable().GetScalarResources()[device.name] - info.GetRequested().GetScalarResources()[device.name]
		if _, seen := holds[value]; !seen {
			values = append(values, value)
		}
		holds[value] += free / device.count
		names[value] = append(names[value], node.Name)
	}
	slices.Sort(values)
	best, found := "", false
	for _, value := range values {
		// the tightest value that holds it: larger free domains stay for larger groups
		if holds[value] >= int64(g.size) && (!found || holds[value] < holds[best]) {
			best, found = value, true
		}
	}
	if !found {
		return nil
	}
	return sets.New(names[best]...)
}

// preFilterGroup places the first Pod of a group with a wait: ok false
// leaves the Pod to the rest of PreFilter (its wait spent and no type holds
// the group: it goes where the class sends it, and the others follow).
func (pl *NodeLabelIndex) preFilterGroup(ctx klog.Logger, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo,
	g *group, until time.Time, budget time.Duration, waiting bool) (*fwk.PreFilterResult, *fwk.Status, bool) {
	prefs, ok := preferencesOf(pod)
	if !ok {
		return nil, nil, false
	}
	for i, level := range levels(prefs) {
		if waiting && i > 0 {
			break
		}
		if names := holdingNodes(pod, g, level, nodes); names != nil {
			return &fwk.PreFilterResult{NodeNames: names}, nil, true
		}
	}
	if !waiting {
		if !g.whole {
			return nil, nil, false
		}
		// no budget to wake it at: it comes back on the events that may give a domain room (groupMayStart, groupNodeChanged)
		message := fmt.Sprintf("group %s of %d Pods waits for a %s domain with room for all of it", g.name, g.size, g.topologyKey)
		state.Write(waitingKey, waitingState{message})
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, message), true
	}
	message := fmt.Sprintf("group %s of %d Pods %s", g.name, g.size, waitMessage(pod, pl.now(), until, budget))
	state.Write(waitingKey, waitingState{message})
	pl.wakes.at(ctx, pod, until, pl.wake)
	return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, message), true
}

// groupMayStart queues a waiting group's Pod when a Pod of its group is
// bound (it follows), or when a Pod holding devices leaves (room for the
// whole group may have come): this plugin alone turned it away, so no other
// plugin's hint would.
func (pl *NodeLabelIndex) groupMayStart(_ klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	if !groupWaits(pod) {
		return fwk.QueueSkip, nil
	}
	was, now, err := util.As[*v1.Pod](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	if now != nil && was == nil {
		return boolHint(now.Namespace == pod.Namespace && now.Labels[groupLabel] == pod.Labels[groupLabel]), nil
	}
	if was != nil && now == nil {
		return boolHint(len(demandOf(was, nil).devices) > 0), nil
	}
	return fwk.QueueSkip, nil
}

// groupNodeChanged queues a waiting group's Pod when a node its affinity
// admits changes its devices, taints or readiness: a node an autoscaler made
// becomes usable so, after the event that added it.
func (pl *NodeLabelIndex) groupNodeChanged(_ klog.Logger, pod *v1.Pod, _, newObj any) (fwk.QueueingHint, error) {
	if !groupWaits(pod) {
		return fwk.QueueSkip, nil
	}
	_, node, err := util.As[*v1.Node](nil, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	matches, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)
	return boolHint(err == nil && matches), err
}

// groupWaits: the Pod is of a group and has a wait (spent or not: its group may not have started), or is
// of a group kept within one domain.
func groupWaits(pod *v1.Pod) bool {
	_, has := pod.Annotations[MaxWaitAnnotation]
	g := groupOf(pod)
	return g != nil && (has || g.whole)
}

func boolHint(queue bool) fwk.QueueingHint {
	if queue {
		return fwk.Queue
	}
	return fwk.QueueSkip
}
