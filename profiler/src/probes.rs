//! Loading, attaching and reading the kernel programs (the eBPF object is embedded at build
//! time by build.rs).

use std::{
    collections::VecDeque,
    fs::File,
    io::Read as _,
    os::fd::{AsFd as _, AsRawFd as _},
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, anyhow, bail};
use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, HashMap, Map, MapData, PerCpuArray, RingBuf},
    programs::{
        BtfTracePoint, CgroupAttachMode, CgroupSkb, CgroupSkbAttachType, Iter, ProgramError,
    },
};
use profiler_common::*;

use crate::{
    host::kernel_release,
    kernel_layout::KernelLayout,
    sources::{
        self, BLOCK_START, BLOCK_START_FALLBACK, ITERATORS, PERCPU_DISCOVER, SOCK_EGRESS,
        SOCK_INGRESS, SOCKET_PROGRAMS, SOCKET_PROGRAMS_SINCE, Stage, TASK_SNAPSHOT,
    },
};

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/profiler-ebpf"));

/// Which network views work on this host: Err holds why one does not (its figures are then
/// reported as missing, with that reason).
#[derive(Clone, Debug)]
pub struct NetStatus {
    pub sockets: std::result::Result<(), String>,
    pub interfaces: std::result::Result<(), String>,
}

/// Map sizes.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_execs: u32,
    pub max_cgroups: u32,
    pub max_baselines: u32,
}

impl Limits {
    /// Slots of the exec and cgroup tables: twice the most followed at once, so that they are
    /// at most half full (see TABLE_PROBES in profiler-common).
    pub fn exec_slots(&self) -> u32 {
        self.max_execs.saturating_mul(2)
    }

