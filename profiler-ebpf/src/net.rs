//! Network: the exec's sockets (cgroup_skb, any namespace) and the interfaces of its own
//! network namespaces (net_dev_xmit, netif_receive_skb).

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::generated as helper,
    macros::{btf_tracepoint, cgroup_skb, map},
    maps::HashMap,
    programs::{BtfTracePointContext, SkBuffContext},
};
use profiler_common::{ABSENT, DropReason, IfaceKey, IfaceTraffic, NetnsEntry};

use crate::{
    config::{CONFIG, global},
    maps::{add, drop_count, entry_of, stats_of},
    read::{ld, ld_ptr, rd, rd_ptr},
};

/// Network namespaces of the execs (key: `struct net` address), other than the host's.
#[map]
pub(crate) static NETNS: HashMap<u64, NetnsEntry> = HashMap::with_max_entries(4096, 0);

/// Interface traffic of the execs' own network namespaces.
#[map]
pub(crate) static IFACES: HashMap<IfaceKey, IfaceTraffic> = HashMap::with_max_entries(16384, 0);

// Network. Two views: the exec's sockets, by their cgroup (cgroup_skb on the attached subtree:
// any namespace, IP bytes), and the interfaces of the exec's own network namespaces, counted
// as the interfaces count (link-layer bytes) at transmit and receive. The interface programs
// run for every packet of the host; their common path is one hash lookup of the device's
// namespace, which finds nothing outside the execs' namespaces.

/// Make the task's network namespace its exec's, unless it is the host's. The newest exec
/// wins: a pooled namespace belongs to the exec that uses it now.
#[inline(always)]
pub(crate) fn note_netns(task: *const u8, exec_id: u64) {
    let off = net_off!(task_nsproxy);
    if off == ABSENT {
        return;
    }
    let net = ld_ptr(ld_ptr(task, off), net_off!(nsproxy_net_ns));
    // Most programs run in the host's namespace: tell that before any map lookup.
    let inum = ld::<u32>(net, net_off!(net_ns_inum));
    if net.is_null() || inum == 0 || inum == global(&CONFIG.host_netns_inum) {
        return;
    }
    let key = net as u64;
    // SAFETY: plain data copied out.
    if let Some(e) = unsafe { NETNS.get(&key) }
        && e.exec_id == exec_id
    {
        return;
    }
    let e = NetnsEntry {
        exec_id,
        inum,
        _pad: 0,
    };
    if NETNS.insert(&key, &e, 0).is_err() {
        drop_count(DropReason::NetFull);
    }
}

/// The exec whose namespace the device is in.
#[inline(always)]
pub(crate) fn netns_of(dev: *const u8) -> Option<NetnsEntry> {
    let net = rd_ptr(dev, net_off!(netdev_nd_net));
    // SAFETY: plain data copied out.
    unsafe { NETNS.get(&(net as u64)) }.copied()
}

#[inline(always)]
pub(crate) fn count_iface(dev: *const u8, ns: &NetnsEntry, len: u64, tx: bool) -> Option<()> {
    let key = IfaceKey {
        exec_id: ns.exec_id,
        netns_inum: ns.inum,
        ifindex: rd::<u32>(dev, net_off!(netdev_ifindex)),
    };
    let v = match IFACES.get_ptr_mut(&key) {
        Some(v) => v,
        None => {
            let t = IfaceTraffic {
                name: rd(dev, net_off!(netdev_name)),
                dev_type: rd::<u16>(dev, net_off!(netdev_type)) as u32,
                ..Default::default()
            };
            // Another CPU may have inserted it meanwhile: then the lookup below finds it.
            let _ = IFACES.insert(&key, &t, BPF_NOEXIST as u64);
            match IFACES.get_ptr_mut(&key) {
                Some(v) => v,
                None => {
                    drop_count(DropReason::NetFull);
                    return None;
                }
            }
        }
    };
    // SAFETY: map value, updated atomically.
    let v = unsafe { &mut *v };
    if tx {
        add(&mut v.tx_bytes, len);
        add(&mut v.tx_packets, 1);
    } else {
        add(&mut v.rx_bytes, len);
        add(&mut v.rx_packets, 1);
    }
    Some(())
}

/// A packet left a device (rc 0: the driver took it). `len` includes the link-layer header,
/// as the driver's own counters do.
#[btf_tracepoint(function = "net_dev_xmit")]
pub fn net_dev_xmit(ctx: BtfTracePointContext) -> i32 {
    let rc: i32 = ctx.arg(1);
    if rc == 0 {
        let dev: *const u8 = ctx.arg(2);
        if let Some(ns) = netns_of(dev) {
            let len: u32 = ctx.arg(3);
            let _ = count_iface(dev, &ns, len as u64, true);
        }
    }
    0
}

/// A packet arrived on a device. Its link-layer header has been pulled by now: add it back.
#[btf_tracepoint(function = "netif_receive_skb")]
pub fn netif_receive_skb(ctx: BtfTracePointContext) -> i32 {
    let skb: *const u8 = ctx.arg(0);
    let dev = rd_ptr(skb, net_off!(skb_dev));
    if let Some(ns) = netns_of(dev) {
        let len = rd::<u32>(skb, net_off!(skb_len)) as u64
            + rd::<u16>(dev, net_off!(netdev_hard_header_len)) as u64;
        let _ = count_iface(dev, &ns, len, false);
    }
    0
}

#[inline(always)]
pub(crate) fn count_sock(ctx: &SkBuffContext, tx: bool) -> Option<()> {
    let skb = ctx.skb.skb;
    // SAFETY: the context pointer of a cgroup_skb program; the helper takes it as is.
    let id = unsafe { helper::bpf_skb_cgroup_id(skb) };
    let entry = entry_of(id)?;
    let stats = stats_of(entry.slot)?;
    // SAFETY: context field loads, rewritten by the verifier.
    let (len, ifindex) = unsafe { ((*skb).len as u64, (*skb).ifindex) };
    let t = &mut stats.sock;
    // Every namespace's loopback device has ifindex 1 (LOOPBACK_IFINDEX).
    let lo = ifindex == 1;
    if tx {
        add(&mut t.tx_bytes, len);
        add(&mut t.tx_packets, 1);
        if lo {
            add(&mut t.lo_tx_bytes, len);
            add(&mut t.lo_tx_packets, 1);
        }
    } else {
        add(&mut t.rx_bytes, len);
        add(&mut t.rx_packets, 1);
        if lo {
            add(&mut t.lo_rx_bytes, len);
            add(&mut t.lo_rx_packets, 1);
        }
    }
    Some(())
}

/// Packets to the subtree's sockets. Always let them through.
#[cgroup_skb(ingress)]
pub fn sock_ingress(ctx: SkBuffContext) -> i32 {
    let _ = count_sock(&ctx, false);
    1
}

/// Packets from the subtree's sockets. Always let them through.
#[cgroup_skb(egress)]
pub fn sock_egress(ctx: SkBuffContext) -> i32 {
    let _ = count_sock(&ctx, true);
    1
}
