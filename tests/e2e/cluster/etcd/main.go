// Command etcd is the stock etcd server (etcdmain), built at the version
// k8s.io/kubernetes v1.37.2 requires, so the control plane needs no download.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