    pub fn cgroup_slots(&self) -> u32 {
        self.max_cgroups.saturating_mul(2)
    }
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

/// The loaded programs and their maps.
pub struct Probes {
    ebpf: Ebpf,
    /// block_io_start, or block_getrq on kernels without it.
    block_start: &'static str,
    cgroups: CgroupTable,
    exec_owners: MappedArray<u64>,
    _exec_owners_map: MapData,
    execs: Array<MapData, ExecStats>,
    /// Ended execs' slots, with when they may be freed (see `free_exec`).
    retired: VecDeque<(Instant, u64)>,
    pub baselines: HashMap<MapData, u32, TaskBaseline>,
    pub events: RingBuf<MapData>,
    drops: PerCpuArray<MapData, u64>,
    percpu_offsets: Array<MapData, u64>,
    percpu_rq: Array<MapData, u64>,
    hz: Array<MapData, u64>,
    jiffy_probe: Array<MapData, u64>,
    bio_origin: HashMap<MapData, u64, Inflight>,
    pub netns: HashMap<MapData, u64, NetnsEntry>,
    pub ifaces: HashMap<MapData, IfaceKey, IfaceTraffic>,
    pub net: NetStatus,
}

/// Figures of one loaded program, from the kernel's BPF statistics.
#[derive(Clone, Debug)]
pub struct ProgramCost {
    pub name: String,
    pub run_count: u64,
    pub run_time: Duration,
}

impl Probes {
    pub fn load(
        layout: &KernelLayout,
        config: Config,
        limits: Limits,
        btf: aya::Btf,
    ) -> Result<Self> {
        let block_start = if config.block_getrq_fallback != 0 {
            BLOCK_START_FALLBACK
        } else {
            BLOCK_START.name
        };
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
        let take = |ebpf: &mut Ebpf, name: &str| {
            ebpf.take_map(name)
                .ok_or_else(|| anyhow!("map {name} missing from the eBPF object"))
        };
        let array = |ebpf: &mut Ebpf, name: &str| match take(ebpf, name)? {
            Map::Array(m) => Ok(m),
            _ => Err(anyhow!("map {name} is not an array")),
        };
        let cgroups = CgroupTable {
            map: array(&mut ebpf, "CGROUPS")?,
            len: limits.cgroup_slots(),
            view: None,
        };
        // The programs refer to the map by its fd, which stays open with it.
        let exec_owners_map = array(&mut ebpf, "EXEC_OWNERS")?;
        let exec_owners = MappedArray::new(&exec_owners_map, limits.exec_slots())?;
        let execs = Array::try_from(take(&mut ebpf, "EXECS")?)?;
        let baselines = HashMap::try_from(take(&mut ebpf, "BASELINES")?)?;
        let events = RingBuf::try_from(take(&mut ebpf, "EVENTS")?)?;
        let drops = PerCpuArray::try_from(take(&mut ebpf, "DROPS")?)?;
        let percpu_offsets = Array::try_from(take(&mut ebpf, "PERCPU_OFFSETS")?)?;
        let percpu_rq = Array::try_from(take(&mut ebpf, "PERCPU_RQ")?)?;
        let hz = Array::try_from(take(&mut ebpf, "HZ")?)?;
        let jiffy_probe = Array::try_from(take(&mut ebpf, "JIFFY_PROBE")?)?;
        let bio_origin = HashMap::try_from(take(&mut ebpf, "BIO_ORIGIN")?)?;
        let netns = HashMap::try_from(take(&mut ebpf, "NETNS")?)?;
        let ifaces = HashMap::try_from(take(&mut ebpf, "IFACES")?)?;
        let mut probes = Self {
            ebpf,
            block_start,
            cgroups,
            exec_owners,
            _exec_owners_map: exec_owners_map,
            execs,
            retired: VecDeque::new(),
            baselines,
            events,
            drops,
            percpu_offsets,
            percpu_rq,
            hz,
            jiffy_probe,
            bio_origin,
            netns,
            ifaces,
            net: NetStatus {
                sockets: Ok(()),
                interfaces: layout.net.clone().map(|_| ()),
            },
        };
        for name in sources::at(Stage::Cgroup)
            .chain(sources::at(Stage::Task))
            .chain([block_start])
        {
            probes.load_tracepoint(name, &btf)?;
        }
        // The network programs are optional: where one cannot load, its figures are flagged.
        if probes.net.interfaces.is_ok() {
            for name in sources::at(Stage::Interfaces) {
                if let Err(e) = probes.load_tracepoint(name, &btf) {
                    probes.net.interfaces = Err(format!("{e:#}"));
                    break;
                }
            }
        }
        for &name in SOCKET_PROGRAMS {
            let r = probes
                .program::<CgroupSkb>(name)
                .and_then(|p| p.load().map_err(|e| load_error(name, e)));
            if let Err(e) = r {
                probes.net.sockets = Err(format!("{e:#}"));
                break;
            }
        }
        // The parsed kernel BTF (tens of MiB) is dropped here: nothing is loaded later.
        for &name in ITERATORS {
            let iter: &mut Iter = probes.program(name)?;
            iter.load("task", &btf).map_err(|e| load_error(name, e))?;
        }
        Ok(probes)
    }

    fn program<'a, T>(&'a mut self, name: &str) -> Result<&'a mut T>
    where
        &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = ProgramError>,
    {
        let p = self
            .ebpf
            .program_mut(name)
            .ok_or_else(|| anyhow!("program {name} missing from the eBPF object"))?;
        Ok(p.try_into()?)
    }

    fn load_tracepoint(&mut self, name: &str, btf: &aya::Btf) -> Result<()> {
        let tp: &mut BtfTracePoint = self.program(name)?;
        tp.load(name, btf).map_err(|e| load_error(name, e))
    }

    fn attach_all(&mut self, names: impl IntoIterator<Item = &'static str>) -> Result<()> {
        for name in names {
            let tp: &mut BtfTracePoint = self.program(name)?;
            tp.attach()
                .map_err(|e| anyhow!("cannot attach to tracepoint {name}: {e}"))?;
        }
        Ok(())
    }

