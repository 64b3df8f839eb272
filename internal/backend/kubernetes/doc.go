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
// # Records of persistent sandboxes
//
// serve's persistent sandboxes (Sandboxes, sandboxes.go) keep their
// records (sandbox.Info and Spec) in the cluster, not on the server's
// machine (records.go): a Secret agentkernel-sandbox-<name> per sandbox
// in its namespace, of type agentkernel.io/sandbox-record, labelled with
// ManagedLabel and SandboxLabel, so that every server of the namespace
// (a Deployment's replicas) shares them and a restart loses none. The
// API server's guarantees do the store's work: Create is the atomic
// claim of the name (AlreadyExists: sandbox.ErrSandboxExists), an update
// carries the resourceVersion it read and is read again and retried on a
// conflict, List is one call selecting the labels and the type (a field
// selector), Remove deletes the pod and NetworkPolicy first and the
// record last (with its UID as a precondition). Start writes a claim
// into the record before it makes the pod, so that another server's
// Start waits rather than replacing that pod. max_sandboxes is counted
// after the create: a creator that finds the cap passed withdraws its own
// record, so that racing servers never exceed it.
//
// Why a Secret rather than a ConfigMap or a custom resource: a record
// holds the sandbox's environment, whose values may be credentials; a
// Secret is what RBAC and encryption at rest treat as such. A custom
// resource of our own would let RBAC grant the records and no other
// Secret (get, list and create cannot be narrowed to one Secret type or
// name prefix), but its CRD must be installed cluster-wide first, and
// serve must work in a namespace without it. The rights on secrets
// therefore reach the namespace's every Secret: agentkernel wants a
// namespace of its own (docs/kubernetes.md, docs/deploy.md). Records an
// earlier version kept in the data directory are moved in once at
// serve's start (MigrateLocal, migrate.go), the files kept aside.
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
// The records are tested on the API server alone (records_linux_test.go:
// servers sharing them, concurrent creates of a name and under the cap,
// update conflicts, start claims, hostile names and Secrets, the chart's
// Role; records_node_linux_test.go: two servers starting one sandbox at
// once on the node).
// Not tested: hostUsers: false taking effect (containerd 1.6 cannot make
// a user namespace, and the kubelet refuses the pod, which the tests
// check), and the enforcement of the NetworkPolicies (the network
// plugin's work; the bridge plugin enforces none). docs/kubernetes.md
// says more.
package kubernetes
