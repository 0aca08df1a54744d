package nodelabelindex

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

// A Pod may wait for the best type of its class: gpu-class.io/max-wait, a
// duration the webhook checked (and wrote from the class's maxWait), counted
// from the Pod's creation. Until it is spent, the Pod's cycles look only at
// the nodes of its heaviest preferred term (the webhook writes its best type
// that has nodes or a pool that can grow as that term), so it binds there
// once one has room, and otherwise stays Unschedulable for that type alone:
// an autoscaler grows the type's pool for it. It comes back on the events
// that can help it (a node of the type added or relabelled: this plugin's
// hint; a Pod there gone: NodeResourcesFit's) and once more when the budget
// is spent, not on a timer per cycle. From then on it is placed as every
// other Pod: its class's order, all of its types at once.
const (
	MaxWaitAnnotation = "gpu-class.io/max-wait"
	typesAnnotation   = "gpu-class.io/types"
	// MaxWaitSpentReason is the Event's reason when a Pod's wait ends without its best type.
	MaxWaitSpentReason = "MaxWaitSpent"
	waitingKey         = fwk.StateKey(Name + "/waiting")
)

type waitingState struct{ message string }

func (w waitingState) Clone() fwk.StateData { return w }

// waitOf says until when the Pod waits for its best type; ok false when it
// has no wait (none, or one that does not parse). It waits while now is
// before `until`.
func waitOf(pod *v1.Pod) (until time.Time, budget time.Duration, ok bool) {
	raw, has := pod.Annotations[MaxWaitAnnotation]
	if g := groupOf(pod); !has && g != nil && g.whole {
		// a group kept within one domain waits for one with no budget: its wait is spent from the start, and
		// preFilterGroup holds it until a domain holds all of it
		return pod.CreationTimestamp.Time, 0, true
	}
	if !has || pod.CreationTimestamp.IsZero() {
		return time.Time{}, 0, false
	}
	budget, err := time.ParseDuration(raw)
	if err != nil || budget <= 0 {
		return time.Time{}, 0, false
	}
	// the API server writes the creation time to the second, truncated: the Pod may be up to 1 s younger
	return pod.CreationTimestamp.Add(budget + time.Second), budget, true
}

// preFilterWait: what a Pod with a wait is given; ok false leaves it to the
// rest of PreFilter (its wait spent, or nothing to wait for).
func (pl *NodeLabelIndex) preFilterWait(ctx context.Context, state fwk.CycleState, pod *v1.Pod,
	nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status, bool) {
	until, budget, has := waitOf(pod)
	if !has || pl.args.Order != PreferredTypes {
		return nil, nil, false
	}
	waiting := pl.now().Before(until)
	if g := groupOf(pod); g != nil {
		if g.started(pod, nodes) {
			return nil, nil, false // its Pod affinity keeps it where its group runs
		}
		return pl.preFilterGroup(klog.FromContext(ctx), state, pod, nodes, g, until, budget, waiting)
	}
	if !waiting {
		return nil, nil, false
	}
	return pl.preFilterWaiting(ctx, state, pod, nodes, until, budget)
}

// bestTypeNodes returns the nodes of the cycle that match the Pod's heaviest
// preferred term(s) and its required affinity; ok false when it prefers
// nothing (there is then no best type to wait for).
func bestTypeNodes(pod *v1.Pod, nodes []fwk.NodeInfo) (sets.Set[string], bool) {
	prefs, ok := preferencesOf(pod)
	if !ok {
		return nil, false
	}
	var heaviest int64
	for _, t := range prefs.terms {
		heaviest = max(heaviest, t.weight)
	}
	var tops []labels.Selector
	for _, t := range prefs.terms {
		if t.weight == heaviest {
			tops = append(tops, t.selector)
		}
	}
	required := nodeaffinity.GetRequiredNodeAffinity(pod)
	names := sets.New[string]()
	for _, info := range nodes {
		node := info.Node()
		if node == nil {
			continue
		}
		for _, s := range tops {
			if s.Matches(labels.Set(node.Labels)) {
				if matches, err := required.Match(node); err == nil && matches {
					names.Insert(node.Name)
				}
				break
			}
		}
	}
	return names, true
}

// waitMessage: "waiting for H100 (2m of 10m), then A100-80GB", from the
// types the webhook wrote, best first.
func waitMessage(pod *v1.Pod, now, until time.Time, budget time.Duration) string {
	types := strings.Split(pod.Annotations[typesAnnotation], ",")
	best, rest := "its best type", ""
	if types[0] != "" {
		best = types[0]
	}
	if len(types) > 1 {
		rest = ", then " + strings.Join(types[1:], ", ")
	}
	waited := budget + time.Second - until.Sub(now)
	return fmt.Sprintf("waiting for %s (%s of %s)%s", best, short(waited), short(budget), rest)
}

// short writes a duration as a user wrote it: 90s, 2m, 1h30m.
func short(d time.Duration) string {
	s := d.Round(time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// preFilterWaiting narrows a waiting Pod's cycle to its best type's nodes;
// none (the type has no node yet: a pool may grow one) leaves it
// Unschedulable until a node of the type comes.
func (pl *NodeLabelIndex) preFilterWaiting(ctx context.Context, state fwk.CycleState, pod *v1.Pod,
	nodes []fwk.NodeInfo, until time.Time, budget time.Duration) (*fwk.PreFilterResult, *fwk.Status, bool) {
	names, ok := bestTypeNodes(pod, nodes)
	if !ok {
		return nil, nil, false
	}
	message := waitMessage(pod, pl.now(), until, budget)
	state.Write(waitingKey, waitingState{message})
	pl.wakes.at(klog.FromContext(ctx), pod, until, pl.wake)
	if names.Len() == 0 {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, message), true
	}
	return &fwk.PreFilterResult{NodeNames: names}, nil, true
}

// wake brings a Pod whose budget is spent back to the queue, and says so on
// the Pod, unless it was bound or deleted meanwhile.
func (pl *NodeLabelIndex) wake(logger klog.Logger, pod *v1.Pod) {
	current, err := pl.pods.Pods(pod.Namespace).Get(pod.Name)
	if err != nil || current.UID != pod.UID || current.Spec.NodeName != "" {
		return
	}
	types := strings.Split(current.Annotations[typesAnnotation], ",")
	note := fmt.Sprintf("waited its max-wait %s for %s, which had no room; now placed in its class's order",
		current.Annotations[MaxWaitAnnotation], types[0])
	if len(types) > 1 {
		note += ": " + strings.Join(types, ", ")
	}
	pl.handle.EventRecorder().Eventf(current, nil, v1.EventTypeNormal, MaxWaitSpentReason, "Scheduling", note)
	pl.activate(logger, map[string]*v1.Pod{string(current.UID): current})
}

// wakes: one timer per waiting Pod, at the end of its budget.
type wakes struct {
	mu     sync.Mutex
	timers map[types.UID]*time.Timer
	now    func() time.Time
}

func newWakes(now func() time.Time) *wakes {
	return &wakes{timers: map[types.UID]*time.Timer{}, now: now}
}

func (w *wakes) at(logger klog.Logger, pod *v1.Pod, until time.Time, wake func(klog.Logger, *v1.Pod)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, set := w.timers[pod.UID]; set {
		return
	}
	uid := pod.UID
	// a moment past the end, so the Pod's next cycle finds the budget spent
	w.timers[uid] = time.AfterFunc(until.Sub(w.now())+100*time.Millisecond, func() {
		w.mu.Lock()
		delete(w.timers, uid)
		w.mu.Unlock()
		wake(logger, pod)
	})
}

func (w *wakes) pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.timers)
}
