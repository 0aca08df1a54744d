package nodelabelindex

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

func TestNodeNowMatches(t *testing.T) {
	h100 := map[string]string{product: "NVIDIA-H100-80GB-HBM3"}
	l4 := map[string]string{product: "NVIDIA-L4"}
	wants := pod(nil, []v1.NodeSelectorRequirement{in(product, "NVIDIA-H100-80GB-HBM3")})
	for _, c := range []struct {
		name     string
		pod      *v1.Pod
		was, now *v1.Node
		want     fwk.QueueingHint
	}{
		{name: "added-of-the-type", pod: wants, now: node("n", h100), want: fwk.Queue},
		{name: "added-of-another-type", pod: wants, now: node("n", l4), want: fwk.QueueSkip},
		{name: "relabelled-to-the-type", pod: wants, was: node("n", l4), now: node("n", h100), want: fwk.Queue},
		{name: "relabelled-away", pod: wants, was: node("n", h100), now: node("n", l4), want: fwk.QueueSkip},
		{name: "other-labels-changed-on-a-matching-node", pod: wants,
			was: node("n", h100), now: node("n", map[string]string{product: "NVIDIA-H100-80GB-HBM3", "zone": "a"}),
			want: fwk.QueueSkip},
		{name: "node-selector-now-met", pod: pod(map[string]string{"gpu-type": "A100"}),
			was: node("n", nil), now: node("n", map[string]string{"gpu-type": "A100"}), want: fwk.Queue},
	} {
		t.Run(c.name, func(t *testing.T) {
			var was any
			if c.was != nil {
				was = c.was
			}
			pl := &NodeLabelIndex{index: NewIndex()}
			if c.was != nil {
				pl.index.SetNode(c.was)
			}
			before, gen := indexed(pl), pl.index.Generation()
			got, err := pl.nodeNowMatches(klog.Background(), c.pod, was, c.now)
			if err != nil || got != c.want {
				t.Errorf("got %v (%v), want %v", got, err, c.want)
			}
			// Hints are replayed after a Pod's cycle, in any order with later events: they write nothing.
			if after := indexed(pl); len(after) != len(before) || (c.was != nil && !equal(after["n"], c.was.Labels)) ||
				pl.index.Generation() != gen {
				t.Errorf("the hint wrote the index: %v, was %v", after, before)
			}
		})
	}
}

func TestWidenedIsForTheNextCycleOnly(t *testing.T) {
	now := time.Unix(0, 0)
	w := newWidened()
	w.now = func() time.Time { return now }
	w.add("a")
	w.add("old")
	if w.take("b") {
		t.Error("a Pod never widened got every candidate")
	}
	if !w.take("a") || w.take("a") {
		t.Error("a widened Pod gets every candidate in its next cycle, and only then")
	}
	now = now.Add(widenedFor + time.Second)
	if w.take("old") {
		t.Error("a Pod widened long ago (deleted since, say) is forgotten")
	}
	for i := 0; i < maxWidened; i++ {
		w.add(types.UID(fmt.Sprint(i)))
	}
	now = now.Add(widenedFor + time.Second)
	w.add("last")
	if len(w.since) != 1 || !w.take("last") {
		t.Errorf("at the cap, the expired are forgotten: %d left", len(w.since))
	}
}
