package netpolicy

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Kinds of flows and refusals.
const (
	KindDNS  = "dns"  // a name refused, or an answer's address dropped
	KindTCP  = "tcp"  // a connection refused by its address
	KindUDP  = "udp"  // a UDP flow refused
	KindSNI  = "sni"  // a TLS connection refused by its server name
	KindHost = "host" // an HTTP connection refused by its Host
)

var kinds = []string{KindDNS, KindTCP, KindUDP, KindSNI, KindHost}

// Denial is one refusal.
type Denial struct {
	Time time.Time
	Kind string         // KindDNS, KindTCP, ...
	Name string         // the name asked for or presented, if any
	Addr netip.AddrPort // the destination, if any (a DNS refusal has none)
	// Reason says why, in words.
	Reason string
	// Allow is the flag (or setting) that would allow it, "" when none
	// would (a blocked name, an address refused in every mode).
	Allow string
}

// String is the denial in one line.
func (d Denial) String() string {
	var b strings.Builder
	b.WriteString(d.Kind)
	b.WriteString(" ")
	b.WriteString(d.target())
	b.WriteString(": ")
	b.WriteString(d.Reason)
	if d.Allow != "" {
		fmt.Fprintf(&b, " (allow with %s)", d.Allow)
	}
	return b.String()
}

func (d Denial) target() string {
	switch {
	case d.Name != "" && d.Addr.IsValid():
		return fmt.Sprintf("%s (%s)", d.Name, d.Addr)
	case d.Name != "":
		return d.Name
	default:
		return d.Addr.String()
	}
}

// Stats are the engine's counters.
type Stats struct {
	// Allowed and Denied count flows by kind (KindDNS counts queries
	// answered from upstream and queries refused).
	Allowed, Denied map[string]uint64
	// DNSQueries counts every DNS message received; DNSErrors those that
	// got SERVFAIL because no upstream answered.
	DNSQueries, DNSErrors uint64
	// DNSDroppedRecords counts A/AAAA records removed from answers.
	DNSDroppedRecords uint64
	// DialErrors counts upstream dials that failed (the sandbox got a RST).
	DialErrors uint64
	// Names is the size of the name -> address table; Conns the number of
	// connections being served.
	Names, Conns int
	// Injected counts the secrets added to requests (one per secret and
	// request); SecretRefused the refusals of the secret injector
	// (KindSecret denials, not counted in Denied).
	Injected, SecretRefused uint64
}

type counters struct {
	allowed, denied                   [5]atomic.Uint64
	dnsQueries, dnsErrors, dnsDropped atomic.Uint64
	dialErrors                        atomic.Uint64
	injected, secretRefused           atomic.Uint64
}

func kindIndex(k string) int {
	for i, x := range kinds {
		if x == k {
			return i
		}
	}
	return 0
}

func (e *Engine) allowed(kind string) { e.stats.allowed[kindIndex(kind)].Add(1) }

// Stats returns a snapshot of the counters.
func (e *Engine) Stats() Stats {
	s := Stats{Allowed: map[string]uint64{}, Denied: map[string]uint64{}}
	for i, k := range kinds {
		s.Allowed[k] = e.stats.allowed[i].Load()
		s.Denied[k] = e.stats.denied[i].Load()
	}
	s.DNSQueries = e.stats.dnsQueries.Load()
	s.DNSErrors = e.stats.dnsErrors.Load()
	s.DNSDroppedRecords = e.stats.dnsDropped.Load()
	s.DialErrors = e.stats.dialErrors.Load()
	s.Names = e.names.len()
	s.Conns = e.active() / 2
	s.Injected = e.stats.injected.Load()
	s.SecretRefused = e.stats.secretRefused.Load()
	return s
}

// deny counts d, and reports it if it is the first of its kind: a
// sandbox that repeats a refused request thousands of times must not
// flood the audit log.
func (e *Engine) deny(d Denial) {
	d.Time = e.now()
	if d.Kind == KindSecret {
		e.stats.secretRefused.Add(1)
	} else {
		e.stats.denied[kindIndex(d.Kind)].Add(1)
	}
	if e.log.add(d) && e.onDeny != nil {
		e.onDeny(d)
	}
}

// maxSummary bounds the distinct refusals kept for Summary.
const maxSummary = 256

// denialKey tells distinct refusals apart; the reason only for the
// secret injector's, whose reasons for one host differ in kind.
type denialKey struct{ kind, target, allow, reason string }

