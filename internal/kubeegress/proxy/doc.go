// Package proxy runs the parts of a Kubernetes sandbox's egress proxy
// inside its pod (package kubeegress describes the pod): Install writes
// the nftables rules of the pod's network namespace, Serve is the proxy
// the rules send every outgoing connection and DNS message to, and Main
// is agentkernel-full's "kube-egress" entry point for both.
//
// The rules are written with github.com/google/nftables (netlink, no nft
// binary in the image). The proxy is a transparent one: a redirected
// connection's original destination comes from the kernel's connection
// tracking (SO_ORIGINAL_DST), and the connection is handed to the same
// policy engine (package netpolicy) that serves every other backend's
// user-space network, as if the sandbox's SYN had reached it there. One
// difference follows from the redirect: the sandbox's connection is
// already established when the proxy sees it, so a refused destination
// is a reset after the connect, not instead of it.
package proxy
