// Package netnstest is test support for the network stack's tests: a
// network namespace held by one locked thread of the test process.
package netnstest
