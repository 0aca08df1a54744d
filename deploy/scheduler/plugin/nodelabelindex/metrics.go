package nodelabelindex

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// The names and labels here are what docs/operators/monitoring.md documents
// (tests/test_monitoring.py reads them from this file): keep each Name a
// literal and each label list a []string literal.
var (
	indexRepairs = metrics.NewCounter(&metrics.CounterOpts{
		Name: "gpu_class_scheduler_index_repairs_total",
		Help: "Times NodeLabelIndex's index disagreed with the scheduler's snapshot, by node names, " +
			"for longer than events in flight explain, and was rebuilt from the node informer's lister.",
		StabilityLevel: metrics.ALPHA,
	})
	registerMetrics sync.Once
)

// register adds the metrics to kube-scheduler's legacy registry, the one its
// /metrics serves, once however many profiles enable the plugin.
func register() {
	registerMetrics.Do(func() {
		legacyregistry.MustRegister(indexRepairs)
	})
}
