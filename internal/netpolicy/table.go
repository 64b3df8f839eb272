package netpolicy

import (
	"container/list"
	"net/netip"
	"sort"
	"sync"
	"time"
)

// nameTable remembers which names resolved to which addresses, until the
// answer's expiry. It holds at most max (address, name) pairs: when full,
// the pair refreshed longest ago goes.
type nameTable struct {
	mu     sync.Mutex
	max    int
	byAddr map[netip.Addr]map[string]*list.Element
	lru    *list.List // of *binding, most recently refreshed first
}

// maxNamesPerAddr bounds the names remembered for one address.
const maxNamesPerAddr = 64

type binding struct {
	addr    netip.Addr
	name    string
	expires time.Time
}

func newNameTable(max int) *nameTable {
	return &nameTable{max: max, byAddr: map[netip.Addr]map[string]*list.Element{}, lru: list.New()}
}

// add remembers that name resolved to addr until expires (or later, if
// an earlier answer said so).
func (t *nameTable) add(name string, addr netip.Addr, expires time.Time) {
	addr = canonical(addr)
	t.mu.Lock()
	defer t.mu.Unlock()
	names := t.byAddr[addr]
	if el, ok := names[name]; ok {
		b := el.Value.(*binding)
		if expires.After(b.expires) {
			b.expires = expires
		}
		t.lru.MoveToFront(el)
		return
	}
	if len(names) >= maxNamesPerAddr {
		// Many names for one address (random names under an allowed
		// wildcard): the one that expires first goes.
		var old *list.Element
		for _, el := range names {
			if old == nil || el.Value.(*binding).expires.Before(old.Value.(*binding).expires) {
				old = el
			}
		}
		t.removeLocked(old)
		names = t.byAddr[addr]
	}
	for t.lru.Len() >= t.max {
		t.removeLocked(t.lru.Back())
		names = t.byAddr[addr]
	}
	if names == nil {
		names = map[string]*list.Element{}
		t.byAddr[addr] = names
	}
	names[name] = t.lru.PushFront(&binding{addr: addr, name: name, expires: expires})
}

func (t *nameTable) removeLocked(el *list.Element) {
	b := t.lru.Remove(el).(*binding)
	names := t.byAddr[b.addr]
	delete(names, b.name)
	if len(names) == 0 {
		delete(t.byAddr, b.addr)
	}
}

// lookup returns the names that resolved to addr and have not expired at
// now, the one that stays longest first.
func (t *nameTable) lookup(addr netip.Addr, now time.Time) []string {
	addr = canonical(addr)
	t.mu.Lock()
	defer t.mu.Unlock()
	names := t.byAddr[addr]
	if len(names) == 0 {
		return nil
	}
	var out []*binding
	for _, el := range names {
		b := el.Value.(*binding)
		if now.After(b.expires) {
			t.removeLocked(el)
			continue
		}
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].expires.After(out[j].expires) })
	res := make([]string, len(out))
	for i, b := range out {
		res[i] = b.name
	}
	return res
}

// has reports whether name resolved to addr and has not expired.
func (t *nameTable) has(addr netip.Addr, name string, now time.Time) bool {
	addr = canonical(addr)
	t.mu.Lock()
	defer t.mu.Unlock()
	el, ok := t.byAddr[addr][name]
	return ok && !now.After(el.Value.(*binding).expires)
}

// len is the number of (address, name) pairs held.
func (t *nameTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lru.Len()
}
