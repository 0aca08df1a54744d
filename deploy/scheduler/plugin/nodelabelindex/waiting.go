package nodelabelindex

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// parked: the Pods that a cycle narrowed by the index did not place, with the
// index's generation the cycle read. The scheduler's handler of a node event
// (whose queueing hint brings a waiting Pod back) and the index's handler of
// the same event run apart: the Pod's next cycle can run before the index
// has the node that brought it back, leave that node out and wait again for
// an event that has passed. When the index's handler then indexes a node
// such a Pod's required affinity matches, the Pod gets another cycle at
// once. A Pod whose cycle read an older generation than the index holds when
// it is parked is given another cycle at once instead (the index changed
// under it).
type parked struct {
	mu   sync.Mutex
	pods map[types.UID]parkedPod
	now  func() time.Time
}

type parkedPod struct {
	pod      *v1.Pod
	required nodeaffinity.RequiredNodeAffinity
	gen      uint64
	since    time.Time
}

func newParked() *parked {
	return &parked{pods: map[types.UID]parkedPod{}, now: time.Now}
}

// park records a Pod its cycle did not place, read the index at generation
// `read`; now is the index's generation, read under the same lock as wake's
// list, so that a node indexed between the cycle and park is not missed. It
// says whether the Pod needs another cycle now.
func (p *parked) park(pod *v1.Pod, read uint64, now func() uint64) (again bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now() != read {
		delete(p.pods, pod.UID)
		return true
	}
	at := p.now()
	if len(p.pods) >= maxWidened {
		for uid, q := range p.pods {
			if at.Sub(q.since) > widenedFor {
				delete(p.pods, uid)
			}
		}
		if len(p.pods) >= maxWidened {
			clear(p.pods)
		}
	}
	p.pods[pod.UID] = parkedPod{pod: pod, required: nodeaffinity.GetRequiredNodeAffinity(pod), gen: read, since: at}
	return false
}

// forget: the Pod's new cycle reads the index afresh.
func (p *parked) forget(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.pods, uid)
}

// wake returns, and forgets, the Pods parked before generation `gen` whose
// required affinity matches `node`, as the index now holds it, and did not
// match it as the index held it before (`was`, nil for a node new to it): a
// node that matched was not left out of their cycles.
func (p *parked) wake(was, node *v1.Node, gen uint64) map[string]*v1.Pod {
	p.mu.Lock()
	defer p.mu.Unlock()
	var woken map[string]*v1.Pod
	at := p.now()
	for uid, q := range p.pods {
		if at.Sub(q.since) > widenedFor {
			delete(p.pods, uid)
			continue
		}
		if q.gen >= gen {
			continue
		}
		if matches, err := q.required.Match(node); err != nil || !matches {
			continue
		}
		if was != nil {
			if matched, err := q.required.Match(was); err == nil && matched {
				continue
			}
		}
		if woken == nil {
			woken = map[string]*v1.Pod{}
		}
		woken[string(uid)] = q.pod
		delete(p.pods, uid)
	}
	return woken
}
