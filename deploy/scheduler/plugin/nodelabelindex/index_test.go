package nodelabelindex

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

const product = "nvidia.com/gpu.product"

func node(name string, labels map[string]string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func in(key string, values ...string) v1.NodeSelectorRequirement {
	return v1.NodeSelectorRequirement{Key: key, Operator: v1.NodeSelectorOpIn, Values: values}
}

func pod(selector map[string]string, terms ...[]v1.NodeSelectorRequirement) *v1.Pod {
	p := &v1.Pod{Spec: v1.PodSpec{NodeSelector: selector}}
	if terms != nil {
		required := &v1.NodeSelector{}
		for _, t := range terms {
			required.NodeSelectorTerms = append(required.NodeSelectorTerms, v1.NodeSelectorTerm{MatchExpressions: t})
		}
		p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: required}}
	}
	return p
}

// A fleet in the shape gpu-class places on: a few best-type nodes, many of
// other types, CPU-only nodes, and one type labelled by hand (gpu-type).
func fleet() []*v1.Node {
	nodes := []*v1.Node{
		node("h100-0", map[string]string{product: "NVIDIA-H100-80GB-HBM3", "zone": "a"}),
		node("h100-1", map[string]string{product: "NVIDIA-H100-80GB-HBM3", "zone": "b"}),
		node("hand-a100", map[string]string{"gpu-type": "A100"}),
	}
	for i := 0; i < 20; i++ {
		nodes = append(nodes, node(fmt.Sprintf("l4-%d", i), map[string]string{product: "NVIDIA-L4", "zone": "a"}))
		nodes = append(nodes, node(fmt.Sprintf("cpu-%d", i), map[string]string{"zone": "b"}))
	}
	return nodes
}

func TestCandidates(t *testing.T) {
	for _, c := range []struct {
		name     string
		pod      *v1.Pod
		narrowed bool
		want     []string // exactly these (a superset of the matching nodes)
	}{
		{name: "no-affinity-not-narrowed", pod: pod(nil)},
		{name: "one-type", pod: pod(nil, []v1.NodeSelectorRequirement{in(product, "NVIDIA-H100-80GB-HBM3")}),
			narrowed: true, want: []string{"h100-0", "h100-1"}},
		{name: "types-of-two-labellings-in-two-terms",
			pod: pod(nil, []v1.NodeSelectorRequirement{in(product, "NVIDIA-H100-80GB-HBM3")},
				[]v1.NodeSelectorRequirement{in("gpu-type", "A100")}),
			narrowed: true, want: []string{"h100-0", "h100-1", "hand-a100"}},
		{name: "smallest-expression-of-a-term",
			pod:      pod(nil, []v1.NodeSelectorRequirement{in("zone", "a"), in(product, "NVIDIA-H100-80GB-HBM3")}),
			narrowed: true, want: []string{"h100-0", "h100-1"}},
		{name: "a-term-without-in-admits-any-node",
			pod: pod(nil, []v1.NodeSelectorRequirement{in(product, "NVIDIA-H100-80GB-HBM3")},
				[]v1.NodeSelectorRequirement{{Key: "gpu-type", Operator: v1.NodeSelectorOpExists}})},
		{name: "node-selector-alone", pod: pod(map[string]string{"gpu-type": "A100"}),
			narrowed: true, want: []string{"hand-a100"}},
		{name: "node-selector-narrower-than-the-term",
			pod:      pod(map[string]string{"gpu-type": "A100"}, []v1.NodeSelectorRequirement{in("zone", "a", "b")}),
			narrowed: true, want: []string{"hand-a100"}},
		{name: "no-node-has-the-type", pod: pod(nil, []v1.NodeSelectorRequirement{in(product, "Tesla-T4")}),
			narrowed: true, want: []string{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := NewIndex()
			nodes := fleet()
			for _, n := range nodes {
				x.SetNode(n)
			}
			got, narrowed := x.Candidates(c.pod)
			if narrowed != c.narrowed {
				t.Fatalf("narrowed %v, want %v", narrowed, c.narrowed)
			}
			if !narrowed {
				return
			}
			if !got.Equal(sets.New(c.want...)) {
				t.Errorf("candidates %v, want %v", sets.List(got), c.want)
			}
			required := nodeaffinity.GetRequiredNodeAffinity(c.pod)
			for _, n := range nodes {
				if ok, _ := required.Match(n); ok && !got.Has(n.Name) {
					t.Errorf("%s matches the Pod's affinity but is not a candidate", n.Name)
				}
			}
		})
	}
}

