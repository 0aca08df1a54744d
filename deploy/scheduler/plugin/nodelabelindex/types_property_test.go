package nodelabelindex

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// bestByScan is what bestOfTypes must return, worked out the plain way: every
// candidate read from the snapshot, scored by NodeAffinity's own preferred
// terms, matched by its own required affinity, checked for room.
func bestByScan(t *testing.T, pod *v1.Pod, candidates []string, infos map[string]fwk.NodeInfo) ([]string, bool) {
	if !orderable(pod) {
		return nil, false
	}
	terms, err := nodeaffinity.NewPreferredSchedulingTerms(pod.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution)
	if err != nil {
		t.Fatal(err)
	}
	required := nodeaffinity.GetRequiredNodeAffinity(pod)
	need := demandOf(pod, nil)
	top := int64(-1)
	var names, uncounted []string
	for _, name := range candidates {
		info := infos[name]
		matches, err := required.Match(info.Node())
		if err != nil || !matches {
			continue
		}
		if !need.counted(info) {
			uncounted = append(uncounted, name)
			continue
		}
		if !need.fits(pod, info) {
			continue
		}
		score := terms.Score(info.Node())
		if score > top {
			top, names = score, nil
		}
		if score == top {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil, false
	}
	return append(names, uncounted...), true
}

// heldBy: the candidates that, for some required term, carry a value each
// `In` lists (the nodes Index.Groups holds), read from the labels indexed.
func heldBy(pod *v1.Pod, candidates sets.Set[string], x *Index) int {
	held := 0
	for name := range candidates {
		for _, term := range pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			ins := &v1.NodeSelectorTerm{}
			for _, e := range term.MatchExpressions {
				if e.Operator == v1.NodeSelectorOpIn {
					ins.MatchExpressions = append(ins.MatchExpressions, e)
				}
			}
			selector := nodeaffinity.NewLazyErrorNodeSelector(&v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{*ins}})
			if matches, _ := selector.Match(&v1.Node{ObjectMeta: metav1.ObjectMeta{Labels: x.labels[name]}}); matches &&
				labels.SelectorFromSet(pod.Spec.NodeSelector).Matches(labels.Set(x.labels[name])) {
				held++
				break
			}
		}
	}
	return held
}

var (
	scanProducts = []string{"H100", "A100", "L4", "T4"}
	scanZones    = []string{"a", "b", ""}
)

// randomNode: a node of a random type (labelled by GFD, by hand or both),
// zone, size, load, taint and cordon, counting its GPUs or not (a DRA node).
func randomNode(r *rand.Rand, name string) *v1.Node {
	labels := map[string]string{"kubernetes.io/hostname": name}
	switch p := scanProducts[r.IntN(len(scanProducts))]; r.IntN(4) {
	case 0:
		labels["gpu-type"] = p
	case 1:
		labels[product], labels["gpu-type"] = p, p
	default:
		labels[product] = p
	}
	if z := scanZones[r.IntN(len(scanZones))]; z != "" {
		labels["zone"] = z
	}
	allocatable := v1.ResourceList{v1.ResourceCPU: resource.MustParse("16"), v1.ResourceMemory: resource.MustParse("64Gi")}
	if r.IntN(6) > 0 {
		allocatable[gpu] = *resource.NewQuantity(int64(1+r.IntN(8)), resource.DecimalSI)
	}
	n := &v1.Node{Status: v1.NodeStatus{Allocatable: allocatable}}
	n.Name, n.Labels = name, labels
	if r.IntN(5) == 0 {
		n.Spec.Taints = []v1.Taint{gpuTaint}
	}
	n.Spec.Unschedulable = r.IntN(10) == 0
	return n
}

func infoOf(r *rand.Rand, n *v1.Node) fwk.NodeInfo {
	info := framework.NewNodeInfo()
	info.SetNode(n)
	if gpus := n.Status.Allocatable[gpu]; r.IntN(2) == 0 && gpus.Value() > 0 {
		info.AddPod(requesting(r.Int64N(gpus.Value()+1), r.Int64N(16000)))
	}
	return info
}

