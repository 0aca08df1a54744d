// Package nodelabelindex narrows a Pod's scheduling cycle to the nodes whose
// labels its required node affinity names, from an index of node labels kept
// on node events. With percentageOfNodesToScore: 100 every Filter plugin runs
// on every node it is given; given only the nodes of the Pod's GPU types, the
// cost of a cycle follows the class, not the whole cluster. Nothing is
// sampled, so the order the profiles score stays exact.
package nodelabelindex

import (
	"hash/maphash"
	"slices"
	"sort"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// Beyond this many distinct affinities the candidate cache starts over: the
// webhook writes one affinity per class and set of types present, so a
// cluster has a handful; a flood of distinct ones must not grow it unbounded.
const maxCached = 1024

// Index maps each label key and value to the nodes that carry it. It is
// written by the node informer's handlers alone (and rebuilt from its lister
// on a repair) and read by PreFilter.
type Index struct {
	mu      sync.Mutex
	labels  map[string]map[string]string           // node -> its labels, as last indexed
	devices map[string]string                      // node -> devicesKey of what it counts, as last indexed
	byLabel map[string]map[string]sets.Set[string] // key -> value -> nodes
	cached  map[string]sets.Set[string]            // affinity -> candidates, valid for the labels as now
	shapes  map[string]*shape                      // affinity and keys -> their Groups, kept as nodes change
	built   int                                    // shapes grouped from scratch (a cold cycle's work)
	names   uint64                                 // namesOf the nodes indexed, kept as they come and go
	gen     uint64                                 // counts the changes that could change a Pod's candidates
}

// nameSeed keys namesOf for the life of the process: the index and the
// snapshot's side are hashed alike, and node names chosen to collide cannot
// be chosen without it.
var nameSeed = maphash.MakeSeed()

// nameHash: a node's part of namesOf.
func nameHash(name string) uint64 { return maphash.String(nameSeed, name) }

func NewIndex() *Index {
	return &Index{
		labels:  map[string]map[string]string{},
		devices: map[string]string{},
		byLabel: map[string]map[string]sets.Set[string]{},
		cached:  map[string]sets.Set[string]{},
		shapes:  map[string]*shape{},
	}
}

// SetNode indexes a node added or updated: Set with its labels and the
// devices its allocatable counts.
func (x *Index) SetNode(node *v1.Node) (gen uint64, was map[string]string, changed bool) {
	return x.Set(node.Name, node.Labels, devicesKey(node.Status.Allocatable))
}

// Set records the labels of node `name` (added or updated), and devicesKey
// of what it counts, and returns the index's generation after it, the labels
// it held before (nil for a node it did not hold) and whether it changed
// anything. A node whose labels and devices did not change (a status update,
// a heartbeat) costs two comparisons and keeps the cached candidates.
func (x *Index) Set(name string, labels map[string]string, devices string) (gen uint64, was map[string]string, changed bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	old, known := x.labels[name]
	if known && equal(old, labels) {
		if was := x.devices[name]; was != devices {
			x.devices[name] = devices
			x.regroup(name, old, was, labels, devices)
			return x.gen, old, true
		}
		return x.gen, old, false
	}
	x.remove(name, old)
	kept := make(map[string]string, len(labels))
	for k, v := range labels {
		kept[k] = v
		values := x.byLabel[k]
		if values == nil {
			values = map[string]sets.Set[string]{}
			x.byLabel[k] = values
		}
		if values[v] == nil {
			values[v] = sets.New[string]()
		}
		values[v].Insert(name)
	}
	if !known {
		x.names ^= nameHash(name)
	}
	x.regroup(name, old, x.devices[name], kept, devices)
	x.labels[name], x.devices[name] = kept, devices
	x.gen++
	clear(x.cached)
	return x.gen, old, true
}

// Delete forgets node `name`.
func (x *Index) Delete(name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if old, known := x.labels[name]; known {
		x.regroup(name, old, x.devices[name], nil, "")
		x.remove(name, old)
		delete(x.labels, name)
		delete(x.devices, name)
		x.names ^= nameHash(name)
		x.gen++
		clear(x.cached)
	}
}

// Rebuild makes the index hold exactly the nodes `list` returns, whatever it
// held: the repair when it disagrees with the scheduler's snapshot for longer
// than events in flight explain. It lists under the index's lock, so that no
// event the handlers apply meanwhile is overwritten by an older list; events
// the informer has yet to hand them are applied after it as before, and each
// node ends as its last event left it.
func (x *Index) Rebuild(list func() ([]*v1.Node, error)) (int, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	nodes, err := list()
	if err != nil {
		return 0, err
	}
	fresh := NewIndex()
	for _, n := range nodes {
		fresh.SetNode(n)
	}
	x.labels, x.devices, x.byLabel, x.names = fresh.labels, fresh.devices, fresh.byLabel, fresh.names
	x.gen++
	clear(x.cached)
	clear(x.shapes)
	return len(nodes), nil
}

// Names is namesOf the nodes indexed and their number: equal to the
// snapshot's, the index holds the snapshot's nodes (maphash's 64 bits, keyed
// per process: a different set matches with odds of 2^-64).
func (x *Index) Names() (hash uint64, count int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.names, len(x.labels)
}

// Generation changes whenever a Pod's candidates could: a node indexed,
// relabelled or forgotten.
func (x *Index) Generation() uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.gen
}

