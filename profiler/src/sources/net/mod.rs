//! Network (profiler-ebpf net.rs): each exec's sockets, counted by their cgroup (cgroup_skb
//! programs on the attached cgroup), and the interfaces of its own network namespaces
//! (net_dev_xmit, netif_receive_skb); both optional, flagged where they cannot load. What the
//! maps hold becomes the record's figures in report.rs.

mod report;

use std::{collections::HashMap as StdHashMap, fs::File};

use anyhow::{Result, anyhow};
use aya::{
    Ebpf,
    maps::{HashMap, MapData},
    programs::{CgroupAttachMode, CgroupSkb, CgroupSkbAttachType},
};
use profiler_common::{IfaceKey, IfaceTraffic, NetOffsets, NetnsEntry};

pub use self::report::{
    FaultSamples, Faults, InterfaceReport, NetInput, NetReport, SampledFaults, SocketsReport,
    Traffic, parse_net_dev,
};
use super::{Program, Stage, p};
use crate::{
    kernel_layout::KernelBtf,
    loader::{load_error, program, take_map},
};

/// The interface counters of the execs' own namespaces.
pub const INTERFACE_PROGRAMS: &[Program] = &[
    p("net_dev_xmit", "2.6.32", Stage::Interfaces),
    p("netif_receive_skb", "2.6.32", Stage::Interfaces),
];

/// The socket counters (cgroup_skb programs on the attached cgroup, as BPF links).
pub const SOCK_INGRESS: &str = "sock_ingress";
pub const SOCK_EGRESS: &str = "sock_egress";
pub const SOCKET_PROGRAMS: &[&str] = &[SOCK_INGRESS, SOCK_EGRESS];
/// BPF links on cgroups, which let the socket counters run beside other programs.
pub const SOCKET_PROGRAMS_SINCE: &str = "5.7";

/// Which network views work on this host: Err holds why one does not (its figures are then
/// reported as missing, with that reason).
#[derive(Clone, Debug)]
pub struct NetStatus {
    pub sockets: Result<(), String>,
    pub interfaces: Result<(), String>,
}

/// An exec's entries in the network maps.
#[derive(Default)]
pub struct ExecNet {
    /// (kernel address of the `struct net`, namespace inode number)
    pub namespaces: Vec<(u64, u32)>,
    pub ifaces: Vec<(IfaceKey, IfaceTraffic)>,
}

impl ExecNet {
    pub fn inums(&self) -> Vec<u32> {
        self.namespaces.iter().map(|(_, inum)| *inum).collect()
    }
}

/// The namespaces the execs ran programs in, and their interfaces' counters.
pub struct NetMaps {
    netns: HashMap<MapData, u64, NetnsEntry>,
    ifaces: HashMap<MapData, IfaceKey, IfaceTraffic>,
    pub status: NetStatus,
}

impl NetMaps {
    /// The maps, and the socket programs loaded (the interface programs load with the
    /// tracepoints). `interfaces`: whether this kernel's layout has what they read.
    pub fn take(ebpf: &mut Ebpf, interfaces: Result<(), String>) -> Result<Self> {
        let netns = HashMap::try_from(take_map(ebpf, "NETNS")?)?;
        let ifaces = HashMap::try_from(take_map(ebpf, "IFACES")?)?;
        let mut status = NetStatus {
            sockets: Ok(()),
            interfaces,
        };
        for &name in SOCKET_PROGRAMS {
            let r = program::<CgroupSkb>(ebpf, name)
                .and_then(|p| p.load().map_err(|e| load_error(name, e)));
            if let Err(e) = r {
                status.sockets = Err(format!("{e:#}"));
                break;
            }
        }
        Ok(Self {
            netns,
            ifaces,
            status,
        })
    }

    /// Attach the socket counters to the attached cgroup, alongside any other programs there.
    /// A failure flags the socket figures; it does not stop the profiler.
    pub fn attach_sockets(&mut self, ebpf: &mut Ebpf, cgroup_dir: &File) {
        if self.status.sockets.is_err() {
            return;
        }
        for (name, kind) in [
            (SOCK_INGRESS, CgroupSkbAttachType::Ingress),
            (SOCK_EGRESS, CgroupSkbAttachType::Egress),
        ] {
            // As a BPF link the program runs alongside any others on the cgroup whatever the
            // mode; the kernel refuses links with attach flags, so no AllowMultiple here.
            let r = program::<CgroupSkb>(ebpf, name).and_then(|p| {
                p.attach(cgroup_dir, kind, CgroupAttachMode::Single)
                    .map_err(|e| {
                        let cause = std::error::Error::source(&e)
                            .map(|c| format!(": {c}"))
                            .unwrap_or_default();
                        anyhow!(
                            "cannot attach {name} to the cgroup as a BPF link (Linux \
                             {SOCKET_PROGRAMS_SINCE}+): {e}{cause}"
                        )
                    })
            });
            if let Err(e) = r {
                self.status.sockets = Err(format!("{e:#}"));
                break;
            }
        }
    }

    /// Every exec's registered namespaces, in one pass over the map.
    pub fn namespaces_by_exec(&self) -> StdHashMap<u64, ExecNet> {
        let mut out: StdHashMap<u64, ExecNet> = Default::default();
        for (net, v) in self.netns.iter().filter_map(|r| r.ok()) {
            out.entry(v.exec_id)
                .or_default()
                .namespaces
                .push((net, v.inum));
        }
        out
    }

    /// Every exec's namespaces and interface counters so far: one pass over each map, however
    /// many execs a refresh reports.
    pub fn by_exec(&self) -> StdHashMap<u64, ExecNet> {
        let mut out = self.namespaces_by_exec();
        for (k, v) in self.ifaces.iter().filter_map(|r| r.ok()) {
            out.entry(k.exec_id).or_default().ifaces.push((k, v));
        }
        out
    }

    /// Remove an ended exec's network entries from the kernel maps.
    pub fn forget(&mut self, net: &ExecNet) {
        for (k, _) in &net.namespaces {
            let _ = self.netns.remove(k);
        }
        for (k, _) in &net.ifaces {
            let _ = self.ifaces.remove(k);
        }
    }
}

impl KernelBtf {
    /// Offsets for the network namespace and interface programs: all or nothing.
    pub(crate) fn net_offsets(&self) -> Result<NetOffsets, String> {
        let mut n = NetOffsets::ABSENT;
        for f in NetOffsets::FIELDS {
            match (self.field(f.ty, f.path), n.slot_mut(f.slot)) {
                (Some((off, sz)), Some(slot)) if sz == f.size => *slot = off,
                _ => {
                    return Err(format!(
                        "kernel struct field {}.{} not found in BTF",
                        f.ty, f.path
                    ));
                }
            }
        }
        Ok(n)
    }
}
