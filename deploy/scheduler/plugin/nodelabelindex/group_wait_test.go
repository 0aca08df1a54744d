package nodelabelindex

import (
	"context"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// groupPod: waitingPod (H100 preferred, then A100) of group "train" of `size`
// Pods, with the Pod affinity the webhook writes.
func groupPod(maxWait string, size int) *v1.Pod {
	p := waitingPod(maxWait)
	p.Labels = map[string]string{groupLabel: "train"}
	p.Annotations[groupSizeAnnotation] = strconv.Itoa(size)
	p.Spec.Affinity.PodAffinity = &v1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{groupLabel: "train"}}, TopologyKey: product}}}
	return p
}

func TestAGroupWithAWaitStartsOnlyWhereAllOfItFits(t *testing.T) {
	h100a := gpuNode{name: "h100-a", product: "H100", gpus: 8, used: 6}
	h100b := gpuNode{name: "h100-b", product: "H100", gpus: 8, used: 7}
	a100 := gpuNode{name: "a100", product: "A100", gpus: 8}
	for _, c := range []struct {
		name    string
		pod     *v1.Pod
		after   time.Duration
		member  string // the namespace of a Pod labelled as the group's, already on a100 ("" for none)
		want    sets.Set[string]
		code    fwk.Code
		handled bool // false: left to the rest of PreFilter
	}{
		{name: "waiting-the-best-type-holds-it", pod: groupPod("10m", 3), after: time.Minute,
			want: sets.New("h100-a", "h100-b"), handled: true},
		{name: "waiting-the-best-type-holds-2-of-3", pod: groupPod("10m", 4), after: time.Minute,
			code: fwk.UnschedulableAndUnresolvable, handled: true},
		{name: "spent-the-first-type-that-holds-it", pod: groupPod("10s", 4), after: time.Minute,
			want: sets.New("a100"), handled: true},
		{name: "spent-no-type-holds-it-left-to-the-class", pod: groupPod("10s", 12), after: time.Minute},
		{name: "started-follows-its-group", pod: groupPod("10m", 4), after: time.Minute, member: "ml"},
		// another tenant's Pod with the same group label starts nothing here: the group still waits
		{name: "the-label-in-another-namespace-is-not-its-group", pod: groupPod("10m", 4), after: time.Minute,
			member: "other-team", code: fwk.UnschedulableAndUnresolvable, handled: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := created.Add(c.after)
			pl := &NodeLabelIndex{index: NewIndex(), args: Args{Order: PreferredTypes}, widened: newWidened(), parked: newParked(), drift: &drift{now: time.Now},
				wakes: newWakes(func() time.Time { return now }), now: func() time.Time { return now }}
			var infos []fwk.NodeInfo
			for _, n := range []gpuNode{h100a, h100b, a100} {
				info := n.info()
				if c.member != "" && n.name == "a100" {
					member := groupPod("10m", 4)
					member.Name, member.UID, member.Namespace = "train-1", "uid-train-1", c.member
					info.(*framework.NodeInfo).AddPod(member)
				}
				infos = append(infos, info)
			}
			state := framework.NewCycleState()
			result, status, handled := pl.preFilterWait(context.Background(), state, c.pod, infos)
			if handled != c.handled || status.Code() != c.code {
				t.Fatalf("handled %v status %v, want %v %v", handled, status, c.handled, c.code)
			}
			if c.want != nil && (result == nil || !result.NodeNames.Equal(c.want)) {
				t.Fatalf("got %v, want %v", result, c.want)
			}
			if c.code == fwk.UnschedulableAndUnresolvable &&
				status.Message() != "group train of 4 Pods waiting for H100 (1m of 10m), then A100" {
				t.Errorf("message %q", status.Message())
			}
		})
	}
}

func TestAWaitingGroupComesBackWhenItMayStart(t *testing.T) {
	waiting := groupPod("10m", 3)
	member := groupPod("10m", 3)
	member.Name = "train-1"
	other := groupPod("10m", 3)
	other.Labels[groupLabel] = "other"
	elsewhere := groupPod("10m", 3)
	elsewhere.Namespace = "other-team"
	cpuOnly := requesting(0, 500)
	for _, c := range []struct {
		name     string
		pod      *v1.Pod
		old, new *v1.Pod
		want     fwk.QueueingHint
	}{
		{name: "a-pod-of-its-group-bound", pod: waiting, new: member, want: fwk.Queue},
		{name: "a-pod-of-another-group-bound", pod: waiting, new: other, want: fwk.QueueSkip},
		{name: "its-group-label-in-another-namespace-bound", pod: waiting, new: elsewhere, want: fwk.QueueSkip},
		{name: "a-gpu-pod-gone", pod: waiting, old: requesting(1, 500), want: fwk.Queue},
		{name: "a-cpu-pod-gone", pod: waiting, old: cpuOnly, want: fwk.QueueSkip},
		{name: "a-lone-waiting-pod-is-not-a-group", pod: waitingPod("10m"), old: requesting(1, 500), want: fwk.QueueSkip},
	} {
		t.Run(c.name, func(t *testing.T) {
			var was, now any
			if c.old != nil {
				was = c.old
			}
			if c.new != nil {
				now = c.new
			}
			got, err := (&NodeLabelIndex{}).groupMayStart(klog.Background(), c.pod, was, now)
			if err != nil || got != c.want {
				t.Errorf("got %v (%v), want %v", got, err, c.want)
			}
		})
	}
}

