package nodelabelindex

import (
	"fmt"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

const gpu = "nvidia.com/gpu"

var gpuTaint = v1.Taint{Key: "nvidia.com/gpu", Effect: v1.TaintEffectNoSchedule}

// gpuNode: a node of `gpus` devices and 16 CPUs, `used` devices and `cpu`
// millicores of them taken by a Pod already bound there.
type gpuNode struct {
	name          string
	product       string
	gpus, used    int64
	cpu           int64
	taints        []v1.Taint
	unschedulable bool
	uncountedGPUs bool // no nvidia.com/gpu in its allocatable (a DRA node)
}

func (n gpuNode) info() fwk.NodeInfo {
	allocatable := v1.ResourceList{v1.ResourceCPU: resource.MustParse("16"), v1.ResourceMemory: resource.MustParse("64Gi"),
		v1.ResourcePods: resource.MustParse("110")}
	if !n.uncountedGPUs {
		allocatable[gpu] = *resource.NewQuantity(n.gpus, resource.DecimalSI)
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: map[string]string{product: n.product}},
		Spec:   v1.NodeSpec{Taints: n.taints, Unschedulable: n.unschedulable},
		Status: v1.NodeStatus{Allocatable: allocatable}}
	info := framework.NewNodeInfo()
	info.SetNode(node)
	if n.used > 0 || n.cpu > 0 {
		info.AddPod(requesting(n.used, n.cpu))
	}
	return info
}

func requesting(gpus, cpuMillis int64) *v1.Pod {
	requests := v1.ResourceList{v1.ResourceCPU: *resource.NewMilliQuantity(cpuMillis, resource.DecimalSI)}
	if gpus > 0 {
		requests[gpu] = *resource.NewQuantity(gpus, resource.DecimalSI)
	}
	return &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "main", Resources: v1.ResourceRequirements{Requests: requests}}}}}
}

// classPod: a Pod as gpu-class writes it for class high (H100 best, then A100),
// asking for `gpus` devices and 2 CPUs, tolerating the GPU taint.
func classPod(gpus int64, edit ...func(*v1.PodSpec)) *v1.Pod {
	p := requesting(gpus, 2000)
	prefer := func(weight int32, value string) v1.PreferredSchedulingTerm {
		return v1.PreferredSchedulingTerm{Weight: weight, Preference: v1.NodeSelectorTerm{
			MatchExpressions: []v1.NodeSelectorRequirement{in(product, value)}}}
	}
	p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []v1.PreferredSchedulingTerm{prefer(100, "H100"), prefer(50, "A100")}}}
	p.Spec.Tolerations = []v1.Toleration{{Key: gpuTaint.Key, Operator: v1.TolerationOpExists}}
	for _, e := range edit {
		e(&p.Spec)
	}
	return p
}

var wholeGPUs = []Resource{{Name: gpu, Weight: 1}, {Name: "amd.com/gpu", Weight: 1}}

