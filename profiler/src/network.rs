//! Per-exec network figures, from two kernel views:
//! - the exec's sockets, counted by their cgroup (cgroup_skb programs on the attached
//!   subtree): works in any network namespace, IP bytes, split loopback / other;
//! - the interfaces of the exec's own network namespaces (the CNI netns of a container),
//!   counted as the interfaces count them (link-layer bytes, ARP included), from the moment
//!   the exec first ran a program there. A pooled namespace's earlier traffic is not
//!   included, and the counts survive the namespace's deletion.

use profiler_common::{ARPHRD_LOOPBACK, IfaceKey, IfaceTraffic, SockTraffic};
use serde::Serialize;

#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Traffic {
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
}

impl Traffic {
    fn add(&mut self, o: &Traffic) {
        self.rx_bytes += o.rx_bytes;
        self.rx_packets += o.rx_packets;
        self.tx_bytes += o.tx_bytes;
        self.tx_packets += o.tx_packets;
    }
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SocketsReport {
    /// All traffic of the exec's sockets (IP bytes), loopback included.
    #[serde(flatten)]
    pub all: Traffic,
    /// The part that went over a loopback device.
    pub loopback: Traffic,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct InterfaceReport {
    /// Inode number of the network namespace (as /proc/PID/ns/net shows it).
    pub netns: u32,
    pub name: String,
    pub ifindex: u32,
    pub loopback: bool,
    #[serde(flatten)]
    pub traffic: Traffic,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct NetReport {
    /// "own" when the exec's programs ran in a network namespace other than the host's;
    /// "host" otherwise (then only the socket view is per exec: the host's interfaces are
    /// shared).
    pub namespace: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sockets: Option<SocketsReport>,
    /// Why there is no socket view on this host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sockets_missing: Option<String>,
    /// The interfaces of the exec's own namespaces that carried traffic.
    pub interfaces: Vec<InterfaceReport>,
    /// Sum over `interfaces` without loopback: what the exec exchanged with the world.
    /// Absent for execs in the host namespace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interfaces_total: Option<Traffic>,
    /// Why there is no interface view on this host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interfaces_missing: Option<String>,
}

/// What the kernel side holds for one exec.
pub struct NetInput<'a> {
    pub sock: &'a SockTraffic,
    pub sockets_status: &'a Result<(), String>,
    pub interfaces_status: &'a Result<(), String>,
    /// Namespaces registered as the exec's (inode numbers).
    pub namespaces: &'a [u32],
    pub ifaces: &'a [(IfaceKey, IfaceTraffic)],
}

impl NetReport {
    pub fn build(i: NetInput<'_>) -> Self {
        let sockets = i.sockets_status.as_ref().ok().map(|_| {
            let s = i.sock;
            SocketsReport {
                all: Traffic {
                    rx_bytes: s.rx_bytes,
                    rx_packets: s.rx_packets,
                    tx_bytes: s.tx_bytes,
                    tx_packets: s.tx_packets,
                },
                loopback: Traffic {
                    rx_bytes: s.lo_rx_bytes,
                    rx_packets: s.lo_rx_packets,
                    tx_bytes: s.lo_tx_bytes,
                    tx_packets: s.lo_tx_packets,
                },
            }
        });
        let mut interfaces: Vec<InterfaceReport> = i
            .ifaces
            .iter()
            .map(|(k, t)| InterfaceReport {
                netns: k.netns_inum,
                name: cstr(&t.name),
                ifindex: k.ifindex,
                loopback: t.dev_type == ARPHRD_LOOPBACK,
                traffic: Traffic {
                    rx_bytes: t.rx_bytes,
                    rx_packets: t.rx_packets,
                    tx_bytes: t.tx_bytes,
                    tx_packets: t.tx_packets,
                },
            })
            .collect();
        interfaces.sort_by_key(|i| (i.netns, i.ifindex));
        let own = !i.namespaces.is_empty() || !interfaces.is_empty();
        let interfaces_total = (own && i.interfaces_status.is_ok()).then(|| {
            let mut t = Traffic::default();
            for x in interfaces.iter().filter(|x| !x.loopback) {
                t.add(&x.traffic);
            }
            t
        });
        Self {
            namespace: if own { "own" } else { "host" },
            sockets,
            sockets_missing: i.sockets_status.clone().err(),
            interfaces,
            interfaces_total,
            interfaces_missing: i.interfaces_status.clone().err(),
        }
    }

    /// Bytes received and sent: the own namespace's interfaces where the exec has one, else
    /// its sockets. None when neither view exists.
    pub fn headline(&self) -> Option<(u64, u64)> {
        if let Some(t) = &self.interfaces_total {
            return Some((t.rx_bytes, t.tx_bytes));
        }
        self.sockets
            .as_ref()
            .map(|s| (s.all.rx_bytes, s.all.tx_bytes))
    }
}

fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(
        exec: u64,
        ns: u32,
        idx: u32,
        name: &str,
        ty: u32,
        rx: u64,
        tx: u64,
    ) -> (IfaceKey, IfaceTraffic) {
        let mut n = [0u8; 16];
        n[..name.len()].copy_from_slice(name.as_bytes());
        (
            IfaceKey {
                exec_id: exec,
                netns_inum: ns,
                ifindex: idx,
            },
            IfaceTraffic {
                rx_bytes: rx,
                rx_packets: 1,
                tx_bytes: tx,
                tx_packets: 2,
                name: n,
                dev_type: ty,
                _pad: 0,
            },
        )
    }

    #[test]
    fn own_namespace_totals_leave_loopback_out() {
        let ifaces = [
            iface(7, 99, 1, "lo", ARPHRD_LOOPBACK, 1000, 1000),
            iface(7, 99, 2, "eth0", 1, 300, 500),
        ];
        let r = NetReport::build(NetInput {
            sock: &SockTraffic::default(),
            sockets_status: &Ok(()),
            interfaces_status: &Ok(()),
            namespaces: &[99],
            ifaces: &ifaces,
        });
        assert_eq!(r.namespace, "own");
        assert_eq!(r.interfaces[0].name, "lo");
        assert!(r.interfaces[0].loopback);
        let t = r.interfaces_total.unwrap();
        assert_eq!((t.rx_bytes, t.tx_bytes, t.tx_packets), (300, 500, 2));
        assert_eq!(r.headline(), Some((300, 500)));
    }

    #[test]
    fn own_namespace_without_traffic_has_real_zeros() {
        let r = NetReport::build(NetInput {
            sock: &SockTraffic::default(),
            sockets_status: &Ok(()),
            interfaces_status: &Ok(()),
            namespaces: &[5],
            ifaces: &[],
        });
        assert_eq!(r.interfaces_total, Some(Traffic::default()));
        assert_eq!(r.sockets.unwrap().all, Traffic::default());
    }

    #[test]
    fn host_namespace_uses_sockets_and_missing_views_are_flagged() {
        let sock = SockTraffic {
            rx_bytes: 10,
            tx_bytes: 20,
            ..Default::default()
        };
        let r = NetReport::build(NetInput {
            sock: &sock,
            sockets_status: &Ok(()),
            interfaces_status: &Err("no tracepoint".into()),
            namespaces: &[],
            ifaces: &[],
        });
        assert_eq!(r.namespace, "host");
        assert_eq!(r.interfaces_total, None);
        assert_eq!(r.interfaces_missing.as_deref(), Some("no tracepoint"));
        assert_eq!(r.headline(), Some((10, 20)));
        let r = NetReport::build(NetInput {
            sock: &sock,
            sockets_status: &Err("cannot attach".into()),
            interfaces_status: &Ok(()),
            namespaces: &[],
            ifaces: &[],
        });
        assert!(r.sockets.is_none());
        assert_eq!(r.sockets_missing.as_deref(), Some("cannot attach"));
        let v = serde_json::to_value(&r).unwrap();
        assert!(v.get("sockets").is_none(), "{v}");
        assert_eq!(r.headline(), None);
    }
}
