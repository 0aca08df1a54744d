package nodelabelindex

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

var created = time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)

// waitingPod: classPod (H100 preferred, then A100) created at `created`, with
// gpu-class.io/max-wait as given ("" for none).
func waitingPod(maxWait string, edit ...func(*v1.PodSpec)) *v1.Pod {
	p := classPod(1, edit...)
	p.ObjectMeta = metav1.ObjectMeta{Name: "train", Namespace: "ml", UID: "uid-train",
		CreationTimestamp: metav1.NewTime(created), Annotations: map[string]string{typesAnnotation: "H100,A100"}}
	if maxWait != "" {
		p.Annotations[MaxWaitAnnotation] = maxWait
	}
	return p
}

func TestWaitOf(t *testing.T) {
	for _, c := range []struct {
		name    string
		maxWait string
		after   time.Duration
		waiting bool
		until   time.Time
	}{
		{name: "no-budget", after: time.Second},
		{name: "within-the-budget", maxWait: "10m", after: 2 * time.Minute, waiting: true, until: created.Add(10*time.Minute + time.Second)},
		{name: "a-second-past-the-stamp-for-its-truncation", maxWait: "10s", after: 10 * time.Second, waiting: true,
			until: created.Add(11 * time.Second)},
		{name: "spent", maxWait: "10s", after: 11 * time.Second, until: created.Add(11 * time.Second)},
		{name: "hours-and-minutes", maxWait: "1h30m", after: time.Hour, waiting: true, until: created.Add(90*time.Minute + time.Second)},
		{name: "does-not-parse", maxWait: "ten minutes", after: time.Second},
		{name: "not-positive", maxWait: "-1m", after: 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			until, _, has := waitOf(waitingPod(c.maxWait))
			waiting := has && created.Add(c.after).Before(until)
			if waiting != c.waiting || (has && !until.Equal(c.until)) || has != !c.until.IsZero() {
				t.Errorf("got waiting %v until %v, want %v until %v", waiting, until, c.waiting, c.until)
			}
		})
	}
}

func TestWaitMessageAndShortDurations(t *testing.T) {
	until := created.Add(10*time.Minute + time.Second)
	if got := waitMessage(waitingPod("10m"), created.Add(2*time.Minute), until, 10*time.Minute); got != "waiting for H100 (2m of 10m), then A100" {
		t.Errorf("got %q", got)
	}
	for d, want := range map[time.Duration]string{90 * time.Second: "1m30s", 2 * time.Minute: "2m", 2 * time.Hour: "2h",
		90 * time.Minute: "1h30m", 10 * time.Second: "10s"} {
		if got := short(d); got != want {
			t.Errorf("short(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestPreFilterKeepsAWaitingPodToItsBestType(t *testing.T) {
	h100Full := gpuNode{name: "h100-full", product: "H100", gpus: 8, used: 8}
	h100Free := gpuNode{name: "h100-free", product: "H100", gpus: 8}
	a100 := gpuNode{name: "a100", product: "A100", gpus: 8}
	for _, c := range []struct {
		name    string
		pod     *v1.Pod
		after   time.Duration
		nodes   []gpuNode
		want    sets.Set[string] // nil: the plugin narrows nothing for waiting
		code    fwk.Code
		waiting bool
	}{
		{name: "waiting-gets-the-best-types-nodes-full-or-not", pod: waitingPod("10m"), after: time.Minute,
			nodes: []gpuNode{h100Full, h100Free, a100}, want: sets.New("h100-full", "h100-free"), waiting: true},
		{name: "waiting-with-no-node-of-the-type-is-unschedulable", pod: waitingPod("10m"), after: time.Minute,
			nodes: []gpuNode{a100}, code: fwk.UnschedulableAndUnresolvable, waiting: true},
		{name: "spent-is-placed-in-order", pod: waitingPod("10s"), after: time.Minute, nodes: []gpuNode{h100Full, a100}},
		{name: "no-budget-is-placed-in-order", pod: waitingPod(""), after: 0, nodes: []gpuNode{h100Full, a100}},
		{name: "required-affinity-still-holds", after: time.Minute, pod: waitingPod("10m", func(s *v1.PodSpec) {
			s.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &v1.NodeSelector{
				NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{
					{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpNotIn, Values: []string{"h100-full"}}}}}}
		}), nodes: []gpuNode{h100Full, h100Free, a100}, want: sets.New("h100-free"), waiting: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := created.Add(c.after)
			pl := &NodeLabelIndex{index: NewIndex(), args: Args{Order: PreferredTypes}, widened: newWidened(), parked: newParked(), drift: &drift{now: time.Now},
				wakes: newWakes(func() time.Time { return now }), now: func() time.Time { return now }}
			infos := make([]fwk.NodeInfo, 0, len(c.nodes))
			for _, n := range c.nodes {
				info := n.info()
				info.Node().Labels[v1.LabelHostname] = n.name
				infos = append(infos, info)
			}
			state := framework.NewCycleState()
			result, status := pl.PreFilter(context.Background(), state, c.pod, infos)
			_, readErr := state.Read(waitingKey)
			if (readErr == nil) != c.waiting {
				t.Fatalf("waiting recorded: %v, want %v", readErr == nil, c.waiting)
			}
			if status.Code() != c.code {
				t.Fatalf("status %v, want %v", status, c.code)
			}
			if c.waiting && c.code == fwk.Success && (result == nil || !result.NodeNames.Equal(c.want)) {
				t.Fatalf("got %v, want %v", result, c.want)
			}
			if c.waiting {
				if pl.wakes.pending() != 1 {
					t.Error("a waiting Pod is woken once its budget is spent")
				}
				_, post := pl.PostFilter(context.Background(), state, c.pod, nil)
				if post.Code() != fwk.UnschedulableAndUnresolvable || post.Message() != "waiting for H100 (1m of 10m), then A100" {
					t.Errorf("PostFilter of a waiting Pod: %v", post)
				}
			}
			if _, sign := pl.SignPod(context.Background(), c.pod); sign.IsSuccess() == (c.pod.Annotations[MaxWaitAnnotation] != "") {
				t.Errorf("a Pod with a wait is never batched, others are: %v", sign)
			}
		})
	}
}

func TestWakesOncePerPodAtTheEndOfItsBudget(t *testing.T) {
	now := time.Now()
	w := newWakes(func() time.Time { return now })
	woken := make(chan string, 4)
	wake := func(_ klog.Logger, p *v1.Pod) { woken <- p.Name }
	p := waitingPod("1s")
	w.at(klog.Background(), p, now.Add(50*time.Millisecond), wake)
	w.at(klog.Background(), p, now.Add(50*time.Millisecond), wake) // its next cycle: no second timer
	if w.pending() != 1 {
		t.Fatalf("%d timers for one Pod", w.pending())
	}
	select {
	case name := <-woken:
		if name != "train" {
			t.Errorf("woke %q", name)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("never woken")
	}
	select {
	case <-woken:
		t.Error("woken twice")
	case <-time.After(300 * time.Millisecond):
	}
	if w.pending() != 0 {
		t.Error("a fired timer is forgotten")
	}
}
