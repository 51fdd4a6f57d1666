//! Per-exec network figures, from two kernel views:
//! - the exec's sockets, counted by their cgroup (cgroup_skb programs on the attached
//!   subtree): works in any network namespace, IP bytes, split loopback / other;
//! - the interfaces of the exec's own network namespaces (the CNI netns of a container),
//!   counted as the interfaces count them (link-layer bytes, ARP included), from the moment
//!   the exec first ran a program there. A pooled namespace's earlier traffic is not
//!   included, and the counts survive the namespace's deletion.

use std::{collections::HashMap, fs, os::unix::fs::MetadataExt as _, path::Path};

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
    /// Absent for an interface that carried no traffic and is known from a sample only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ifindex: Option<u32>,
    pub loopback: bool,
    #[serde(flatten)]
    pub traffic: Traffic,
    /// Errors and drops, sampled from the namespace's interface statistics while the exec ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faults: Option<SampledFaults>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faults_missing: Option<&'static str>,
}

/// Error and drop counters of an interface (the driver's own, as /proc/net/dev shows them).
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Faults {
    pub rx_errors: u64,
    pub rx_dropped: u64,
    pub tx_errors: u64,
    pub tx_dropped: u64,
}

impl Faults {
    fn since(&self, b: &Faults) -> Faults {
        Faults {
            rx_errors: self.rx_errors.saturating_sub(b.rx_errors),
            rx_dropped: self.rx_dropped.saturating_sub(b.rx_dropped),
            tx_errors: self.tx_errors.saturating_sub(b.tx_errors),
            tx_dropped: self.tx_dropped.saturating_sub(b.tx_dropped),
        }
    }
}

/// Faults between two samples: counted from the first sample of the namespace in this exec
/// (so a pooled namespace's earlier faults are left out) to the last.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct SampledFaults {
    #[serde(flatten)]
    pub faults: Faults,
    /// When the first and last samples were taken (CLOCK_MONOTONIC ns).
    pub first_sample_ns: u64,
    pub last_sample_ns: u64,
}

/// Parse /proc/PID/net/dev: per interface, the error and drop counters.
pub fn parse_net_dev(text: &str) -> Result<Vec<(String, Faults)>, String> {
    let mut out = Vec::new();
    for line in text.lines().skip(2) {
        let (name, rest) = line
            .split_once(':')
            .ok_or_else(|| format!("net/dev line without a colon: {line:?}"))?;
        let v: Vec<u64> = rest
            .split_whitespace()
            .map(|x| x.parse::<u64>())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("net/dev line {line:?}: {e}"))?;
        if v.len() < 16 {
            return Err(format!(
                "net/dev line with {} fields, 16 expected: {line:?}",
                v.len()
            ));
        }
        // rx: bytes packets errs drop fifo frame compressed multicast; tx: bytes packets
        // errs drop fifo colls carrier compressed.
        out.push((
            name.trim().to_owned(),
            Faults {
                rx_errors: v[2],
                rx_dropped: v[3],
                tx_errors: v[10],
                tx_dropped: v[11],
            },
        ));
    }
    Ok(out)
}

/// The sampled faults of one exec's namespaces, by (namespace, interface name).
#[derive(Debug, Default)]
pub struct FaultSamples {
    by_iface: HashMap<(u32, String), (Faults, Faults, u64, u64)>,
}

impl FaultSamples {
    /// Read the interface statistics of the namespaces `inums` through a process of the exec
    /// (under `cgroup_dir`) that runs in each.
    pub fn sample(&mut self, cgroup_dir: &Path, inums: &[u32], now_ns: u64) {
        let mut todo: Vec<u32> = inums.to_vec();
        for pid in cgroup_pids(cgroup_dir) {
            if todo.is_empty() {
                break;
            }
            let Ok(m) = fs::metadata(format!("/proc/{pid}/ns/net")) else {
                continue;
            };
            let Some(pos) = todo.iter().position(|&i| i as u64 == m.ino()) else {
                continue;
            };
            let Ok(text) = fs::read_to_string(format!("/proc/{pid}/net/dev")) else {
                continue;
            };
            // The process may have left the namespace in between: check again.
            if fs::metadata(format!("/proc/{pid}/ns/net"))
                .map(|m2| m2.ino())
                .ok()
                != Some(m.ino())
            {
                continue;
            }
            let inum = todo.swap_remove(pos);
            for (name, f) in parse_net_dev(&text).unwrap_or_default() {
                self.by_iface
                    .entry((inum, name))
                    .and_modify(|e| {
                        e.1 = f;
                        e.3 = now_ns;
                    })
                    .or_insert((f, f, now_ns, now_ns));
            }
        }
    }

    fn get(&self, netns: u32, name: &str) -> Option<SampledFaults> {
        let (first, last, t0, t1) = self.by_iface.get(&(netns, name.to_owned()))?;
        Some(SampledFaults {
            faults: last.since(first),
            first_sample_ns: *t0,
            last_sample_ns: *t1,
        })
    }
}

