package nodelabelindex

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	schedcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// cluster is a fake API server's nodes behind a real informer, whose watch
// can be cut so that the informer relists (a watch that ends with 410 Gone,
// as an API server's does once its history is compacted).
type cluster struct {
	client  *fake.Clientset
	mu      sync.Mutex
	expire  bool
	watches []watch.Interface
}

func newCluster() *cluster {
	c := &cluster{client: fake.NewClientset()}
	nodes := schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	c.client.PrependWatchReactor("nodes", func(action clienttesting.Action) (bool, watch.Interface, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.expire {
			c.expire = false
			return true, nil, apierrors.NewResourceExpired("too old resource version")
		}
		var opts []metav1.ListOptions
		if w, ok := action.(clienttesting.WatchActionImpl); ok {
			opts = append(opts, w.ListOptions)
		}
		w, err := c.client.Tracker().Watch(nodes, "", opts...)
		if err == nil {
			c.watches = append(c.watches, w)
		}
		return true, w, err
	})
	return c
}

// cut ends the informer's watch; its next watch is refused as too old, so
// it lists again and replaces its store (what happened meanwhile arrives as
// the relist's adds, updates and deletes, a delete it missed as a tombstone).
func (c *cluster) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expire = true
	for _, w := range c.watches {
		w.Stop()
	}
	c.watches = nil
}

var (
	products = []string{"NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L4", ""}
	zones    = []string{"a", "b", ""}
)

func randomLabels(r *rand.Rand) map[string]string {
	labels := map[string]string{}
	if p := products[r.IntN(len(products))]; p != "" {
		labels[product] = p
	}
	if z := zones[r.IntN(len(zones))]; z != "" {
		labels["zone"] = z
	}
	return labels
}

// The index against a real informer: random adds, deletes, relabels and
// updates that change no label (status, heartbeats), with the informer's
// watch cut now and then (a relist, with what happened meanwhile) and the
// queueing hint called with events from any time before (the scheduler
// replays events for Pods in flight after their cycle). After each step the
// index holds exactly the cluster's nodes and labels, and a cycle given a
// snapshot of them narrows to exactly the nodes each type's Pod could take:
// it never falls back, never needs a repair, never leaves a node out.
func TestTheIndexFollowsAnInformerThroughChurnReplaysAndRelists(t *testing.T) {
	const steps, names = 150, 12
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 47))
			c := newCluster()
			pl := startOn(t, c.client)
			ctx := context.Background()
			repairs := counterValue(t, "gpu_class_scheduler_index_repairs_total", nil)

			live := map[string]*v1.Node{}
			var history []*v1.Node // every version of every node, for replays
			relists := 0
			for step := 0; step < steps; step++ {
				name := fmt.Sprintf("n%d", r.IntN(names))
				current, exists := live[name]
				var what string
				switch op := r.IntN(10); {
				case !exists:
					what = "add"
					n := node(name, randomLabels(r))
					created, err := c.client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
					if err != nil {
						t.Fatal(err)
					}
					live[name] = created
				case op < 2:
					what = "delete"
					if err := c.client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
						t.Fatal(err)
					}
					delete(live, name)
				case op < 6:
					what = "relabel"
					n := current.DeepCopy()
					n.Labels = randomLabels(r)
					live[name] = update(t, c, n)
				default:
					what = "status"
					n := current.DeepCopy()
					n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue,
						LastHeartbeatTime: metav1.NewTime(time.Unix(int64(step), 0))}}
					live[name] = update(t, c, n)
				}
				if n, ok := live[name]; ok {
					history = append(history, n)
				}
				// Replays: the hint called with events from any time before, in any order.
				for i := 0; i < 3 && len(history) > 0; i++ {
					was, now := history[r.IntN(len(history))], history[r.IntN(len(history))]
					if r.IntN(2) == 0 {
						_, _ = pl.nodeNowMatches(klog.Background(), forType(products[0]), nil, now)
					} else {
						_, _ = pl.nodeNowMatches(klog.Background(), forType(products[1]), was, now)
					}
				}
				// A relist now and then, with a few events made while the watch is down.
				if r.IntN(40) == 0 && relists < 2 {
					relists++
					c.cut()
					what += ", relist"
					// While the watch is down: a node deleted (the relist's tombstone) and one relabelled.
					for gone := range live {
						if err := c.client.CoreV1().Nodes().Delete(ctx, gone, metav1.DeleteOptions{}); err != nil {
							t.Fatal(err)
						}
						delete(live, gone)
						break
					}
					for relabelled, n := range live {
						n = n.DeepCopy()
						n.Labels = randomLabels(r)
						live[relabelled] = update(t, c, n)
						history = append(history, live[relabelled])
						break
					}
				}
				want := make([]*v1.Node, 0, len(live))
				for _, n := range live {
					want = append(want, n)
				}
				eventually(t, pl, want, fmt.Sprintf("step %d (%s %s)", step, what, name))
				narrowsExactly(t, pl, want, fmt.Sprintf("step %d (%s %s)", step, what, name))
			}
			if got := counterValue(t, "gpu_class_scheduler_index_repairs_total", nil); got != repairs {
				t.Errorf("%v repairs: an index fed by its informer alone never drifts", got-repairs)
			}
			lists := 0
			for _, a := range c.client.Actions() {
				if a.GetVerb() == "list" && a.GetResource().Resource == "nodes" {
					lists++
				}
			}
			if relists == 0 || lists != 1+relists {
				t.Errorf("%d relists asked for, the informer listed %d times", relists, lists)
			}
		})
	}
}

func update(t *testing.T, c *cluster, n *v1.Node) *v1.Node {
	t.Helper()
	updated, err := c.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return updated
}

func forType(p string) *v1.Pod {
	return pod(nil, []v1.NodeSelectorRequirement{in(product, p)})
}

// narrowsExactly: for each type, the cycle of a Pod of it, given a snapshot
// of `nodes`, narrows to exactly the nodes of the type (none of the type: no
// narrowing, NodeAffinity's Filter says why).
func narrowsExactly(t *testing.T, pl *NodeLabelIndex, nodes []*v1.Node, when string) {
	t.Helper()
	infos, _ := schedcache.NewSnapshot(nil, nodes).NodeInfos().List()
	for _, p := range products[:len(products)-1] {
		wants := forType(p)
		required := nodeaffinity.GetRequiredNodeAffinity(wants)
		matching := sets.New[string]()
		for _, n := range nodes {
			if ok, _ := required.Match(n); ok {
				matching.Insert(n.Name)
			}
		}
		result, status := pl.PreFilter(context.Background(), framework.NewCycleState(), wants, infos)
		if !status.IsSuccess() {
			t.Fatalf("%s: %v", when, status)
		}
		switch {
		case matching.Len() == 0 && result != nil:
			t.Errorf("%s: %s: narrowed to %v with no node of the type", when, p, sets.List(result.NodeNames))
		case matching.Len() > 0 && (result == nil || !result.NodeNames.Equal(matching)):
			t.Errorf("%s: %s: narrowed to %v, want %v", when, p, result, sets.List(matching))
		}
	}
}
