//! Loading the kernel programs that the sources list, attaching them in stages, and the
//! object-wide maps (the event ring buffer, the drop counters). The eBPF object is embedded
//! at build time by build.rs.

use std::{os::fd::AsRawFd as _, time::Duration};

use anyhow::{Result, anyhow};
use aya::{
    Ebpf, EbpfLoader,
    maps::{MapData, PerCpuArray, RingBuf},
    programs::{BtfTracePoint, Iter, ProgramError},
};
use profiler_common::{Config, DROP_COUNTERS, NetOffsets, TaskRecord};

use crate::{
    host::kernel_release,
    kernel_layout::KernelLayout,
    sources::{
        self, ITERATORS, Stage,
        block::{self, BioOrigins},
        cgroup::{ExecTables, Limits},
        final_figures::PerCpu,
        net::NetMaps,
        task::{self, Baselines},
    },
};

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/profiler-ebpf"));

/// The loaded programs, and each source's maps.
pub struct Probes {
    ebpf: Ebpf,
    /// block_io_start, or block_getrq on kernels without it.
    block_start: &'static str,
    pub tables: ExecTables,
    pub baselines: Baselines,
    pub bio_origins: BioOrigins,
    pub percpu: PerCpu,
    pub net: NetMaps,
    pub events: RingBuf<MapData>,
    drops: PerCpuArray<MapData, u64>,
}

/// Figures of one loaded program, from the kernel's BPF statistics.
#[derive(Clone, Debug)]
pub struct ProgramCost {
    pub name: String,
    pub run_count: u64,
    pub run_time: Duration,
}

/// A map of the object, taken out of it (the programs keep using it).
pub fn take_map(ebpf: &mut Ebpf, name: &str) -> Result<aya::maps::Map> {
    ebpf.take_map(name)
        .ok_or_else(|| anyhow!("map {name} missing from the eBPF object"))
}

/// A program of the object, as its kind.
pub fn program<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut T>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = ProgramError>,
{
    let p = ebpf
        .program_mut(name)
        .ok_or_else(|| anyhow!("program {name} missing from the eBPF object"))?;
    Ok(p.try_into()?)
}

