package nodelabelindex

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Outcome of a cycle's PreFilter, as prefilterCycles counts it.
type Outcome string

const (
	// Narrowed: only the nodes the profile's order ranks first of those with room for the Pod (a profile
	// without an order: the nodes of the Pod's types).
	Narrowed Outcome = "narrowed"
	// Widened: every node of the Pod's types, past the best: its best nodes all refused it in its last
	// cycle, or the order cannot rank it (a Pod with volumes, inter-pod affinity, host ports; or no node
	// of its types with room as far as the nodes' own state tells).
	Widened Outcome = "widened"
	// FellBack: every node of the cluster, though the Pod names its types: the index disagreed with the
	// cycle's snapshot, or no node is of the Pod's types.
	FellBack Outcome = "fell_back"
	// Unnarrowed: the Pod names no label the index narrows by (no nodeSelector, no `In`).
	Unnarrowed Outcome = "unnarrowed"
	// Waiting: the nodes of the Pod's best type alone, or none, while it waits for that type within its
	// gpu-class.io/max-wait (wait.go); for the first Pod of a group with a wait, the nodes of one type
	// that hold the whole group (group_wait.go).
	Waiting Outcome = "waiting"
)

// The names and labels here are what docs/operators/monitoring.md documents
// (tests/test_monitoring.py reads them from this file): keep each Name a
// literal and each label list a []string literal.
var (
	prefilterCycles = metrics.NewCounterVec(&metrics.CounterOpts{
		Name: "gpu_class_scheduler_prefilter_cycles_total",
		Help: "Scheduling cycles NodeLabelIndex's PreFilter ran, by what it gave the cycle: " +
			"narrowed, widened, fell_back, unnarrowed or waiting.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"outcome"})
	indexRepairs = metrics.NewCounter(&metrics.CounterOpts{
		Name: "gpu_class_scheduler_index_repairs_total",
		Help: "Times NodeLabelIndex's index disagreed with the scheduler's snapshot, by node names, " +
			"for longer than events in flight explain, and was rebuilt from the node informer's lister.",
		StabilityLevel: metrics.ALPHA,
	})
	registerMetrics sync.Once
)

// register adds the metrics to kube-scheduler's legacy registry, the one its
// /metrics serves, once however many profiles enable the plugin; every
// outcome is exported at 0 from the first scrape, so rate() sees the first.
func register() {
	registerMetrics.Do(func() {
		legacyregistry.MustRegister(prefilterCycles, indexRepairs)
		for _, o := range []Outcome{Narrowed, Widened, FellBack, Unnarrowed, Waiting} {
			prefilterCycles.WithLabelValues(string(o))
		}
	})
}