func TestEventsKeepTheIndexExact(t *testing.T) {
	h100 := pod(nil, []v1.NodeSelectorRequirement{in(product, "NVIDIA-H100-80GB-HBM3")})
	for _, c := range []struct {
		name   string
		events func(x *Index)
		want   []string
		len    int
	}{
		{name: "added", events: func(x *Index) { x.Set("h100-9", map[string]string{product: "NVIDIA-H100-80GB-HBM3"}, "") },
			want: []string{"h100-0", "h100-1", "h100-9"}, len: 44},
		{name: "deleted", events: func(x *Index) { x.Delete("h100-0") }, want: []string{"h100-1"}, len: 42},
		{name: "relabelled-away", events: func(x *Index) { x.Set("h100-1", map[string]string{product: "NVIDIA-L4"}, "") },
			want: []string{"h100-0"}, len: 43},
		{name: "relabelled-in", events: func(x *Index) { x.Set("l4-3", map[string]string{product: "NVIDIA-H100-80GB-HBM3"}, "") },
			want: []string{"h100-0", "h100-1", "l4-3"}, len: 43},
		{name: "status-update-same-labels", events: func(x *Index) {
			x.Set("h100-0", map[string]string{product: "NVIDIA-H100-80GB-HBM3", "zone": "a"}, "")
		}, want: []string{"h100-0", "h100-1"}, len: 43},
		{name: "deleting-an-unknown-node", events: func(x *Index) { x.Delete("nowhere") },
			want: []string{"h100-0", "h100-1"}, len: 43},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := NewIndex()
			for _, n := range fleet() {
				x.SetNode(n)
			}
			// A cached answer from before the events must not outlive them.
			if got, _ := x.Candidates(h100); got.Len() != 2 {
				t.Fatalf("before the events: %v", sets.List(got))
			}
			c.events(x)
			got, _ := x.Candidates(h100)
			if !got.Equal(sets.New(c.want...)) {
				t.Errorf("candidates %v, want %v", sets.List(got), c.want)
			}
			if x.Len() != c.len {
				t.Errorf("%d nodes indexed, want %d", x.Len(), c.len)
			}
		})
	}
}

func TestLabelsAreCopied(t *testing.T) {
	x := NewIndex()
	labels := map[string]string{product: "NVIDIA-L4"}
	x.Set("l4", labels, "")
	labels[product] = "NVIDIA-H100-80GB-HBM3" // the caller's map changes after the event
	x.Delete("l4")
	// The index forgets the node under the labels it indexed, not under what the caller's map holds now.
	if got, _ := x.Candidates(pod(nil, []v1.NodeSelectorRequirement{in(product, "NVIDIA-L4")})); got.Has("l4") || x.Len() != 0 {
		t.Errorf("the index followed a map it does not own: %v, %d nodes", sets.List(got), x.Len())
	}
}

// A node event moves the one node between the groups kept for each Pod
// shape: the groups equal those of an index built afresh, none is grouped
// again from scratch, and a list handed out before stays as it was.
func TestNodeEventsMoveOneNodeNotTheClass(t *testing.T) {
	h100, a100 := "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"
	of := pod(nil, []v1.NodeSelectorRequirement{in(product, h100, a100)})
	keys := []string{product, "zone"}
	gpus := func(n *v1.Node, resources ...v1.ResourceName) *v1.Node {
		n.Status.Allocatable = v1.ResourceList{}
		for _, r := range resources {
			n.Status.Allocatable[r] = resource.MustParse("8")
		}
		return n
	}
	for _, c := range []struct {
		name  string
		event func(x *Index)
	}{
		{"a node of the types added", func(x *Index) { x.SetNode(gpus(node("h100-9", map[string]string{product: h100}), gpu)) }},
		{"a node of another type added", func(x *Index) { x.SetNode(node("l4-9", map[string]string{product: "NVIDIA-L4"})) }},
		{"relabelled between groups", func(x *Index) {
			x.SetNode(gpus(node("h100-0", map[string]string{product: h100, "zone": "b"}), gpu))
		}},
		{"relabelled out of the types", func(x *Index) { x.SetNode(node("h100-1", map[string]string{product: "NVIDIA-L4"})) }},
		{"relabelled into the types", func(x *Index) { x.SetNode(gpus(node("l4-3", map[string]string{product: a100}), gpu)) }},
		{"its devices no longer counted (a DRA driver's)", func(x *Index) {
			x.SetNode(node("h100-1", map[string]string{product: h100, "zone": "b"}))
		}},
		{"deleted", func(x *Index) { x.Delete("h100-0") }},
		{"every node of a group deleted", func(x *Index) { x.Delete("h100-0"); x.Delete("h100-1") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := NewIndex()
			nodes := fleet()
			for _, n := range nodes {
				x.SetNode(gpus(n, gpu))
			}
			before, _ := x.Groups(of, keys)
			kept := groupsByID(before, keys)
			c.event(x)
			got, _ := x.Groups(of, keys)
			if x.built != 1 {
				t.Errorf("grouped from scratch %d times, want once", x.built)
			}
			if after := groupsByID(before, keys); !maps.EqualFunc(after, kept, slices.Equal) {
				t.Errorf("the list handed out before changed: %v, was %v", after, kept)
			}
			fresh := NewIndex()
			for name, labels := range x.labels {
				fresh.Set(name, labels, x.devices[name])
			}
			want, _ := fresh.Groups(of, keys)
			if g, w := groupsByID(got, keys), groupsByID(want, keys); !maps.EqualFunc(g, w, slices.Equal) {
				t.Errorf("groups %v, built afresh %v", g, w)
			}
		})
	}
}

// groupsByID: each group's nodes, sorted, by its values and devices (groups left empty aside).
func groupsByID(groups []Group, keys []string) map[string][]string {
	out := map[string][]string{}
	for _, g := range groups {
		if len(g.Nodes) > 0 {
			out[groupID(g.Labels, strings.Join(sets.List(g.Devices), "\x00"), keys)] = slices.Sorted(slices.Values(g.Nodes))
		}
	}
	return out
}
