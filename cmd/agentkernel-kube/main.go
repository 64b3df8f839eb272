// Command agentkernel-kube serves `agentkernel ... -B kubernetes`: the
// kubernetes backend, whose client (k8s.io/client-go) is too heavy to
// link into agentkernel-full, which every sandbox's supervisor and
// network helper also runs (see internal/backend/kubernetes's package
// doc for the measurement). agentkernel-full hands it such command lines
// with one execve; it also runs in a cluster as the controller of the
// AgentSandbox resources (`agentkernel-kube controller --in-cluster`).
package main

import (
	"os"

	"github.com/agentkernel/agentkernel/internal/kubecli"
)

func main() { os.Exit(kubecli.MainOS()) }