func (x *Index) remove(name string, labels map[string]string) {
	for k, v := range labels {
		nodes := x.byLabel[k][v]
		nodes.Delete(name)
		if nodes.Len() == 0 {
			delete(x.byLabel[k], v)
			if len(x.byLabel[k]) == 0 {
				delete(x.byLabel, k)
			}
		}
	}
}

// Len is the number of nodes indexed.
func (x *Index) Len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.labels)
}

// Candidates returns a superset of the nodes that satisfy the Pod's
// nodeSelector and required node affinity, or ok false when they do not
// narrow it (a term with no `In` expression admits nodes of any label). The
// set is shared with later calls: the caller must not change it.
//
// Terms are ORed, so the candidates are the union over the terms; within a
// term (ANDed with the nodeSelector) the smallest set one `In` expression or
// nodeSelector entry allows is enough, since NodeAffinity's Filter checks
// every expression of each candidate anyway.
func (x *Index) Candidates(pod *v1.Pod) (sets.Set[string], bool) {
	terms, key, ok := affinityOf(pod)
	if !ok {
		return nil, false
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.candidatesOf(key, terms, pod.Spec.NodeSelector)
}

// affinityOf: the Pod's required terms and their affinityKey; ok false when
// they do not narrow: neither terms nor a nodeSelector, or a term with no
// `In` expression and no nodeSelector beside it (it admits nodes of any label).
func affinityOf(pod *v1.Pod) (terms []v1.NodeSelectorTerm, key string, ok bool) {
	terms = requiredTerms(pod)
	if len(terms) == 0 && len(pod.Spec.NodeSelector) == 0 {
		return nil, "", false
	}
	for _, term := range terms {
		if len(pod.Spec.NodeSelector) == 0 && !slices.ContainsFunc(term.MatchExpressions, isIn) {
			return nil, "", false
		}
	}
	return terms, affinityKey(terms, pod.Spec.NodeSelector), true
}

// Narrows says whether the index narrows the Pod's cycle: Candidates' ok,
// without working them out.
func (x *Index) Narrows(pod *v1.Pod) bool {
	_, _, ok := affinityOf(pod)
	return ok
}

func isIn(e v1.NodeSelectorRequirement) bool { return e.Operator == v1.NodeSelectorOpIn }

// candidatesOf is Candidates under the lock, for the affinity `key` identifies.
func (x *Index) candidatesOf(key string, terms []v1.NodeSelectorTerm, selector map[string]string) (sets.Set[string], bool) {
	if found, ok := x.cached[key]; ok {
		return found, found != nil
	}
	found := x.candidates(terms, selector)
	if len(x.cached) >= maxCached {
		clear(x.cached)
	}
	x.cached[key] = found
	return found, found != nil
}

// devicesKey names the extended resources (devices, hugepages) an
// allocatable counts, sorted: what decides whether a node counts the devices
// a Pod asks for (order.go's demand).
func devicesKey(allocatable v1.ResourceList) string {
	var names []string
	for name := range allocatable {
		if !isBaseResource(name) {
			names = append(names, string(name))
		}
	}
	sort.Strings(names)
	return strings.Join(names, "\x00")
}

// candidates is Candidates under the lock; nil means not narrowed.
func (x *Index) candidates(terms []v1.NodeSelectorTerm, selector map[string]string) sets.Set[string] {
	var fromSelector []sets.Set[string]
	for k, v := range selector {
		fromSelector = append(fromSelector, x.byLabel[k][v])
	}
	if len(terms) == 0 {
		return copyOf(smallest(fromSelector))
	}
	union := sets.New[string]()
	for _, term := range terms {
		options := fromSelector
		for _, e := range term.MatchExpressions {
			if e.Operator == v1.NodeSelectorOpIn {
				options = append(options[:len(options):len(options)], x.nodesWith(e.Key, e.Values))
			}
		}
		if len(options) == 0 {
			return nil
		}
		union = union.Union(smallest(options))
	}
	return union
}

func (x *Index) nodesWith(key string, values []string) sets.Set[string] {
	nodes := sets.New[string]()
	for _, v := range values {
		nodes = nodes.Union(x.byLabel[key][v])
	}
	return nodes
}

func requiredTerms(pod *v1.Pod) []v1.NodeSelectorTerm {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	return a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
}

// affinityKey identifies what Candidates reads of a Pod: the `In` expressions
// of each term and the nodeSelector. Pods of one class and inventory share it.
func affinityKey(terms []v1.NodeSelectorTerm, selector map[string]string) string {
	var b strings.Builder
	for _, term := range terms {
		b.WriteString("|")
		for _, e := range term.MatchExpressions {
			if e.Operator == v1.NodeSelectorOpIn {
				b.WriteString(e.Key + "\x00" + strings.Join(e.Values, "\x00") + "\x01")
			}
		}
	}
	keys := make([]string, 0, len(selector))
	for k := range selector {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b.WriteString("#")
	for _, k := range keys {
		b.WriteString(k + "\x00" + selector[k] + "\x01")
	}
	return b.String()
}

func smallest(options []sets.Set[string]) sets.Set[string] {
	if len(options) == 0 {
		return nil
	}
	best := options[0]
	for _, s := range options[1:] {
		if s.Len() < best.Len() {
			best = s
		}
	}
	return best
}

// copyOf keeps a cached result apart from the index's own sets, which change
// with the next node event.
func copyOf(s sets.Set[string]) sets.Set[string] {
	if s == nil {
		return sets.New[string]()
	}
	return s.Clone()
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
