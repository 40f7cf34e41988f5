// Command kubectl is kubectl, built from k8s.io/kubectl at the release of
// the control plane in ../controlplane, so the project's tests drive a
// current kubectl on machines that have none (Debian's is 1.20).
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