const clique = "nvidia.com/gpu.clique"

// domainPod: groupPod kept within one NVLink domain, as the webhook writes it
// for gpu-class.io/group-required-topology: the domain's term first.
func domainPod(maxWait string, size int) *v1.Pod {
	p := groupPod(maxWait, size)
	terms := p.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	domain := terms[0]
	domain.TopologyKey = clique
	p.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append([]v1.PodAffinityTerm{domain}, terms...)
	return p
}

func TestAGroupKeptWithinOneDomainStartsInTheTightestThatHoldsIt(t *testing.T) {
	// H100 in domains a (room for 2 + 1 Pods of 1 GPU) and b (8); A100 in domain c (8)
	nodes := []struct {
		gpuNode
		domain string
	}{
		{gpuNode{name: "h100-a1", product: "H100", gpus: 8, used: 6}, "a"},
		{gpuNode{name: "h100-a2", product: "H100", gpus: 8, used: 7}, "a"},
		{gpuNode{name: "h100-b1", product: "H100", gpus: 8}, "b"},
		{gpuNode{name: "a100-c1", product: "A100", gpus: 8}, "c"},
	}
	for _, c := range []struct {
		name    string
		pod     *v1.Pod
		member  bool // a Pod of the group already on a100-c1
		want    sets.Set[string]
		message string
		handled bool
	}{
		{name: "both-h100-domains-hold-it-the-tightest", pod: domainPod("", 3), want: sets.New("h100-a1", "h100-a2"), handled: true},
		{name: "only-the-larger-holds-it", pod: domainPod("", 5), want: sets.New("h100-b1"), handled: true},
		{name: "the-next-type-when-no-domain-of-the-best-holds-it", pod: domainPod("", 8), want: sets.New("h100-b1"), handled: true},
		{name: "no-domain-holds-it-it-waits-without-a-budget", pod: domainPod("", 9), handled: true,
			message: "group train of 9 Pods waits for a nvidia.com/gpu.clique domain with room for all of it"},
		{name: "started-follows-its-group", pod: domainPod("", 9), member: true},
		{name: "with-a-wait-only-the-best-types-domains", pod: domainPod("10m", 5), want: sets.New("h100-b1"), handled: true},
		{name: "one-product-term-without-a-wait-is-no-hold", pod: groupPod("", 9)},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := created.Add(time.Minute)
			pl := &NodeLabelIndex{index: NewIndex(), args: Args{Order: PreferredTypes}, widened: newWidened(), parked: newParked(), drift: &drift{now: time.Now},
				wakes: newWakes(func() time.Time { return now }), now: func() time.Time { return now }}
			var infos []fwk.NodeInfo
			for _, n := range nodes {
				info := n.info()
				info.Node().Labels[clique] = n.domain
				if c.member && n.name == "a100-c1" {
					member := domainPod("", 9)
					member.Name, member.UID = "train-1", "uid-train-1"
					info.(*framework.NodeInfo).AddPod(member)
				}
				infos = append(infos, info)
			}
			result, status, handled := pl.preFilterWait(context.Background(), framework.NewCycleState(), c.pod, infos)
			if handled != c.handled {
				t.Fatalf("handled %v (%v), want %v", handled, status, c.handled)
			}
			if c.want != nil && (result == nil || !result.NodeNames.Equal(c.want) || status != nil) {
				t.Fatalf("got %v %v, want %v", result, status, c.want)
			}
			if c.message != "" && (status.Code() != fwk.UnschedulableAndUnresolvable || status.Message() != c.message) {
				t.Fatalf("status %v, want %q", status, c.message)
			}
			if c.handled && groupWaits(c.pod) != true {
				t.Errorf("a held group's Pod must come back on the events that may give it room")
			}
		})
	}
}
