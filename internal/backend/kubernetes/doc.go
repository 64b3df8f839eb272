// Package kubernetes is the kubernetes backend (-B kubernetes): a
// sandbox is a pod in one namespace of a cluster, with a NetworkPolicy of
// its own, made through the API with k8s.io/client-go.
//
// # Objects
//
// Create makes the sandbox's NetworkPolicy (agentkernel-<name>) first and
// its pod second: the policy fences the pod from the moment it exists,
// and its name, unique in the namespace, claims the sandbox's name. The
// pod (spec.go) idles (sleep infinity) until commands are exec'd into
// it; each profile becomes its security context (see Profiles). Every
// object carries agentkernel.io/managed-by=agentkernel and every
// selector asks for it, so that nothing of anyone else's in the
// namespace is ever listed, adopted or deleted. Names are checked
// (ValidName) before any request is sent.
//
// Warm pools (pool.go) are pods labelled agentkernel.io/pool=<pool>
// under the pool's deny-all policy; adoption rewrites one pod's labels
// in a single update carrying its resourceVersion, so that concurrent
// adopters never share a pod. TTLs are an annotation that Reap (ttl.go)
// and the controller enforce. The AgentSandbox and AgentSandboxPool
// custom resources (crd.go, crds.json) are reconciled by polling, through
// the dynamic client, with owner references on what they own.
//
// # Why a binary of its own
//
// client-go cannot be linked into agentkernel-full: that binary is also
// every sandbox's supervisor and network helper, and every package's
// initialisation runs at each of their starts. Measured on the 2-core
// test machine (shared with other builds, so the medians are noisy;
// GODEBUG=inittrace=1, `agentkernel-full --version`, 31 runs each, two
// series), agentkernel-full with this package linked in:
//
//	                          without     with
//	package init, fastest     5.9-7.4 ms  12.4-15.6 ms
//	package init, median      15.2 ms     34.7-37.2 ms
//	init allocations          0.99 MB     2.93 MB
//	binary size               41.9 MB     78.1 MB
//
// (client-go's scheme registration, apimachinery's meta/v1 and
// structured-merge-diff lead.) That is several milliseconds and 2 MB per
// start, over the 1 ms budget, so the backend lives in agentkernel-kube
// (cmd/agentkernel-kube, package kubecli), to which agentkernel-full
// hands a command line that names -B kubernetes (fullbin.WantsKube).
//
// # Not tested here
//
// The tests run against a real kube-apiserver and etcd (package
// kubelab), and the TestNode tests on a real node of it (containerd 1.6,
// runc, kubelet, CNI bridge): exec, WriteFile and ReadFile, and each
// profile's security context inside a running pod are tested there.
// Not tested: hostUsers: false taking effect (containerd 1.6 cannot make
// a user namespace, and the kubelet refuses the pod, which the tests
// check), and the enforcement of the NetworkPolicies (the network
// plugin's work; the bridge plugin enforces none). docs/kubernetes.md
// says more.
package kubernetes