impl Probes {
    pub fn load(
        layout: &KernelLayout,
        config: Config,
        limits: Limits,
        btf: aya::Btf,
    ) -> Result<Self> {
        let block_start = block::start_program(config.block_getrq_fallback != 0);
        // Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK; later ones to the memory
        // cgroup. Raising the limit may be refused (no CAP_SYS_RESOURCE): harmless on 5.11+.
        let rlim = libc::rlimit {
            rlim_cur: libc::RLIM_INFINITY,
            rlim_max: libc::RLIM_INFINITY,
        };
        // SAFETY: plain syscall with a valid struct.
        let _ = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &rlim) };

        let mut ebpf = EbpfLoader::new()
            .btf(Some(&btf))
            .override_global("OFFSETS", &layout.offsets, true)
            .override_global("CONFIG", &config, true)
            .override_global("REQ_PREFLUSH_BIT", &layout.req_preflush_bit, true)
            .override_global("QUEUE_STATS_BIT", &layout.queue_stats_bit, true)
            .override_global("FINAL", &layout.finals, true)
            .override_global(
                "NET",
                layout.net.as_ref().unwrap_or(&NetOffsets::ABSENT),
                true,
            )
            .map_max_entries("EXECS", limits.exec_slots())
            .map_max_entries("EXEC_OWNERS", limits.exec_slots())
            .map_max_entries("CGROUPS", limits.cgroup_slots())
            .map_max_entries("BASELINES", limits.max_baselines)
            .load(OBJECT)
            .map_err(|e| anyhow!("cannot load the profiler's eBPF maps and programs: {e}"))?;
        let events = RingBuf::try_from(take_map(&mut ebpf, "EVENTS")?)?;
        let drops = PerCpuArray::try_from(take_map(&mut ebpf, "DROPS")?)?;
        let mut probes = Self {
            tables: ExecTables::take(&mut ebpf, &limits)?,
            baselines: Baselines::take(&mut ebpf)?,
            bio_origins: BioOrigins::take(&mut ebpf)?,
            percpu: PerCpu::take(&mut ebpf)?,
            net: NetMaps::take(&mut ebpf, layout.net.clone().map(|_| ()))?,
            ebpf,
            block_start,
            events,
            drops,
        };
        for name in sources::at(Stage::Cgroup)
            .chain(sources::at(Stage::Task))
            .chain([block_start])
        {
            probes.load_tracepoint(name, &btf)?;
        }
        // The interface programs are optional: where one cannot load, its figures are flagged.
        if probes.net.status.interfaces.is_ok() {
            for name in sources::at(Stage::Interfaces) {
                if let Err(e) = probes.load_tracepoint(name, &btf) {
                    probes.net.status.interfaces = Err(format!("{e:#}"));
                    break;
                }
            }
        }
        for &name in ITERATORS {
            let iter: &mut Iter = program(&mut probes.ebpf, name)?;
            iter.load("task", &btf).map_err(|e| load_error(name, e))?;
        }
        // The parsed kernel BTF (tens of MiB) is dropped here: nothing is loaded later.
        Ok(probes)
    }

    fn load_tracepoint(&mut self, name: &str, btf: &aya::Btf) -> Result<()> {
        let tp: &mut BtfTracePoint = program(&mut self.ebpf, name)?;
        tp.load(name, btf).map_err(|e| load_error(name, e))
    }

    fn attach_all(&mut self, names: impl IntoIterator<Item = &'static str>) -> Result<()> {
        for name in names {
            let tp: &mut BtfTracePoint = program(&mut self.ebpf, name)?;
            tp.attach()
                .map_err(|e| anyhow!("cannot attach to tracepoint {name}: {e}"))?;
        }
        Ok(())
    }

    /// Attach the cgroup lifecycle programs (new cgroups of the subtree get registered).
    pub fn attach_cgroup_programs(&mut self) -> Result<()> {
        self.attach_all(sources::at(Stage::Cgroup))
    }

    /// Attach the task, scheduler and block-IO programs.
    pub fn attach_task_programs(&mut self) -> Result<()> {
        self.attach_all(sources::at(Stage::Task))?;
        self.attach_all([self.block_start])
    }

    /// Attach the network programs: the socket counters to the attached cgroup, the interface
    /// counters to their tracepoints. A failure flags the figures of that view; it does not
    /// stop the profiler.
    pub fn attach_net_programs(&mut self, cgroup_dir: &std::fs::File) {
        self.net.attach_sockets(&mut self.ebpf, cgroup_dir);
        if self.net.status.interfaces.is_ok()
            && let Err(e) = self.attach_all(sources::at(Stage::Interfaces))
        {
            self.net.status.interfaces = Err(format!("{e:#}"));
        }
    }

    /// Live counters of every task in the subtree (one pass of the task iterator).
    pub fn snapshot(&mut self) -> Result<Vec<TaskRecord>> {
        task::snapshot(&mut self.ebpf)
    }

    /// Find the per-cpu areas the programs read at a cgroup's removal (see [`PerCpu`]).
    pub fn discover_percpu(&mut self, nr_cpus: u32) -> std::result::Result<u32, String> {
        self.percpu.discover(&mut self.ebpf, nr_cpus)
    }

    /// Drop counters summed over CPUs.
    pub fn drops(&self) -> [u64; DROP_COUNTERS as usize] {
        let mut out = [0u64; DROP_COUNTERS as usize];
        for (i, slot) in out.iter_mut().enumerate() {
            if let Ok(v) = self.drops.get(&(i as u32), 0) {
                *slot = v.iter().sum();
            }
        }
        out
    }

    /// Raw fd of the ring buffer, for polling.
    pub fn events_fd(&self) -> i32 {
        self.events.as_raw_fd()
    }

    /// Run counts and times of our programs (meaningful while BPF statistics are enabled).
    pub fn costs(&self) -> Vec<ProgramCost> {
        let mut out = Vec::new();
        for (name, prog) in self.ebpf.programs() {
            if let Ok(info) = prog.info() {
                out.push(ProgramCost {
                    name: name.to_owned(),
                    run_count: info.run_count(),
                    run_time: info.run_time(),
                });
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }
}

/// A program that did not load: its name, the kernel, and the verifier's last lines.
pub fn load_error(name: &str, e: ProgramError) -> anyhow::Error {
    // The verifier log is long; keep its last lines, which say what went wrong.
    let text = format!("{e:#}");
    let msg = match &e {
        ProgramError::LoadError { verifier_log, .. } => {
            let log = verifier_log.to_string();
            let tail: Vec<&str> = log.lines().rev().take(6).collect();
            format!(
                "{}\n  verifier: {}",
                text,
                tail.into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n  verifier: ")
            )
        }
        _ => text,
    };
    anyhow!(
        "cannot load program {name} on kernel {}: {msg}",
        kernel_release()
    )
}
