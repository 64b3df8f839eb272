package proxy

import (
	"encoding/binary"
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/kubeegress"
)

// ipsDstNAT is the connection-tracking status bit of a connection whose
// destination was rewritten (IPS_DST_NAT; a redirect is one).
const ipsDstNAT = 1 << 5

// TableName is the nftables table (family inet) the rules live in.
const TableName = "agentkernel-egress"

// Install writes r's rules into the calling thread's network namespace,
// replacing an earlier table of the same name (an init container that
// runs again after a restart of the pod's sandbox):
//
//	nat output:    skuid UID → return;
//	               udp/tcp dport 53 → redirect to DNSPort;
//	               oif lo → return; tcp → redirect to TCPPort
//	filter output: oif lo, ct established/related, skuid UID,
//	               ct status dnat → accept; anything else → drop
//
// Nothing but the proxy's user reaches past the pod: a TCP connection
// reaches the proxy, DNS its resolver, and UDP, ICMP and every other
// protocol are dropped.
func Install(r kubeegress.Rules) error {
	if r.TCPPort == 0 || r.DNSPort == 0 {
		return fmt.Errorf("egress rules: the proxy's ports must not be 0")
	}
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("egress rules: netlink: %w", err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("egress rules: listing nftables tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == TableName {
			c.DelTable(t)
		}
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: TableName})
	accept := nftables.ChainPolicyAccept
	nat := c.AddChain(&nftables.Chain{Name: "nat-output", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest, Policy: &accept})
	filter := c.AddChain(&nftables.Chain{Name: "filter-output", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &accept})

	add := func(ch *nftables.Chain, es ...expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: es})
	}
	ret := &expr.Verdict{Kind: expr.VerdictReturn}
	acc := &expr.Verdict{Kind: expr.VerdictAccept}

	// nat output. DNS is redirected before loopback is left alone: a
	// resolver on a loopback address (a pod whose resolv.conf names
	// none, where clients ask 127.0.0.1) is the proxy's too.
	add(nat, append(skuid(r.UID), ret)...)
	add(nat, append(dport(unix.IPPROTO_UDP, 53), redirect(r.DNSPort)...)...)
	add(nat, append(dport(unix.IPPROTO_TCP, 53), redirect(r.DNSPort)...)...)
	add(nat, append(oifLo(), ret)...)
	add(nat, append(l4proto(unix.IPPROTO_TCP), redirect(r.TCPPort)...)...)

	// filter output
	add(filter, append(oifLo(), acc)...)
	add(filter,
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: native32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED), Xor: native32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: native32(0)},
		acc)
	add(filter, append(skuid(r.UID), acc)...)
	add(filter,
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: native32(ipsDstNAT), Xor: native32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: native32(0)},
		acc)
	add(filter, &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop})

	if err := c.Flush(); err != nil {
		return fmt.Errorf("egress rules: writing the nftables table: %w (the init container needs CAP_NET_ADMIN and a kernel with nf_tables and its nat support)", err)
	}
	return nil
}

func native32(v uint32) []byte {
	b := make([]byte, 4)
	binary.NativeEndian.PutUint32(b, v)
	return b
}

func oifLo() []expr.Any {
	name := make([]byte, unix.IFNAMSIZ)
	copy(name, "lo")
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: name},
	}
}

func skuid(uid uint32) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeySKUID, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: native32(uid)},
	}
}

func l4proto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

func dport(p byte, port uint16) []expr.Any {
	return append(l4proto(p),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, port)},
	)
}

func redirect(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binary.BigEndian.AppendUint16(nil, port)},
		&expr.Redir{RegisterProtoMin: 1},
	}
}