/// Pids of the processes in a cgroup and its descendants.
fn cgroup_pids(dir: &Path) -> Vec<u32> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        if let Ok(s) = fs::read_to_string(d.join("cgroup.procs")) {
            out.extend(s.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
        }
        if let Ok(rd) = fs::read_dir(&d) {
            dirs.extend(
                rd.filter_map(|e| e.ok())
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
    }
    out
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
    pub faults: Option<&'a FaultSamples>,
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
                ifindex: Some(k.ifindex),
                loopback: t.dev_type == ARPHRD_LOOPBACK,
                traffic: Traffic {
                    rx_bytes: t.rx_bytes,
                    rx_packets: t.rx_packets,
                    tx_bytes: t.tx_bytes,
                    tx_packets: t.tx_packets,
                },
                faults: None,
                faults_missing: None,
            })
            .collect();
        // Interfaces that carried nothing (a driver that drops a packet refuses it: no
        // transmit) but were sampled: their traffic is a counted zero.
        if let Some(f) = i.faults {
            for (netns, name) in f.by_iface.keys() {
                if !interfaces
                    .iter()
                    .any(|x| x.netns == *netns && &x.name == name)
                {
                    interfaces.push(InterfaceReport {
                        netns: *netns,
                        name: name.clone(),
                        ifindex: None,
                        loopback: name == "lo",
                        traffic: Traffic::default(),
                        faults: None,
                        faults_missing: None,
                    });
                }
            }
        }
        interfaces
            .sort_by(|a, b| (a.netns, a.ifindex, &a.name).cmp(&(b.netns, b.ifindex, &b.name)));
        for x in interfaces.iter_mut() {
            x.faults = i.faults.and_then(|f| f.get(x.netns, &x.name));
            if x.faults.is_none() {
                x.faults_missing = Some(
                    "not sampled: the exec ended before its namespace's interface statistics \
                     were read (every --sample-interval)",
                );
            }
        }
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
            faults: None,
        });
        assert!(r.interfaces[1].faults_missing.is_some());
        assert_eq!(r.namespace, "own");
        assert_eq!(r.interfaces[0].name, "lo");
        assert!(r.interfaces[0].loopback);
        let t = r.interfaces_total.unwrap();
        assert_eq!((t.rx_bytes, t.tx_bytes, t.tx_packets), (300, 500, 2));
        assert_eq!(r.headline(), Some((300, 500)));
    }

    /// /proc/net/dev as Linux 6.18 prints it (a veth with some drops).
    const NET_DEV: &str = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     100       2    0    0    0     0          0         0      100       2    0    0    0     0       0          0
  pte0: 1055952     112    1    2    0     0          0         0  3153780     122    3   50    0     0       0          0
";

    #[test]
    fn net_dev_parses_errors_and_drops() {
        let v = parse_net_dev(NET_DEV).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].0, "pte0");
        assert_eq!(
            v[1].1,
            Faults {
                rx_errors: 1,
                rx_dropped: 2,
                tx_errors: 3,
                tx_dropped: 50
            }
        );
        assert!(parse_net_dev("h1\nh2\n  eth0: 1 2 3\n").is_err());
        assert!(parse_net_dev("h1\nh2\n  eth0 1 2 3\n").is_err());
        assert!(parse_net_dev("h1\nh2\n  eth0: 1 2 x 4 5 6 7 8 9 10 11 12 13 14 15 16\n").is_err());
        assert_eq!(parse_net_dev("").unwrap(), vec![]);
        // Any prefix of a valid file parses or fails cleanly.
        for n in 0..NET_DEV.len() {
            let _ = parse_net_dev(&NET_DEV[..n]);
        }
    }

    #[test]
    fn faults_are_counted_from_the_first_sample() {
        let mut s = FaultSamples::default();
        let f = |d| Faults {
            tx_dropped: d,
            ..Default::default()
        };
        s.by_iface.insert((9, "eth0".into()), (f(40), f(90), 1, 2));
        let got = s.get(9, "eth0").unwrap();
        assert_eq!(got.faults.tx_dropped, 50);
        assert!(s.get(9, "lo").is_none());
    }

    #[test]
    fn own_namespace_without_traffic_has_real_zeros() {
        let r = NetReport::build(NetInput {
            sock: &SockTraffic::default(),
            sockets_status: &Ok(()),
            interfaces_status: &Ok(()),
            namespaces: &[5],
            ifaces: &[],
            faults: None,
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
            faults: None,
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
            faults: None,
        });
        assert!(r.sockets.is_none());
        assert_eq!(r.sockets_missing.as_deref(), Some("cannot attach"));
        let v = serde_json::to_value(&r).unwrap();
        assert!(v.get("sockets").is_none(), "{v}");
        assert_eq!(r.headline(), None);
    }
}