// randomPod: a class Pod as the webhook writes it (one required term per
// labelling, `In` the class's types; preferred terms best first, weights
// that may tie), with now and then a nodeSelector, a `NotIn` zone, a term by
// node name or an expression the groups do not hold (Exists).
func randomPod(r *rand.Rand, names []string) *v1.Pod {
	types := slices.Clone(scanProducts)
	r.Shuffle(len(types), func(i, j int) { types[i], types[j] = types[j], types[i] })
	types = types[:1+r.IntN(len(types))]
	p := requesting(int64(r.IntN(3)), int64(r.IntN(3000)))
	var preferred []v1.PreferredSchedulingTerm
	for i, ty := range types {
		for _, key := range []string{product, "gpu-type"} {
			preferred = append(preferred, v1.PreferredSchedulingTerm{Weight: int32(100 - 10*i - 10*r.IntN(2)),
				Preference: v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{in(key, ty)}}})
		}
	}
	terms := []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{in(product, types...)}},
		{MatchExpressions: []v1.NodeSelectorRequirement{in("gpu-type", types...)}}}
	switch r.IntN(5) {
	case 0:
		p.Spec.NodeSelector = map[string]string{"zone": scanZones[r.IntN(2)]}
	case 1:
		terms[0].MatchExpressions = append(terms[0].MatchExpressions, v1.NodeSelectorRequirement{Key: "zone",
			Operator: v1.NodeSelectorOpNotIn, Values: []string{"b"}})
	case 2:
		terms[1].MatchFields = []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: v1.NodeSelectorOpNotIn,
			Values: []string{names[r.IntN(len(names))], names[r.IntN(len(names))]}}}
	case 3:
		terms[0].MatchExpressions = append(terms[0].MatchExpressions, v1.NodeSelectorRequirement{Key: "zone",
			Operator: v1.NodeSelectorOpExists})
	}
	p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution:  &v1.NodeSelector{NodeSelectorTerms: terms},
		PreferredDuringSchedulingIgnoredDuringExecution: preferred}}
	if r.IntN(2) == 0 {
		p.Spec.Tolerations = []v1.Toleration{{Key: gpuTaint.Key, Operator: v1.TolerationOpExists}}
	}
	return p
}

// bestOfTypes, which reads groups of nodes from the index and the room of
// only the levels it walks, returns what a scan of every candidate returns:
// for random fleets and Pods, and after random relabels, resizes, deletes
// and adds (its cached groups must follow them).
func TestBestOfTypesIsTheScanOfEveryCandidate(t *testing.T) {
	const nodes, rounds, pods = 40, 30, 20
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 47))
			x, infos := NewIndex(), map[string]fwk.NodeInfo{}
			var names []string
			for i := range nodes {
				names = append(names, fmt.Sprintf("n-%d", i))
			}
			set := func(name string) {
				n := randomNode(r, name)
				infos[name] = infoOf(r, n)
				x.SetNode(n)
			}
			for _, name := range names {
				set(name)
			}
			lookup := snapshotOf(infos)
			narrowed := 0
			for round := range rounds {
				for range 1 + r.IntN(4) {
					name := names[r.IntN(len(names))]
					if _, has := infos[name]; has && r.IntN(4) == 0 {
						delete(infos, name)
						x.Delete(name)
					} else {
						set(name)
					}
				}
				for i := range pods {
					pod := randomPod(r, names)
					candidates, ok := x.Candidates(pod)
					if !ok {
						t.Fatalf("round %d, Pod %d: the index does not narrow a Pod of types", round, i)
					}
					want, wantOK := bestByScan(t, pod, sets.List(candidates), infos)
					got, members, gotOK := bestOfTypes(pod, x, lookup)
					slices.Sort(want)
					slices.Sort(got)
					if gotOK != wantOK || !slices.Equal(got, want) {
						t.Fatalf("round %d, Pod %d: %v (%v), the scan of every candidate: %v (%v)\n%+v",
							round, i, got, gotOK, want, wantOK, pod.Spec.Affinity.NodeAffinity)
					}
					if gotOK {
						narrowed++
					}
					if held := heldBy(pod, candidates, x); members != held {
						t.Fatalf("round %d, Pod %d: %d nodes in the groups, %d of the candidates are the Pod's types", round, i, members, held)
					}
				}
			}
			if narrowed < rounds*pods/4 {
				t.Errorf("only %d of %d Pods narrowed: the fleets and Pods test too little", narrowed, rounds*pods)
			}
		})
	}
}
