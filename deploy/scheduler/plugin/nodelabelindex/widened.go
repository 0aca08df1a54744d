package nodelabelindex

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// How long a Pod whose best nodes all refused it keeps all of its candidates
// for its next cycle, and how many such Pods are remembered at most: the next
// cycle comes within seconds (PostFilter activates the Pod), and a Pod
// deleted meanwhile must not be remembered for ever.
const (
	widenedFor = 10 * time.Minute
	maxWidened = 10000
)

// widened: the Pods whose next cycle gets every candidate, by UID.
type widened struct {
	mu    sync.Mutex
	since map[types.UID]time.Time
	now   func() time.Time
}

func newWidened() *widened {
	return &widened{since: map[types.UID]time.Time{}, now: time.Now}
}

func (w *widened) add(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	if len(w.since) >= maxWidened {
		for u, t := range w.since {
			if now.Sub(t) > widenedFor {
				delete(w.since, u)
			}
		}
		if len(w.since) >= maxWidened {
			clear(w.since)
		}
	}
	w.since[uid] = now
}

// take says whether the Pod's cycle gets every candidate, and forgets it: a
// later cycle of the same Pod (events brought it back) looks at the best nodes
// first again.
func (w *widened) take(uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.since[uid]
	delete(w.since, uid)
	return ok && w.now().Sub(t) <= widenedFor
}
