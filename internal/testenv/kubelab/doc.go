// Package kubelab is test support for the kubernetes backend: a real
// Kubernetes API (kube-apiserver over etcd, both built by
// scripts/kube.sh) started on loopback for a test binary, with
// self-made certificates, a service-account signing key, static tokens
// (an administrator in system:masters, a user with no role, a node and
// a scheduler) and Node and RBAC authorization.
//
// A test that needs pods to run asks for a node (Lab.StartNode, or
// Shared.Node): containerd and runc from the host's packages, a kubelet
// and a kube-scheduler (scripts/kube.sh), and the CNI bridge plugin, with
// the test's images imported into containerd's store (no registry is
// reached). The node lives in a mount namespace, a cgroup tree and a
// bridge of its own, and Close removes all three. No controller manager
// runs: no garbage collector, no node lifecycle controller.
package kubelab
