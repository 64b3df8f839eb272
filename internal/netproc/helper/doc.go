// Package helper is the network helper process (package netproc): the
// user-space network stack (netstack) serving one sandbox's TUN device
// under that sandbox's policy (netpolicy). agentkernel-full runs Main
// when it is started as netproc.Argv0.
package helper
