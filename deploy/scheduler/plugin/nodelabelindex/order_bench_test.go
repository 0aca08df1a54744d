package nodelabelindex

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// The candidates of one class in a cluster of 15,000 nodes as bench/placement
// lays it out: 6,000 GPU nodes of six types, the best type three of them,
// two thirds tainted, half partly filled with CPU work, each node with the
// labels a real one carries.
func benchFleet() ([]fwk.NodeInfo, []string) {
	types := []string{"NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "A100-SXM4-40GB", "NVIDIA-L40S", "NVIDIA-A10G", "NVIDIA-L4"}
	infos := make([]fwk.NodeInfo, 0, 6000)
	for i := 0; i < 6000; i++ {
		t := types[1+i%(len(types)-1)]
		if i < 3 {
			t = types[0]
		}
		labels := map[string]string{product: t, "gpu-type": t, "kubernetes.io/hostname": fmt.Sprintf("n-%d", i),
			"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", i%3),
			"nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.family": "hopper",
			"nvidia.com/cuda.driver.major": "550", "node.kubernetes.io/instance-type": "p5.48xlarge", "nvidia.com/mig.capable": "false"}
		node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n-%d", i), Labels: labels},
			Status: v1.NodeStatus{Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("64"),
				v1.ResourceMemory: resource.MustParse("512Gi"), v1.ResourcePods: resource.MustParse("110"),
				gpu: resource.MustParse("8"), v1.ResourceEphemeralStorage: resource.MustParse("1Ti")}}}
		if i%3 != 2 {
			node.Spec.Taints = []v1.Taint{gpuTaint}
		}
		info := framework.NewNodeInfo()
		info.SetNode(node)
		if i%2 == 0 {
			info.AddPod(requesting(int64(i%8), 20000))
		}
		infos = append(infos, info)
	}
	return infos, types
}

// benchPod: a Pod as gpu-class writes it for a class of these six types,
// nodes labelled by GFD and by hand (two required terms), best type first.
func benchPod(types []string) *v1.Pod {
	p := requesting(1, 2000)
	p.Spec.Containers[0].Resources.Requests[v1.ResourceMemory] = resource.MustParse("4Gi")
	var preferred []v1.PreferredSchedulingTerm
	for i, t := range types {
		preferred = append(preferred, v1.PreferredSchedulingTerm{Weight: int32(100 - 10*i),
			Preference: v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{in(product, t)}}})
	}
	p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{
			{MatchExpressions: []v1.NodeSelectorRequirement{in(product, types...)}},
			{MatchExpressions: []v1.NodeSelectorRequirement{in("gpu-type", types...)}}}},
		PreferredDuringSchedulingIgnoredDuringExecution: preferred}}
	p.Spec.Tolerations = []v1.Toleration{{Key: gpuTaint.Key, Operator: v1.TolerationOpExists}}
	return p
}

func BenchmarkBest(b *testing.B) {
	infos, types := benchFleet()
	pod := benchPod(types)
	for _, args := range []Args{{Order: MostFree, Resources: wholeGPUs, Nodes: 100},
		{Order: MostUsed, Resources: wholeGPUs, Nodes: 100}} {
		b.Run(string(args.Order), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := best(args, pod, infos); !ok {
					b.Fatal("not narrowed")
				}
			}
		})
	}
}

// The layout of `python -m bench single` at 1,000, 5,000 and 15,000 nodes:
// the best type on 3 nodes in 5,000 (at least one), the next type on two
// thirds of the nodes, the rest CPU-only; the best type with room, and full
// (then every node of the next type is read for room, as a scan would); a
// cycle after a node of the next type was relabelled (moved out of its
// group and back, the groups kept); and the first cycle of a Pod shape (grouped from scratch).
func BenchmarkBestOfTypes(b *testing.B) {
	types := []string{"NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"}
	for _, size := range []int{1000, 5000, 15000} {
		for _, bestFull := range []bool{false, true} {
			x, infos := NewIndex(), map[string]fwk.NodeInfo{}
			best := max(1, size*3/5000)
			for i := range size {
				name := fmt.Sprintf("n-%d", i)
				labels := map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
					"topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", i%3)}
				allocatable := v1.ResourceList{v1.ResourceCPU: resource.MustParse("64"),
					v1.ResourceMemory: resource.MustParse("512Gi"), v1.ResourcePods: resource.MustParse("110")}
				if i < best+size*2/3 {
					t := types[min(1, i/best)]
					labels[product], labels["gpu-type"] = t, t
					allocatable[gpu] = resource.MustParse("8")
				}
				node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
					Spec: v1.NodeSpec{Taints: []v1.Taint{gpuTaint}}, Status: v1.NodeStatus{Allocatable: allocatable}}
				info := framework.NewNodeInfo()
				info.SetNode(node)
				if i < best && bestFull {
					info.AddPod(requesting(8, 1000))
				}
				x.SetNode(node)
				infos[name] = info
			}
			lookup := func(name string) (fwk.NodeInfo, error) { return infos[name], nil }
			pod := benchPod(types)
			cycle := func(b *testing.B) {
				if _, _, ok := bestOfTypes(pod, x, lookup); !ok {
					b.Fatal("not narrowed")
				}
			}
			if bestFull {
				b.Run(fmt.Sprintf("%d-nodes/best-full", size), func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						cycle(b)
					}
				})
				continue
			}
			b.Run(fmt.Sprintf("%d-nodes/best-with-room", size), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					cycle(b)
				}
			})
			moved := infos[fmt.Sprintf("n-%d", best)].Node().DeepCopy()
			b.Run(fmt.Sprintf("%d-nodes/after-a-relabel", size), func(b *testing.B) {
				b.ReportAllocs()
				hand := []string{"A100-80GB", types[1]} // labelled by hand, then as GFD labels it: out of its group and back
				for i := 0; b.Loop(); i++ {
					moved.Labels["gpu-type"] = hand[i%2]
					x.SetNode(moved)
					cycle(b)
				}
			})
			b.Run(fmt.Sprintf("%d-nodes/first-of-its-shape", size), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					clear(x.shapes)
					cycle(b)
				}
			})
		}
	}
}