func TestBest(t *testing.T) {
	preferred := Args{Order: PreferredTypes}
	free := Args{Order: MostFree, Resources: wholeGPUs}
	used := Args{Order: MostUsed, Resources: wholeGPUs}
	h100 := func(name string, edit ...func(*gpuNode)) gpuNode {
		n := gpuNode{name: name, product: "H100", gpus: 8, taints: []v1.Taint{gpuTaint}}
		for _, e := range edit {
			e(&n)
		}
		return n
	}
	a100 := func(name string, gpus, used int64) gpuNode {
		return gpuNode{name: name, product: "A100", gpus: gpus, used: used}
	}
	full := func(n *gpuNode) { n.used = n.gpus }
	for _, c := range []struct {
		name  string
		args  Args
		pod   *v1.Pod
		nodes []gpuNode
		want  []string // nil: not narrowed
	}{
		{name: "the best type's nodes", args: preferred, pod: classPod(1),
			nodes: []gpuNode{h100("h-0"), h100("h-1"), a100("a-0", 8, 0), a100("a-1", 8, 0)}, want: []string{"h-0", "h-1"}},
		{name: "the best type full: the next", args: preferred, pod: classPod(1),
			nodes: []gpuNode{h100("h-0", full), a100("a-0", 8, 0), a100("a-1", 4, 4)}, want: []string{"a-0"}},
		{name: "devices left but no CPU", args: preferred, pod: classPod(1),
			nodes: []gpuNode{h100("h-0", func(n *gpuNode) { n.cpu = 15000 }), a100("a-0", 8, 0)}, want: []string{"a-0"}},
		{name: "a taint the Pod does not tolerate", args: preferred, pod: classPod(1),
			nodes: []gpuNode{h100("h-0", func(n *gpuNode) {
				n.taints = append(n.taints, v1.Taint{Key: "maintenance", Effect: v1.TaintEffectNoExecute})
			}), h100("h-1"), a100("a-0", 8, 0)}, want: []string{"h-1"}},
		{name: "a PreferNoSchedule taint only scores", args: preferred, pod: classPod(1),
			nodes: []gpuNode{h100("h-0", func(n *gpuNode) {
				n.taints = append(n.taints, v1.Taint{Key: "soon", Effect: v1.TaintEffectPreferNoSchedule})
			}), a100("a-0", 8, 0)}, want: []string{"h-0"}},
		{name: "cordoned", args: preferred, pod: classPod(1),
			nodes: []gpuNode{h100("h-0", func(n *gpuNode) { n.unschedulable = true }), a100("a-0", 8, 0)},
			want:  []string{"a-0"}},
		{name: "a node that does not count the devices is kept", args: preferred, pod: classPod(1),
			nodes: []gpuNode{h100("h-0", func(n *gpuNode) { n.uncountedGPUs = true }), a100("a-0", 8, 0)},
			want:  []string{"a-0", "h-0"}},
		{name: "the Pod's own required affinity", args: preferred, pod: classPod(1, func(s *v1.PodSpec) {
			s.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &v1.NodeSelector{
				NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{
					{Key: product, Operator: v1.NodeSelectorOpNotIn, Values: []string{"H100"}}}}}}
		}), nodes: []gpuNode{h100("h-0"), a100("a-0", 8, 0)}, want: []string{"a-0"}},
		{name: "no node with room: not narrowed", args: preferred, pod: classPod(1),
			nodes: []gpuNode{h100("h-0", full), a100("a-0", 8, 8)}},
		{name: "no preferred affinity: not narrowed", args: preferred,
			pod: classPod(1, func(s *v1.PodSpec) { s.Affinity = nil }), nodes: []gpuNode{h100("h-0"), a100("a-0", 8, 0)}},
		{name: "most free: the largest share free once placed", args: free, pod: classPod(1),
			nodes: []gpuNode{a100("a-8", 8, 0), a100("a-4", 4, 0), a100("a-8-half", 8, 4), h100("h-0")},
			want:  []string{"a-8", "h-0"}},
		{name: "most used: the largest share in use once placed", args: used, pod: classPod(2),
			nodes: []gpuNode{a100("a-8", 8, 0), a100("a-4", 4, 2), a100("a-8-most", 8, 5), h100("h-0", full)},
			want:  []string{"a-4"}},
		{name: "shares: a Pod with no device of the list is not narrowed", args: free, pod: classPod(0),
			nodes: []gpuNode{a100("a-8", 8, 0), a100("a-4", 4, 0)}},
		{name: "no order of ours", args: Args{}, pod: classPod(1), nodes: []gpuNode{h100("h-0"), a100("a-0", 8, 0)}},
		{name: "required pod anti-affinity: not narrowed", args: preferred, pod: classPod(1, func(s *v1.PodSpec) {
			s.Affinity.PodAntiAffinity = &v1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{
				{TopologyKey: "kubernetes.io/hostname"}}}
		}), nodes: []gpuNode{h100("h-0"), a100("a-0", 8, 0)}},
		{name: "a hard spread constraint: not narrowed", args: preferred, pod: classPod(1, func(s *v1.PodSpec) {
			s.TopologySpreadConstraints = []v1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "zone",
				WhenUnsatisfiable: v1.DoNotSchedule}}
		}), nodes: []gpuNode{h100("h-0"), a100("a-0", 8, 0)}},
		{name: "a host port: not narrowed", args: preferred, pod: classPod(1, func(s *v1.PodSpec) {
			s.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: 80, HostPort: 8080}}
		}), nodes: []gpuNode{h100("h-0"), a100("a-0", 8, 0)}},
		{name: "a claim: not narrowed", args: preferred, pod: classPod(1, func(s *v1.PodSpec) {
			s.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{
				PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
		}), nodes: []gpuNode{h100("h-0"), a100("a-0", 8, 0)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := ranked(c.args, c.pod, c.nodes)
			slices.Sort(got)
			if c.want == nil {
				if ok {
					t.Errorf("narrowed to %v, want not narrowed", got)
				}
				return
			}
			if !ok || !slices.Equal(got, c.want) {
				t.Errorf("got %v (narrowed %v), want %v", got, ok, c.want)
			}
		})
	}
}

