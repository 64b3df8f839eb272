// Package kubelab is test support for the kubernetes backend: a real
// Kubernetes API (kube-apiserver over etcd, both built by
// scripts/kube.sh) started on loopback for a test binary, with
// self-made certificates, a service-account signing key, static tokens
// (an administrator in system:masters and a user with no role) and RBAC
// authorization. There is no kubelet, scheduler or controller manager:
// pods are API objects that stay Pending, and nothing runs in them.
package kubelab
