package nodelabelindex

import (
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// Group is nodes of a Pod's types that share the values of some label keys
// (Labels holds those of them a node carries) and the devices they count.
type Group struct {
	Labels  map[string]string
	Devices sets.Set[string] // the devices the nodes' allocatable counts (devicesKey)
	Nodes   []string
}

// shape is the groups of one Pod shape (its required affinity, nodeSelector
// and the keys grouped by), kept as nodes come, go and change: a cycle reads
// them as they are, and a node event moves one node between two groups,
// never regroups the class. The list handed out is never changed in place:
// a change makes a new list, and a group's Nodes are appended to only past
// the length any reader holds, or copied.
type shape struct {
	terms    []v1.NodeSelectorTerm
	selector map[string]string
	keys     []string
	at       map[string]int // groupID -> place in groups
	groups   []Group
	empty    int // groups left with no node
}

// Groups partitions the nodes of the Pod's types by the values of `keys`
// and the devices each node counts, so that what depends only on those (a
// preferred affinity's score, a required affinity's match) is worked out
// once a group, not once a node; ok false when the index does not narrow
// the Pod (Narrows). A node is in a group when, for some required term, it
// carries a value each `In` expression lists and every nodeSelector label:
// every node that matches the Pod's required affinity, and some that its
// other expressions refuse. The groups are shared: the caller must not
// change them.
func (x *Index) Groups(pod *v1.Pod, keys []string) ([]Group, bool) {
	terms, key, ok := affinityOf(pod)
	if !ok {
		return nil, false
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	byKeys := key + "@" + strings.Join(keys, "\x00")
	if s, ok := x.shapes[byKeys]; ok {
		return s.groups, true
	}
	s := &shape{terms: terms, selector: pod.Spec.NodeSelector, keys: slices.Clone(keys), at: map[string]int{}}
	candidates, _ := x.candidatesOf(key, terms, pod.Spec.NodeSelector)
	for name := range candidates {
		if labels := x.labels[name]; s.holds(labels) {
			s.add(name, labels, x.devices[name])
		}
	}
	if len(x.shapes) >= maxCached {
		clear(x.shapes)
	}
	x.shapes[byKeys] = s
	x.built++
	return s.groups, true
}

// regroup moves node `name` from where its labels and devices were to
// where they are now, in every shape kept (nil labels: not indexed).
func (x *Index) regroup(name string, was map[string]string, wasDevices string, now map[string]string, nowDevices string) {
	for _, s := range x.shapes {
		in, stays := s.holds(was), s.holds(now)
		if in && stays && groupID(was, wasDevices, s.keys) == groupID(now, nowDevices, s.keys) {
			continue
		}
		s.groups = slices.Clone(s.groups) // the list readers hold stays as it was
		if in {
			s.remove(name, was, wasDevices)
		}
		if stays {
			s.add(name, now, nowDevices)
		}
	}
}

// holds says whether a node of these labels is one of the shape's (nil: no node).
func (s *shape) holds(labels map[string]string) bool {
	if labels == nil {
		return false
	}
	for k, v := range s.selector {
		if w, has := labels[k]; !has || w != v {
			return false
		}
	}
	if len(s.terms) == 0 {
		return true
	}
	for _, term := range s.terms {
		if !slices.ContainsFunc(term.MatchExpressions, func(e v1.NodeSelectorRequirement) bool {
			v, has := labels[e.Key]
			return isIn(e) && (!has || !slices.Contains(e.Values, v))
		}) {
			return true
		}
	}
	return false
}

func (s *shape) add(name string, labels map[string]string, devices string) {
	id := groupID(labels, devices, s.keys)
	i, seen := s.at[id]
	if !seen {
		g := Group{Labels: map[string]string{}, Devices: sets.New[string]()}
		for _, k := range s.keys {
			if v, has := labels[k]; has {
				g.Labels[k] = v
			}
		}
		if devices != "" {
			g.Devices.Insert(strings.Split(devices, "\x00")...)
		}
		i = len(s.groups)
		s.at[id] = i
		s.groups = append(s.groups, g)
	} else if len(s.groups[i].Nodes) == 0 {
		s.empty--
	}
	s.groups[i].Nodes = append(s.groups[i].Nodes, name)
}

func (s *shape) remove(name string, labels map[string]string, devices string) {
	i := s.at[groupID(labels, devices, s.keys)]
	s.groups[i].Nodes = slices.DeleteFunc(slices.Clone(s.groups[i].Nodes), func(n string) bool { return n == name })
	if len(s.groups[i].Nodes) > 0 {
		return
	}
	// Groups of values no node carries any more are dropped once they are
	// half of the list, so that a shape keyed by values that churn (host
	// names) does not grow without bound.
	if s.empty++; s.empty*2 < len(s.groups) {
		return
	}
	kept := s.groups[:0:0]
	clear(s.at)
	for _, g := range s.groups {
		if len(g.Nodes) > 0 {
			s.at[groupID(g.Labels, strings.Join(sets.List(g.Devices), "\x00"), s.keys)] = len(kept)
			kept = append(kept, g)
		}
	}
	s.groups, s.empty = kept, 0
}

// groupID: the values of keys a node carries and the devices it counts.
func groupID(labels map[string]string, devices string, keys []string) string {
	var id strings.Builder
	for _, k := range keys {
		if v, has := labels[k]; has {
			id.WriteString("=" + v)
		}
		id.WriteByte(0) // a label value holds no NUL
	}
	id.WriteString(devices)
	return id.String()
}