// ranked is the plugin's best of the nodes for the profile's order, as its
// PreFilter asks: PreferredTypes from an index of the nodes (the Pod's types
// written into its required affinity, as the webhook writes them, so that
// the index narrows), the others from the nodes' infos.
func ranked(args Args, pod *v1.Pod, nodes []gpuNode) ([]string, bool) {
	infos := map[string]fwk.NodeInfo{}
	var list []fwk.NodeInfo
	for _, n := range nodes {
		infos[n.name] = n.info()
		list = append(list, infos[n.name])
	}
	if args.Order != PreferredTypes {
		return best(args, pod, list)
	}
	x := NewIndex()
	for _, info := range list {
		x.SetNode(info.Node())
	}
	names, _, ok := bestOfTypes(ofTypes(pod, "H100", "A100"), x, snapshotOf(infos))
	return names, ok
}

// snapshotOf: the NodeInfos lister's Get over these nodes.
func snapshotOf(infos map[string]fwk.NodeInfo) func(string) (fwk.NodeInfo, error) {
	return func(name string) (fwk.NodeInfo, error) {
		if info, ok := infos[name]; ok {
			return info, nil
		}
		return nil, fmt.Errorf("node %q is not in the snapshot", name)
	}
}

// ofTypes adds to each term of the Pod's required affinity (or to a new
// one) an `In` of the products, which the index narrows to.
func ofTypes(pod *v1.Pod, products ...string) *v1.Pod {
	p := pod.DeepCopy()
	if p.Spec.Affinity == nil {
		p.Spec.Affinity = &v1.Affinity{}
	}
	if p.Spec.Affinity.NodeAffinity == nil {
		p.Spec.Affinity.NodeAffinity = &v1.NodeAffinity{}
	}
	na := p.Spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{}}}
	}
	terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for i := range terms {
		terms[i].MatchExpressions = append(terms[i].MatchExpressions, in(product, products...))
	}
	return p
}

// At most Nodes of the best share: any of them is as right as another.
func TestBestKeepsAtMostNodesOfTheBestShare(t *testing.T) {
	var infos []fwk.NodeInfo
	best8 := map[string]bool{}
	for i := 0; i < 300; i++ {
		n := gpuNode{name: fmt.Sprintf("n-%d", i), product: "A100", gpus: 4}
		if i%3 == 0 {
			n.gpus = 8
			best8[n.name] = true
		}
		infos = append(infos, n.info())
	}
	got, ok := best(Args{Order: MostFree, Resources: wholeGPUs, Nodes: 50}, classPod(1), infos)
	if !ok || len(got) != 50 {
		t.Fatalf("got %d nodes (narrowed %v), want 50", len(got), ok)
	}
	for _, name := range got {
		if !best8[name] {
			t.Errorf("%s is not among the nodes of the largest share free", name)
		}
	}
}

