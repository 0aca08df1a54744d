// gpu-class-scheduler: the stock kube-scheduler, with one PreFilter plugin of
// ours registered beside the in-tree ones. Flags, configuration and every
// other plugin are kube-scheduler's own; config.yaml enables NodeLabelIndex in
// each profile.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"gpu-class.io/scheduler/nodelabelindex"
)

func main() {
	command := app.NewSchedulerCommand(app.WithPlugin(nodelabelindex.Name, nodelabelindex.New))
	os.Exit(cli.Run(command))
}
