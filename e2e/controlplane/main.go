// Command controlplane links etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler into one binary (the way hyperkube once did) so that the large
// shared Kubernetes code is compiled and linked once. It dispatches on the name it
// was invoked by (symlinks) or on its first argument.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args
	if name == "controlplane" && len(os.Args) > 1 {
		name = os.Args[1]
		args = os.Args[1:]
	}
	switch name {
	case "etcd":
		etcdmain.Main(args)
	case "kube-apiserver":
		os.Args = args
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	case "kube-controller-manager":
		os.Args = args
		os.Exit(cli.Run(controllermanager.NewControllerManagerCommand()))
	case "kube-scheduler":
		os.Args = args
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	default:
		fmt.Fprintf(os.Stderr, "usage: controlplane etcd|kube-apiserver|kube-controller-manager|kube-scheduler [flags]\n")
		os.Exit(2)
	}
}