// The preferences score every node as NodeAffinity's own terms do, the
// nodes scored in one cycle sharing each combination of values once.
func TestPreferencesScoreAsNodeAffinity(t *testing.T) {
	op := func(key string, o v1.NodeSelectorOperator, values ...string) v1.NodeSelectorRequirement {
		return v1.NodeSelectorRequirement{Key: key, Operator: o, Values: values}
	}
	term := func(weight int32, e ...v1.NodeSelectorRequirement) v1.PreferredSchedulingTerm {
		return v1.PreferredSchedulingTerm{Weight: weight, Preference: v1.NodeSelectorTerm{MatchExpressions: e}}
	}
	nodes := []*v1.Node{
		node("h100", map[string]string{product: "H100", "gpu.memory": "81559", "zone": "a"}),
		node("h100-b", map[string]string{product: "H100", "gpu.memory": "81559", "zone": "b"}),
		node("a100", map[string]string{product: "A100", "gpu.memory": "40960"}),
		node("hand", map[string]string{"gpu-type": "A100"}),
		node("hand-h100", map[string]string{"gpu-type": "H100", "zone": "a"}),
		node("empty-product", map[string]string{product: ""}),
		node("cpu", nil),
	}
	for _, c := range []struct {
		name  string
		terms []v1.PreferredSchedulingTerm
	}{
		{"one key, best first", []v1.PreferredSchedulingTerm{term(100, in(product, "H100")), term(50, in(product, "A100"))}},
		{"two keys: labelled by GFD and by hand", []v1.PreferredSchedulingTerm{term(100, in(product, "H100")),
			term(100, in("gpu-type", "H100")), term(50, in(product, "A100")), term(50, in("gpu-type", "A100"))}},
		{"every operator", []v1.PreferredSchedulingTerm{term(7, op(product, v1.NodeSelectorOpNotIn, "H100")),
			term(5, op("zone", v1.NodeSelectorOpExists)), term(3, op("gpu-type", v1.NodeSelectorOpDoesNotExist)),
			term(11, op("gpu.memory", v1.NodeSelectorOpGt, "50000")), term(13, op("gpu.memory", v1.NodeSelectorOpLt, "50000")),
			term(17, op(product, v1.NodeSelectorOpDoesNotExist))}}, // an empty value is not an absent label
		{"expressions ANDed", []v1.PreferredSchedulingTerm{term(9, in(product, "H100"), in("zone", "b"))}},
		{"weight 0 and empty terms count nothing", []v1.PreferredSchedulingTerm{term(0, in(product, "H100")), term(4),
			term(2, in(product, "A100"))}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &v1.Pod{Spec: v1.PodSpec{Affinity: &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
				PreferredDuringSchedulingIgnoredDuringExecution: c.terms}}}}
			ours, ok := preferencesOf(p)
			theirs, err := nodeaffinity.NewPreferredSchedulingTerms(c.terms)
			if !ok || err != nil {
				t.Fatalf("parsed: ours %v, theirs %v", ok, err)
			}
			for round := 0; round < 2; round++ { // the second round from the scores kept
				for _, n := range nodes {
					if got, want := ours.score(n), theirs.Score(n); got != want {
						t.Errorf("round %d, %s: %d, NodeAffinity scores %d", round, n.Name, got, want)
					}
				}
			}
		})
	}
	for name, terms := range map[string][]v1.PreferredSchedulingTerm{
		"none":          nil,
		"only weight 0": {term(0, in(product, "H100"))},
		"by name": {{Weight: 1, Preference: v1.NodeSelectorTerm{MatchFields: []v1.NodeSelectorRequirement{
			in("metadata.name", "h100")}}}},
		"does not parse": {term(1, op("gpu.memory", v1.NodeSelectorOpGt, "much"))},
	} {
		p := &v1.Pod{Spec: v1.PodSpec{Affinity: &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: terms}}}}
		if _, ok := preferencesOf(p); ok {
			t.Errorf("%s: read as preferences to order by", name)
		}
	}
}

func TestArgsAreChecked(t *testing.T) {
	for _, c := range []struct {
		args Args
		ok   bool
	}{
		{Args{}, true},
		{Args{Order: PreferredTypes}, true},
		{Args{Order: MostFree, Resources: wholeGPUs, Nodes: 100}, true},
		{Args{Order: MostFree}, false},
		{Args{Order: PreferredTypes, Resources: wholeGPUs}, false},
		{Args{Order: "Fastest"}, false},
		{Args{Order: MostUsed, Resources: []Resource{{Name: gpu}}}, false},
		{Args{Order: MostUsed, Resources: wholeGPUs, Nodes: -1}, false},
	} {
		if err := c.args.check(); (err == nil) != c.ok {
			t.Errorf("%+v: %v, want ok %v", c.args, err, c.ok)
		}
	}
}