    /// Attach the cgroup lifecycle programs (new cgroups of the subtree get registered).
    pub fn attach_cgroup_programs(&mut self) -> Result<()> {
        self.attach_all(sources::at(Stage::Cgroup))
    }

    /// Attach the task and block-IO programs.
    pub fn attach_task_programs(&mut self) -> Result<()> {
        self.attach_all(sources::at(Stage::Task))?;
        self.attach_all([self.block_start])
    }

    /// Attach the network programs: the socket counters to the attached cgroup (alongside
    /// any other programs there), the interface counters to their tracepoints. A failure
    /// flags the figures of that view; it does not stop the profiler.
    pub fn attach_net_programs(&mut self, cgroup_dir: &File) {
        if self.net.sockets.is_ok() {
            for (name, kind) in [
                (SOCK_INGRESS, CgroupSkbAttachType::Ingress),
                (SOCK_EGRESS, CgroupSkbAttachType::Egress),
            ] {
                // As a BPF link the program runs alongside any others on the cgroup
                // whatever the mode; the kernel refuses links with attach flags, so no
                // AllowMultiple here.
                let r = self.program::<CgroupSkb>(name).and_then(|p| {
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
                    self.net.sockets = Err(format!("{e:#}"));
                    break;
                }
            }
        }
        if self.net.interfaces.is_ok()
            && let Err(e) = self.attach_all(sources::at(Stage::Interfaces))
        {
            self.net.interfaces = Err(format!("{e:#}"));
        }
    }

    /// Every exec's registered namespaces, in one pass over the map.
    pub fn namespaces_by_exec(&self) -> std::collections::HashMap<u64, ExecNet> {
        let mut out: std::collections::HashMap<u64, ExecNet> = Default::default();
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
    pub fn net_by_exec(&self) -> std::collections::HashMap<u64, ExecNet> {
        let mut out = self.namespaces_by_exec();
        for (k, v) in self.ifaces.iter().filter_map(|r| r.ok()) {
            out.entry(k.exec_id).or_default().ifaces.push((k, v));
        }
        out
    }

    /// Remove an ended exec's network entries from the kernel maps.
    pub fn forget_net(&mut self, net: &ExecNet) {
        for (k, _) in &net.namespaces {
            let _ = self.netns.remove(k);
        }
        for (k, _) in &net.ifaces {
            let _ = self.ifaces.remove(k);
        }
    }

    /// Live counters of every task in the subtree (one pass of the task iterator).
    pub fn snapshot(&mut self) -> Result<Vec<TaskRecord>> {
        let iter: &mut Iter = self.program(TASK_SNAPSHOT)?;
        let link_id = iter.attach().context("cannot create the task iterator")?;
        let link = iter.take_link(link_id)?;
        let mut file = link.into_file().context("cannot open the task iterator")?;
        let mut buf = Vec::with_capacity(64 * 1024);
        file.read_to_end(&mut buf)
            .context("cannot read the task iterator")?;
        let size = size_of::<TaskRecord>();
        if buf.len() % size != 0 {
            bail!(
                "task iterator returned {} bytes, not a multiple of {size}",
                buf.len()
            );
        }
        Ok(buf
            .chunks_exact(size)
            // SAFETY: TaskRecord is plain data and each chunk has its size.
            .map(|c| unsafe { std::ptr::read_unaligned(c.as_ptr() as *const TaskRecord) })
            .collect())
    }

    /// Find each CPU's per-cpu offset (one pass of the percpu_discover iterator) and check
    /// them: every CPU's runqueue must sit at the same distance from its offset. Returns the
    /// CPUs found, or why the offsets cannot be trusted (they are then cleared, and the
    /// per-cpu figures at removal are not read).
    pub fn discover_percpu(&mut self, nr_cpus: u32) -> std::result::Result<u32, String> {
        self.run_discover()?;
        // CONFIG_HZ: from the kernel's config, else measured from jiffies over 100 ms.
        let hz = match crate::host::kernel_hz() {
            Some(hz) => hz as u64,
            None => {
                let (j0, t0) = self.jiffy_probe();
                std::thread::sleep(Duration::from_millis(100));
                self.run_discover()?;
                let (j1, t1) = self.jiffy_probe();
                let est = (j1.wrapping_sub(j0)) as f64 / ((t1.wrapping_sub(t0)) as f64 / 1e9);
                [100u64, 250, 300, 1000]
                    .into_iter()
                    .min_by(|a, b| (*a as f64 - est).abs().total_cmp(&(*b as f64 - est).abs()))
                    .filter(|&hz| (hz as f64 - est).abs() <= hz as f64 * 0.15)
                    .ok_or_else(|| format!("cannot tell CONFIG_HZ (measured {est:.0} jiffies/s)"))?
            }
        };
        self.hz.set(0, hz, 0).map_err(|e| e.to_string())?;
        let mut found = Vec::new();
        for cpu in 0..nr_cpus.min(MAX_CPUS) {
            let off = self.percpu_offsets.get(&cpu, 0).unwrap_or(0);
            found.push((cpu, off));
        }
        let rqs = &self.percpu_rq;
        let mut base = None;
        let mut n = 0;
        let mut bad = None;
        for &(cpu, off) in &found {
            let rq = rqs.get(&cpu, 0).unwrap_or(0);
            if rq == 0 {
                continue; // offline or not seen: counted as unknown at removal
            }
            let b = rq.wrapping_sub(off);
            match base {
                None => base = Some(b),
                Some(x) if x != b => {
                    bad = Some(format!(
                        "CPU {cpu}'s runqueue is not where its per-cpu offset says"
                    ))
                }
                _ => {}
            }
            n += 1;
        }
        if let Some(why) =
            bad.or_else(|| (n == 0).then(|| "no CPU's per-cpu area was found".to_owned()))
        {
            for (cpu, _) in found {
                let _ = self.percpu_offsets.set(cpu, 0, 0);
            }
            return Err(why);
        }
        Ok(n)
    }

    /// The slot of `key` in a table with open addressing (CGROUPS, EXEC_OWNERS), if it has
    /// one.
    fn find_slot<T: Copy>(table: &MappedArray<T>, key: u64, probes: u32) -> Option<usize> {
        (0..probes)
            .map(|i| table_probe(key, table.len as u32, i) as usize)
            .find(|&j| table.atomic_u64(j, 0).load(Ordering::Acquire) == key)
    }

    /// Take `key`'s slot as the kernel programs do (`exec_slot`, `insert_entry` in
    /// profiler-ebpf): the first of its probe sequence that it owns or that is free. Returns
    /// (slot, newly taken), or None when the table is full. `placeholder`: the owner while
    /// the slot is being filled (0: none, the slot is usable as soon as it is owned).
    fn take_slot<T: Copy>(
        table: &MappedArray<T>,
        key: u64,
        probes: u32,
        placeholder: u64,
    ) -> Option<(usize, bool)> {
        for i in 0..probes {
            let j = table_probe(key, table.len as u32, i) as usize;
            let owner = table.atomic_u64(j, 0);
            let o = owner.load(Ordering::Acquire);
            if o == key {
                return Some((j, false));
            }
            if o == 0 {
                let claim = if placeholder == 0 { key } else { placeholder };
                match owner.compare_exchange(0, claim, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => return Some((j, true)),
                    Err(now) if now == key => return Some((j, false)),
                    Err(_) => {}
                }
            }
        }
        None
    }

    /// Register a cgroup of the subtree (already registered by the kernel is fine).
    pub fn add_cgroup(&mut self, id: u64, exec_id: u64, depth: u32) -> Result<()> {
        let slot = if exec_id == id {
            Self::take_slot(&self.exec_owners, id, EXEC_PROBES, 0)
                .context("the exec table is full (raise --max-execs)")?
                .0 as u32
        } else {
            self.entry(exec_id).map_or(NO_SLOT, |e| e.slot)
        };
        let cgroups = self.cgroups.view()?;
        let (j, new) = Self::take_slot(cgroups, id, TABLE_PROBES, u64::MAX)
            .context("the cgroup table is full (raise --max-cgroups)")?;
        if new {
            let entry = CgroupEntry {
                exec_id,
                depth,
                slot,
            };
            // SAFETY: the slot is ours (owner is the placeholder) until its owner is set.
            unsafe { cgroups.write_field(j, 8, entry) };
            cgroups.atomic_u64(j, 0).store(id, Ordering::Release);
        }
        Ok(())
    }

    /// A cgroup's entry.
    pub fn entry(&mut self, id: u64) -> Option<CgroupEntry> {
        let cgroups = self.cgroups.view().ok()?;
        let j = Self::find_slot(cgroups, id, TABLE_PROBES)?;
        Some(cgroups.read(j).entry)
    }

    /// Forget a cgroup (its exec has been reported).
    pub fn forget_cgroup(&mut self, id: u64) {
        let cgroups = match self.cgroups.view() {
            Ok(c) => c,
            Err(e) => {
                eprintln!("profiler: warning: cannot free a cgroup's slot: {e:#}");
                return;
            }
        };
        // Only the owner goes: a program may still be reading the entry, and the next to take
        // the slot writes its own before it sets its owner.
        if let Some(j) = Self::find_slot(cgroups, id, TABLE_PROBES) {
            cgroups.atomic_u64(j, 0).store(0, Ordering::Release);
        }
    }

    /// Done with the cgroup table for now (see [`CgroupTable`]).
    pub fn unmap_cgroups(&mut self) {
        self.cgroups.view = None;
    }

    /// An exec's totals so far.
    pub fn exec_stats(&self, exec_id: u64) -> Option<ExecStats> {
        let j = Self::find_slot(&self.exec_owners, exec_id, EXEC_PROBES)?;
        self.execs.get(&(j as u32), 0).ok()
    }

    /// An exec has been reported and its cgroups forgotten: its slot is freed some seconds
    /// later (see EXEC_SLOT_HOLD_S in profiler-common).
    pub fn free_exec(&mut self, exec_id: u64) {
        self.retired.push_back((
            Instant::now() + Duration::from_secs(EXEC_SLOT_HOLD_S),
            exec_id,
        ));
        self.release_retired();
    }

    /// Free the slots whose time has come: zeroed (the next exec starts from zero), then
    /// ownerless.
    pub fn release_retired(&mut self) {
        let now = Instant::now();
        while let Some(&(at, exec_id)) = self.retired.front() {
            if at > now {
                break;
            }
            self.retired.pop_front();
            let Some(j) = Self::find_slot(&self.exec_owners, exec_id, EXEC_PROBES) else {
                continue;
            };
            if let Err(e) = self.execs.set(j as u32, ExecStats::default(), 0) {
                eprintln!("profiler: warning: cannot reset an exec's slot: {e}");
                continue; // the slot stays taken rather than carry old counts
            }
            self.exec_owners
                .atomic_u64(j, 0)
                .store(0, Ordering::Release);
        }
    }

    /// Remove the entries of bios whose request was never seen issued for longer than
    /// `max_age_ns` (kernels before 6.5). A request's slot whose completion never came stays
    /// busy until the block layer reuses that request: the kernel programs count it then.
    pub fn expire_inflight(&mut self, now_ns: u64, max_age_ns: u64) {
        let entries: Vec<(u64, Inflight)> = self.bio_origin.iter().filter_map(|r| r.ok()).collect();
        for (k, v) in &entries {
            if now_ns.saturating_sub(v.start_ns) > max_age_ns {
                let _ = self.bio_origin.remove(k);
            }
        }
    }

    /// One pass of the percpu_discover iterator.
    fn run_discover(&mut self) -> std::result::Result<(), String> {
        let iter: &mut Iter = self.program(PERCPU_DISCOVER).map_err(|e| e.to_string())?;
        let link_id = iter.attach().map_err(|e| e.to_string())?;
        let link = iter.take_link(link_id).map_err(|e| e.to_string())?;
        let mut file = link.into_file().map_err(|e| e.to_string())?;
        let mut sink = Vec::new();
        file.read_to_end(&mut sink).map_err(|e| e.to_string())?;
        Ok(())
    }

    /// (jiffies, ktime ns) as of the last percpu_discover pass.
    fn jiffy_probe(&self) -> (u64, u64) {
        (
            self.jiffy_probe.get(&0, 0).unwrap_or(0),
            self.jiffy_probe.get(&1, 0).unwrap_or(0),
        )
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

fn load_error(name: &str, e: ProgramError) -> anyhow::Error {
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

/// The cgroup table, mapped into the profiler only while it takes or frees slots (at start-up,
/// and in batches when execs end): a mapped BPF array counts whole in the resident set
/// (32,768 slots: 1 MiB).
struct CgroupTable {
    map: MapData,
    len: u32,
    view: Option<MappedArray<CgroupSlot>>,
}

impl CgroupTable {
    fn view(&mut self) -> Result<&MappedArray<CgroupSlot>> {
        if self.view.is_none() {
            self.view = Some(MappedArray::new(&self.map, self.len)?);
        }
        Ok(self.view.as_ref().expect("mapped above"))
    }
}

/// The memory of a BPF array created with BPF_F_MMAPABLE, mapped into the profiler: read and
/// changed in place, as the kernel programs do, without a system call per element. (The
/// mapping keeps the map alive.)
struct MappedArray<T> {
    ptr: *mut T,
    len: usize,
    bytes: usize,
}

// SAFETY: the mapping is plain shared memory; every access goes through volatile reads or
// atomics.
unsafe impl<T> Send for MappedArray<T> {}

impl<T: Copy> MappedArray<T> {
    fn new(map: &MapData, len: u32) -> Result<Self> {
        let len = len as usize;
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let bytes = (len * size_of::<T>()).div_ceil(page) * page;
        let fd = map.fd().as_fd().as_raw_fd();
        // SAFETY: a shared mapping of the map's fd, of the map's size, unmapped on drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            bail!(
                "cannot map a BPF array into memory: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(Self {
            ptr: ptr as *mut T,
            len,
            bytes,
        })
    }

    /// A copy of element `i` (fields may change while it is read; callers check).
    fn read(&self, i: usize) -> T {
        assert!(i < self.len);
        // SAFETY: in bounds of the mapping.
        unsafe { std::ptr::read_volatile(self.ptr.add(i)) }
    }

    /// Write `v` at byte offset `off` of element `i`, with volatile stores.
    ///
    /// # Safety
    /// No kernel program may write those bytes meanwhile.
    unsafe fn write_field<V: Copy>(&self, i: usize, off: usize, v: V) {
        assert!(i < self.len && off + size_of::<V>() <= size_of::<T>());
        // SAFETY: in bounds; the caller rules out concurrent writers.
        unsafe {
            std::ptr::write_volatile(
                (self.ptr as *mut u8).add(i * size_of::<T>() + off) as *mut V,
                v,
            )
        }
    }

    /// The u64 at byte offset `off` of element `i`, for atomic access.
    fn atomic_u64(&self, i: usize, off: usize) -> &AtomicU64 {
        assert!(i < self.len && off + 8 <= size_of::<T>() && off.is_multiple_of(8));
        // SAFETY: in bounds, 8-aligned (the mapping is page-aligned and T's size a multiple of
        // 8 here), and the kernel accesses it only atomically or as a whole u64.
        unsafe {
            AtomicU64::from_ptr((self.ptr as *mut u8).add(i * size_of::<T>() + off) as *mut u64)
        }
    }
}

impl<T> Drop for MappedArray<T> {
    fn drop(&mut self) {
        // SAFETY: the mapping made in new().
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.bytes) };
    }
}
