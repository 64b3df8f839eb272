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
// runs: no garbage collector, no node lifecycle controller. Node.Import
// adds images to a running node's store.
//
// Pods get addresses of PodSubnet on the node's bridge, which has no
// address of it on the host (two nodes may share the subnet, each on
// its bridge), and one route out: WorldNet (198.18.0.0/15, the
// benchmarking range) via WorldGateway, an address no pod gets. Nothing
// answers there until a test starts a World (Node.StartWorld): a network
// namespace on the bridge, holding WorldGateway and an address of
// WorldNet where goroutines of the test serve DNS for the names it was
// given, HTTP, a TCP port and a UDP port, and count what arrives, so
// that a test can show what a pod did or did not reach.
package kubelab