// denialLog keeps distinct refusals, first come, with their counts.
type denialLog struct {
	mu      sync.Mutex
	entries map[denialKey]*summaryEntry
	dropped uint64 // refusals not kept because the log was full
}

type summaryEntry struct {
	d     Denial
	count uint64
}

// add records d and reports whether it is a new distinct refusal.
func (l *denialLog) add(d Denial) bool {
	k := denialKey{d.Kind, summaryTarget(d), d.Allow, ""}
	if d.Kind == KindSecret {
		k.reason = d.Reason
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.entries == nil {
		l.entries = map[denialKey]*summaryEntry{}
	}
	if s, ok := l.entries[k]; ok {
		s.count++
		return false
	}
	if len(l.entries) >= maxSummary {
		l.dropped++
		return false
	}
	l.entries[k] = &summaryEntry{d: d, count: 1}
	return true
}

// summaryTarget is what a refusal is about, without the source port
// noise: the name, else the address (without port for tcp refusals).
func summaryTarget(d Denial) string {
	if d.Name != "" {
		return d.Name
	}
	if d.Kind == KindUDP {
		return d.Addr.String()
	}
	return d.Addr.Addr().String()
}

// Denials returns the distinct refusals so far (deduplicated by kind,
// target and allow hint), sorted by target, with how often each
// happened; at most 256.
func (e *Engine) Denials() []DenialCount {
	e.log.mu.Lock()
	defer e.log.mu.Unlock()
	out := make([]DenialCount, 0, len(e.log.entries))
	for k, s := range e.log.entries {
		out = append(out, DenialCount{Denial: s.d, Target: k.target, Count: s.count})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Target != out[j].Target {
			return out[i].Target < out[j].Target
		}
		return out[i].Kind < out[j].Kind
	})
	return out
}

// DenialCount is a distinct refusal and how often it happened.
type DenialCount struct {
	Denial
	Target string // the name, or the address, refused
	Count  uint64
}

// summaryItems bounds the targets Summary names.
const summaryItems = 8

// Summary is one line naming what was blocked and the flags that would
// allow it, "" when nothing was: for `run` to print at its end.
func (e *Engine) Summary() string {
	ds := e.Denials()
	if len(ds) == 0 {
		return ""
	}
	// One item per target: its kinds merged, its hints listed once.
	type item struct {
		target string
		count  uint64
		allow  []string
	}
	var items []*item
	byTarget := map[string]*item{}
	for _, d := range ds {
		it := byTarget[d.Target]
		if it == nil {
			it = &item{target: d.Target}
			byTarget[d.Target] = it
			items = append(items, it)
		}
		it.count += d.Count
		if d.Allow != "" && !contains(it.allow, d.Allow) {
			it.allow = append(it.allow, d.Allow)
		}
	}
	var b strings.Builder
	b.WriteString("network: blocked ")
	for i, it := range items {
		if i == summaryItems {
			fmt.Fprintf(&b, " and %d more", len(items)-summaryItems)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(it.target)
		if it.count > 1 {
			fmt.Fprintf(&b, " (%dx)", it.count)
		}
		if len(it.allow) > 0 {
			fmt.Fprintf(&b, " [%s]", strings.Join(it.allow, " or "))
		}
	}
	e.log.mu.Lock()
	if e.log.dropped > 0 {
		fmt.Fprintf(&b, " (and %d refusals not itemised)", e.log.dropped)
	}
	e.log.mu.Unlock()
	return b.String()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Hints.
func allowDomainHint(name string) string { return "--allow-domain " + name }

// refusalHint is the flag that would allow an address refused for why,
// or "" where none should be offered: metadata and the block list are
// refused on purpose, and the sandbox's own network (the gateway, the
// resolver) is the stack itself, which an --allow-cidr would not reach
// but send to the host's network instead.
func refusalHint(a netip.Addr, why string) string {
	switch why {
	case reasonMetadata, reasonBlocked, reasonSandboxNet, reasonUnspecified:
		return ""
	}
	return allowCIDRHint(a)
}

func allowCIDRHint(a netip.Addr) string {
	a = canonical(a)
	return fmt.Sprintf("--allow-cidr %s/%d", a, a.BitLen())
}

func allowUDPHint(dst netip.AddrPort) string {
	return fmt.Sprintf("allow_udp = [%q] in [network]", netip.AddrPortFrom(canonical(dst.Addr()), dst.Port()).String())
}
