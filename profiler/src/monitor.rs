//! Ties the pieces together: load and attach the programs on a cgroup subtree, register the
//! execs already there, then turn kernel events and map reads into exec records.

use std::{
    collections::{HashMap, HashSet},
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use profiler_common::*;

use crate::{
    cgroup::{self, Hierarchy},
    cgroup_files::{ExecFiles, FinalNames, Layout as FileLayout},
    ci::{CiContext, CiEnv},
    clock::monotonic_ns,
    execs::{Event, Execs, Followup, Live, ProcEnv, Snapshot, args_summary, cstr},
    host::{check_privileges, enable_delay_accounting, kernel_release, own_netns_inum},
    kernel_layout::{KernelBtf, KernelLayout, aya_btf},
    network::{FaultSamples, NetInput, NetReport},
    probes::{ExecNet, Limits, Probes, ProgramCost},
    record::{ExecReport, Inputs},
    runtime::{Lookup, Resolver},
    sources::{BLOCK_START, BLOCK_START_FALLBACK},
};

/// How long a new exec may go without a first program before its series are exported
/// nameless.
pub const SETTLE: Duration = Duration::from_secs(1);

#[derive(Clone, Debug)]
pub struct Options {
    /// The attached cgroup directory (resolved, on the v2 mount).
    pub cgroup: PathBuf,
    pub exec_depth: u32,
    pub btf: String,
    /// Processes listed per exec report (union of the top N by CPU, IO and stall; 0 = all).
    pub top: usize,
    /// Programs listed per exec (0 = all).
    pub programs: usize,
    /// Ended processes remembered per exec for the breakdown.
    pub keep_procs: usize,
    /// How long to wait for the last tasks of a removed exec to be freed.
    pub grace: Duration,
    pub limits: Limits,
    /// Which environment variables of each exec's first program give its CI step and trace.
    pub ci_env: CiEnv,
    /// Cgroups below the attached one whose children are execs, as the attached cgroup's are
    /// (dockerd's `buildkit/` beside its containers): absolute, existing.
    pub nests: Vec<PathBuf>,
    /// Watch the nests alone, each an exec of its own with its children, not the attached
    /// cgroup (then the v2 root: `attach` with every runtime found).
    pub only_nests: bool,
}

pub struct Monitor {
    probes: Probes,
    pub execs: Execs,
    /// The cgroup files of each exec.
    files: HashMap<u64, ExecFiles>,
    /// Sampled interface faults of the execs that run in namespaces of their own.
    net_faults: HashMap<u64, FaultSamples>,
    file_layout: FileLayout,
    final_names: FinalNames,
    opts: Options,
    /// Rolled-up cgroups that were removed, with when to forget their mapping.
    forget: Vec<(u64, Instant)>,
    layout: KernelLayout,
    drops_seen: [u64; DROP_COUNTERS as usize],
    /// Sweeps so far (the in-flight expiry runs every 12th).
    sweeps: u64,
    /// Degraded figures, repeated in every record.
    notes: Vec<String>,
    /// How this host is measured, said once at start.
    notices: Vec<String>,
    /// Names the execs from their container runtime's metadata.
    resolver: Option<Resolver>,
    /// Execs whose metadata was asked for and has not arrived.
    metadata_pending: HashSet<u64>,
    /// What the environments the kernel sent at an exec's first programs say, by (exec,
    /// tgid), until the record of the program's execve picks the exec's first program; and
    /// whether the block was cut (then /proc is read for the rest), and the read it came in.
    envs: HashMap<(u64, u32), (CiContext, bool, u64)>,
    /// Reads of the ring buffer so far.
    drains: u64,
}

/// Environments kept waiting for their program's execve record.
const MAX_ENVS: usize = 4096;

impl Monitor {
    pub fn start(opts: Options, resolver: Option<Resolver>) -> Result<Self> {
        check_privileges()?;
        crate::clock::unix_offset_ns(); // fixed from now on for this run's records
        let hierarchy = Hierarchy::find()?;
        let kbtf = KernelBtf::open(&opts.btf)?;
        let release = kernel_release();
        let block_getrq_fallback = kbtf.preflight(&release)?;
        let layout = kbtf.layout()?;
        drop(kbtf);
        let controllers = hierarchy.controllers();
        let blkcg =
            controllers.iter().any(|c| c == "io") && controllers.iter().any(|c| c == "memory");
        let attribution = if blkcg {
            "block IO is charged to the cgroup of each bio's blkcg (cgroup writeback: buffered \
             writes go to the exec that dirtied them)"
        } else {
            "block IO is charged to the submitting task's exec (no io+memory controllers in \
             cgroup v2, so no cgroup writeback: buffered writes flushed later by writeback are \
             not charged to any exec)"
        };
        let base_id = cgroup::cgroup_id(&opts.cgroup)?;
        let config = Config {
            base_cgroup_id: base_id,
            exec_depth: opts.exec_depth,
            blkcg_attribution: blkcg as u32,
            block_getrq_fallback: block_getrq_fallback as u32,
            host_netns_inum: own_netns_inum()?,
            exec_slots: opts.limits.exec_slots(),
            cgroup_slots: opts.limits.cgroup_slots(),
        };
        let mut probes = Probes::load(&layout, config, opts.limits, aya_btf(&opts.btf)?)?;
        let mut notes: Vec<String> = layout
            .missing
            .iter()
            .map(|f| format!("kernel {release} lacks {f}: figures that need it are zero"))
            .collect();
        notes.extend(enable_delay_accounting());
        let mut notices = vec![attribution.to_owned()];
        if block_getrq_fallback {
            notices.push(format!(
                "kernel {release} lacks {} (Linux {}+): block requests are tied to their exec \
                 at {BLOCK_START_FALLBACK} and counted from their first issue",
                BLOCK_START.name, BLOCK_START.since
            ));
        }

        match probes.discover_percpu(layout.finals.nr_cpus) {
            Ok(_) => {}
            Err(why) => notices.push(format!(
                "final PSI totals and cpu usage at an exec's removal are not read ({why}): they come from the last sample"
            )),
        }
        probes.attach_cgroup_programs()?;
        let base_path = hierarchy.kernel_path(&opts.cgroup);
        let mut execs = Execs::new(&base_path, opts.keep_procs);
        register_existing(&mut probes, &mut execs, &hierarchy, &opts)?;
        probes.unmap_cgroups();
        let file_layout = FileLayout::discover(&hierarchy.mount);
        let partial_procs = take_baselines(&mut probes, &mut execs)?;
        probes.attach_task_programs()?;
        let cgroup_dir = fs::File::open(&opts.cgroup)
            .with_context(|| format!("cannot open {}", opts.cgroup.display()))?;
        probes.attach_net_programs(&cgroup_dir);
        for (what, status) in [
            ("socket", &probes.net.sockets),
            ("interface", &probes.net.interfaces),
        ] {
            if let Err(why) = status {
                notices.push(format!("no per-exec {what} traffic: {why}"));
            }
        }
        for (exec, tgid) in partial_procs {
            if let Some(e) = execs.get_mut(exec) {
                let (comm, args) = proc_cmdline(tgid);
                e.procs.set_args_if_unknown(tgid, &comm, args);
            }
        }
        let mut mon = Self {
            probes,
            execs,
            files: HashMap::new(),
            net_faults: HashMap::new(),
            file_layout,
            final_names: FinalNames {
                psi_states: layout.psi_states.clone(),
                memcg_events: layout.memcg_events.clone(),
            },
            opts,
            forget: Vec::new(),
            layout,
            drops_seen: [0; DROP_COUNTERS as usize],
            sweeps: 0,
            notes,
            notices,
            resolver,
            metadata_pending: HashSet::new(),
            envs: HashMap::new(),
            drains: 0,
        };
        for id in mon.execs.ids() {
            mon.open_files(id);
            mon.request_metadata(id);
        }
        // Parsing the kernel's BTF (twice: layout, loader) took tens of MiB that are free now;
        // glibc keeps freed heap unless asked to return it.
        // SAFETY: no arguments beyond the pad size; only releases free memory.
        unsafe { libc::malloc_trim(0) };
        Ok(mon)
    }

    /// What to say once at start: how figures are measured here and what is degraded.
    pub fn notices(&self) -> Vec<String> {
        self.notices.iter().chain(&self.notes).cloned().collect()
    }

    pub fn events_fd(&self) -> i32 {
        self.probes.events_fd()
    }

    pub fn costs(&self) -> Vec<ProgramCost> {
        self.probes.costs()
    }

    /// Read every pending ring-buffer record into the model.
    fn drain(&mut self) {
        let mut created = Vec::new();
        let mut first_program = Vec::new();
        while let Some(item) = self.probes.events.next() {
            match ProcEnv::parse(&item) {
                Some(Ok(env)) => {
                    if self.execs.get(env.exec_id).is_some() && self.envs.len() < MAX_ENVS {
                        let ci = self.opts.ci_env.context(env.block);
                        self.envs
                            .insert((env.exec_id, env.tgid), (ci, env.cut, self.drains));
                    }
                    continue;
                }
                Some(Err(e)) => {
                    eprintln!("profiler: warning: bad record from the kernel: {e}");
                    continue;
                }
                None => {}
            }
            match Event::parse(&item) {
                Ok(ev) => {
                    let has_command =
                        |execs: &Execs, id| execs.get(id).map(|e| e.command.is_some());
                    let before = match &ev {
                        Event::ProcExec(x) => has_command(&self.execs, x.exec_id),
                        _ => None,
                    };
                    if let Followup::ForgetCgroup(id) = self.execs.apply(&ev) {
                        self.forget.push((id, Instant::now() + self.opts.grace));
                    }
                    if let Event::Cgroup(c) = &ev
                        && c.kind == EV_EXEC_CREATED
                    {
                        created.push(c.cgroup_id);
                    }
                    // The exec's first program (the runtime's own init does not count).
                    if let Event::ProcExec(x) = &ev
                        && before == Some(false)
                        && has_command(&self.execs, x.exec_id) == Some(true)
                    {
                        first_program.push((x.exec_id, x.tgid, cstr(&x.comm)));
                    }
                }
                Err(e) => eprintln!("profiler: warning: bad record from the kernel: {e}"),
            }
        }
        for id in created {
            self.open_files(id);
            self.request_metadata(id);
        }
        let answers = self
            .resolver
            .as_ref()
            .map(|r| r.answers())
            .unwrap_or_default();
        for (id, lookup) in answers {
            self.metadata_pending.remove(&id);
            if let Some(e) = self.execs.get_mut(id) {
                e.metadata = Some(lookup);
                if e.command.is_some() {
                    self.ask_again(id);
                }
            }
        }
        for (id, tgid, comm) in first_program {
            self.ask_again(id);
            // Its environment says which CI step and trace the exec belongs to: as the kernel
            // sent it when the program started; a block too long for the record is read
            // whole from /proc while the program runs (the kernel wakes the reader at an
            // exec's first execs), else what the record held is used.
            let ci = match self.envs.remove(&(id, tgid)) {
                Some((ci, false, _)) => Some(ci),
                Some((ci, true, _)) => self.opts.ci_env.of_process(tgid, &comm).or(Some(ci)),
                None => self.opts.ci_env.of_process(tgid, &comm),
            };
            if let Some(e) = self.execs.get_mut(id) {
                e.ci = ci.filter(|c| !c.is_empty());
            }
        }
        // The environments of programs that were not an exec's first (a runtime's own init)
        // are not kept past the read after theirs (their execve record may come in that one).
        let drains = self.drains;
        self.envs.retain(|_, (_, _, read)| *read + 1 >= drains);
        self.drains += 1;
    }

    /// Ask the container runtime about an exec (answered on the resolver's thread).
    fn request_metadata(&mut self, id: u64) {
        let Some(r) = &self.resolver else { return };
        let Some(path) = self.execs.get(id).map(|e| e.path.clone()) else {
            return;
        };
        if path == "." {
            return;
        }
        // The whole path: a runtime's layout shows in the parents (buildkit/ID).
        r.request(id, &self.execs.kernel_path(&path));
        self.metadata_pending.insert(id);
        if let Some(e) = self.execs.get_mut(id) {
            e.metadata_asked += 1;
        }
    }

    /// Once more, when the exec's first program has started and the first lookup, made when
    /// its cgroup appeared, found no container or could not read it: runc writes its state only
    /// after it made the cgroup, and before it starts the container's program.
    fn ask_again(&mut self, id: u64) {
        if self.execs.get(id).is_some_and(|e| {
            e.metadata_asked == 1 && !matches!(e.metadata, None | Some(Lookup::Found(_)))
        }) {
            self.request_metadata(id);
        }
    }

    /// Open the cgroup files of a new exec (read at the next sample).
    fn open_files(&mut self, id: u64) {
        let Some(e) = self.execs.get(id) else { return };
        let dir = if e.path == "." {
            self.opts.cgroup.clone()
        } else {
            self.opts.cgroup.join(&e.path)
        };
        self.files
            .insert(id, ExecFiles::open(&self.file_layout, &dir));
    }

    /// Final read of an exec's cgroup files: its tasks are gone, its cgroup not yet removed
    /// (`profiler run` removes it itself).
    pub fn sample_final(&mut self, id: u64) {
        if let Some(f) = self.files.get_mut(&id) {
            f.sample_final(monotonic_ns());
        }
    }

    /// Read the cgroup files of every running exec.
    pub fn sample_files(&mut self) {
        self.drain();
        let now = monotonic_ns();
        for (id, f) in self.files.iter_mut() {
            if self.execs.get(*id).is_some_and(|e| e.removed_ns.is_none()) {
                f.sample(now);
            }
        }
        let mut by_exec = self.probes.namespaces_by_exec();
        for (id, path) in self.execs.running() {
            let Some(net) = by_exec.remove(&id) else {
                continue;
            };
            let dir = if path == "." {
                self.opts.cgroup.clone()
            } else {
                self.opts.cgroup.join(&path)
            };
            self.net_faults
                .entry(id)
                .or_default()
                .sample(&dir, &net.inums(), now);
        }
    }

    /// Execs whose cgroup is gone although no removal record arrived (ring buffer overrun):
    /// mark them removed so they end and are forgotten. One stat per running exec. Also the
    /// rare map upkeep: drop counters, and a minute's stale in-flight entries.
    ///
    /// Map reads from userspace are kept rare on purpose: while a map lookup or update system
    /// call runs on a CPU, the kernel skips the BPF programs triggered on that CPU and counts
    /// no miss (measured on Linux 6.18: two processes looping on lookups cost 0.13% of block
    /// completion runs under load; see docs/figures.md, "Skipped BPF runs").
    pub fn sweep(&mut self) {
        self.drain(); // removal records already queued carry the exact time
        let now = monotonic_ns();
        self.sweeps += 1;
        if self.sweeps == 1 {
            // The first sweep comes as the main loop starts: start-up is over.
            crate::resident::drop_startup_code();
        }
        if self.sweeps.is_multiple_of(12) {
            self.probes.expire_inflight(now, 60_000_000_000);
            // Hand back to the system the heap that ended execs and exports freed (glibc
            // keeps free pages inside its heap otherwise): RSS then follows the live state.
            // SAFETY: no arguments beyond the pad size; only releases free memory.
            unsafe { libc::malloc_trim(0) };
        }
        self.warn_drops();
        for (id, path) in self.execs.running() {
            let dir = if path == "." {
                self.opts.cgroup.clone()
            } else {
                self.opts.cgroup.join(&path)
            };
            if cgroup::cgroup_id(&dir).ok() != Some(id) {
                self.execs.mark_removed(id, now);
            }
        }
    }

    /// Process new events; return the records of execs whose figures are now final.
    pub fn poll(&mut self) -> Vec<ExecReport> {
        self.drain();
        self.probes.release_retired();
        let now = Instant::now();
        let expired: Vec<u64> = self
            .forget
            .iter()
            .filter(|(_, t)| *t <= now)
            .map(|(id, _)| *id)
            .collect();
        self.forget.retain(|(_, t)| *t > now);
        for id in expired {
            self.probes.forget_cgroup(id);
            self.execs.forget_rolled_up(id);
        }
        let mut out = Vec::new();
        let now_ns = monotonic_ns();
        // Read once, when the first exec is ready to end.
        let mut net: Option<HashMap<u64, ExecNet>> = None;
        for (id, removed_ns) in self.execs.removed() {
            let stats = self.probes.exec_stats(id);
            let pending = stats.map(|s| s.pending as i64).unwrap_or(0);
            let waited = Duration::from_nanos(now_ns.saturating_sub(removed_ns));
            if pending > 0 && waited < self.opts.grace {
                continue;
            }
            // Records of the last tasks were emitted before their pending count dropped.
            self.drain();
            // Final cgroup figures taken at removal while tasks were still exiting are taken
            // again by the last one: wait for those (within the grace period).
            let late = self
                .execs
                .get(id)
                .and_then(|e| e.final_figures)
                .is_some_and(|f| f.pending > 0);
            if (late || self.metadata_pending.contains(&id)) && waited < self.opts.grace {
                continue;
            }
            let mut notes = Vec::new();
            if self.metadata_pending.remove(&id) {
                notes.push(format!(
                    "container metadata was not read within {:?} of the exec's end",
                    self.opts.grace
                ));
            }
            if pending > 0 {
                notes.push(format!(
                    "{pending} task(s) had not switched out for the last time within {:?} of \
                     the cgroup's removal (stuck exiting, or a switch the kernel ran no BPF \
                     program for): their figures are missing",
                    self.opts.grace
                ));
            }
            let net = net
                .get_or_insert_with(|| self.probes.net_by_exec())
                .remove(&id)
                .unwrap_or_default();
            out.push(self.finish(id, stats, notes, None, net));
        }
        self.probes.unmap_cgroups();
        out
    }

    fn finish(
        &mut self,
        id: u64,
        stats: Option<ExecStats>,
        mut notes: Vec<String>,
        snap: Option<&Snapshot>,
        net: ExecNet,
    ) -> ExecReport {
        let exec = self.execs.get(id).cloned().expect("finish of a known exec");
        if exec.removed_ns.is_some() && self.metadata_pending.contains(&id) {
            notes.push("container metadata had not arrived when the exec was reported".into());
        }
        let stats = stats.unwrap_or_else(|| {
            notes.push("no kernel figures: the exec table was full (raise --max-execs)".into());
            ExecStats::default()
        });
        notes.extend(self.notes.iter().cloned());
        let live = snap.and_then(|s| {
            Some(Live {
                counters: s.per_exec.get(&id)?,
                procs: s.per_proc.get(&id)?,
                tasks: s.tasks.get(&id).copied().unwrap_or(0),
            })
        });
        if let Some(n) = snap.and_then(|s| s.without_delays.get(&id)) {
            notes.push(format!(
                "IO-wait unknown for {n} running task(s) (no usable delay accounting)"
            ));
        }
        let now = monotonic_ns();
        let cgroup = self.files.get(&id).map(|f| {
            let mut c = f.report(exec.removed_ns.unwrap_or(now), exec.removed_ns.is_none());
            if let Some(ff) = &exec.final_figures {
                c.apply_final(ff, &self.final_names, &mut notes);
                if ff.pending > 0 {
                    notes.push(format!(
                        "cgroup figures were taken at the cgroup's removal while {} task(s) were still exiting: their last moments are missing",
                        ff.pending as i64
                    ));
                }
            } else if exec.removed_ns.is_some() {
                notes.push("no kernel totals were read at the cgroup's removal: cgroup figures are the last samples".into());
            }
            c.crosscheck(stats.disk.read_bytes, stats.disk.write_bytes);
            c
        });
        // An ended exec's namespaces and interface counters leave the kernel maps here.
        if exec.removed_ns.is_some() {
            self.probes.forget_net(&net);
        }
        let network = Some(NetReport::build(NetInput {
            sock: &stats.sock,
            sockets_status: &self.probes.net.sockets,
            interfaces_status: &self.probes.net.interfaces,
            namespaces: &net.inums(),
            ifaces: &net.ifaces,
            faults: self.net_faults.get(&id),
        }));
        let report = ExecReport::build(
            &exec,
            Inputs {
                stats: &stats,
                live,
                now_ns: now,
                top: self.opts.top,
                programs: self.opts.programs,
                notes,
                cgroup,
                network,
            },
        );
        // The split its record gave, for the next record (the record was made from a copy).
        if let Some(e) = self.execs.get(id) {
            e.cpu_split.set(exec.cpu_split.get());
        }
        if exec.removed_ns.is_some()
            && let Some((_, ids)) = self.execs.take(id)
        {
            self.files.remove(&id);
            self.net_faults.remove(&id);
            self.metadata_pending.remove(&id);
            self.probes.free_exec(id);
            for c in ids {
                self.probes.forget_cgroup(c);
            }
        }
        report
    }

    /// Figures so far of the execs that still run.
    pub fn live(&mut self) -> Result<Vec<ExecReport>> {
        let mut out = Vec::new();
        self.live_each(|r| out.push(r))?;
        out.sort_by(|a, b| a.exec.cmp(&b.exec));
        Ok(out)
    }

    /// As [`Self::live`], one record at a time: a caller that keeps only what it derives from
    /// each (the exporters' series) never holds them all (with 1,000 running execs, megabytes).
    pub fn live_each(&mut self, mut f: impl FnMut(ExecReport)) -> Result<()> {
        self.drain();
        let recs = self.probes.snapshot()?;
        for r in recs.iter().filter(|r| r.pid == r.tgid) {
            if let Some(e) = self.execs.get_mut(r.exec_id) {
                e.procs.on_running(r);
            }
        }
        let snap = Snapshot::from_records(&recs);
        let mut net = self.probes.net_by_exec();
        let mut ids: Vec<u64> = self.execs.ids();
        ids.sort();
        for id in ids {
            if self
                .execs
                .get(id)
                .map(|e| e.removed_ns.is_some())
                .unwrap_or(true)
            {
                continue;
            }
            let stats = self.probes.exec_stats(id);
            // The attached cgroup is an exec only of processes placed directly in it.
            let idle = stats
                .map(|s| s.task_exits == 0 && s.disk.read_reqs + s.disk.write_reqs == 0)
                .unwrap_or(true)
                && !snap.tasks.contains_key(&id);
            if idle && self.execs.get(id).is_some_and(|e| e.path == ".") {
                continue;
            }
            let net = net.remove(&id).unwrap_or_default();
            f(self.finish(id, stats, Vec::new(), Some(&snap), net));
        }
        Ok(())
    }

    /// Final records on the way out: ended execs (waiting up to the grace period for their
    /// last tasks) and the figures so far of those still running.
    pub fn shutdown(&mut self) -> Result<Vec<ExecReport>> {
        let deadline = Instant::now() + self.opts.grace;
        let mut out = self.poll();
        while !self.execs.removed().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            out.extend(self.poll());
        }
        // Whatever is still waiting is reported as it stands.
        let mut net = self.probes.net_by_exec();
        for (id, _) in self.execs.removed() {
            let stats = self.probes.exec_stats(id);
            out.push(self.finish(
                id,
                stats,
                vec!["reported at shutdown before its last tasks were freed".into()],
                None,
                net.remove(&id).unwrap_or_default(),
            ));
        }
        out.extend(self.live()?);
        self.warn_drops();
        Ok(out)
    }

    /// Running execs whose names may still change: their runtime's answer is not in, or
    /// their first program has not been seen and they are younger than [`SETTLE`]. Their
    /// series wait (a series whose attributes change is a new series).
    pub fn settling(&self) -> HashSet<u64> {
        let now = monotonic_ns();
        self.execs
            .ids()
            .into_iter()
            .filter(|id| {
                self.metadata_pending.contains(id)
                    || self.execs.get(*id).is_some_and(|e| {
                        e.command.is_none()
                            && now.saturating_sub(e.started_ns) < SETTLE.as_nanos() as u64
                    })
            })
            .collect()
    }

    /// Name an exec's record `name` instead of its path.
    pub fn rename_exec(&mut self, id: u64, name: &str) {
        if let Some(e) = self.execs.get_mut(id) {
            e.report_as = Some(name.to_owned());
        }
    }

    /// Add a note to an exec's record.
    pub fn note(&mut self, id: u64, note: &str) {
        if let Some(e) = self.execs.get_mut(id) {
            e.notes.push(note.to_owned());
        }
    }

    /// Ids of the execs currently known.
    pub fn exec_ids(&self) -> Vec<u64> {
        self.execs.ids()
    }

    /// One warning when a drop counter first moves, then each time it has grown tenfold: a
    /// steady loss must not flood the terminal.
    fn warn_drops(&mut self) {
        let d = self.probes.drops();

        for (i, why) in DropReason::ALL.iter().enumerate() {
            if d[i] > 0 && d[i] >= self.drops_seen[i].saturating_mul(10).max(1) {
                eprintln!("profiler: warning: {} ({} so far)", why.description(), d[i]);
                self.drops_seen[i] = d[i];
            }
        }
    }

    /// Totals of the drop counters (for tests and the exit summary).
    pub fn drops(&self) -> [u64; DROP_COUNTERS as usize] {
        self.probes.drops()
    }

    pub fn layout_missing(&self) -> &[String] {
        &self.layout.missing
    }
}

/// Register the cgroups already in the subtree: execs down to exec depth, deeper ones rolled
/// up. Each cgroup is registered before its children are listed, so that children created
/// meanwhile are caught by the cgroup_mkdir program instead. With `only_nests`, the subtrees
/// of the outermost nests instead, each nest an exec of its own.
fn register_existing(
    probes: &mut Probes,
    execs: &mut Execs,
    h: &Hierarchy,
    opts: &Options,
) -> Result<()> {
    if !opts.only_nests {
        return register_tree(probes, execs, h, opts, &opts.cgroup);
    }
    for top in &opts.nests {
        let inner = opts.nests.iter().any(|n| n != top && top.starts_with(n));
        if !inner {
            register_tree(probes, execs, h, opts, top)?;
        }
    }
    Ok(())
}

/// One watched tree: `base` at depth 0 (an exec), its nests at depth 0 inside it (rolled into
/// `base`'s exec: the cgroups made in them later are execs).
fn register_tree(
    probes: &mut Probes,
    execs: &mut Execs,
    h: &Hierarchy,
    opts: &Options,
    base: &Path,
) -> Result<()> {
    let mut ids: HashMap<PathBuf, u64> = HashMap::new();
    let now = monotonic_ns();
    cgroup::walk(base, &mut |f| {
        ids.insert(f.path.clone(), f.id);
        if f.path != base && opts.nests.contains(&f.path) {
            let root = ids[base];
            probes.add_cgroup(f.id, root, 0)?;
            execs.add_rolled_up(f.id, root);
            return Ok(());
        }
        // Depth counts from the innermost nest the cgroup is in, else from the base.
        let top = opts
            .nests
            .iter()
            .filter(|n| f.path.starts_with(n) && n.starts_with(base))
            .max_by_key(|n| n.components().count())
            .map_or(base, |n| n.as_path());
        let rel = f.path.strip_prefix(top).unwrap_or(Path::new(""));
        let depth = rel.components().count() as u32;
        let exec_id = if depth <= opts.exec_depth {
            f.id
        } else {
            // The ancestor at exec depth.
            let anc: PathBuf = top.join(
                rel.components()
                    .take(opts.exec_depth as usize)
                    .collect::<PathBuf>(),
            );
            *ids.get(&anc)
                .context("ancestor of a cgroup vanished during the walk")?
        };
        probes.add_cgroup(f.id, exec_id, depth)?;
        if exec_id == f.id {
            execs.add_exec(f.id, &h.kernel_path(&f.path), now);
        } else {
            execs.add_rolled_up(f.id, exec_id);
        }
        Ok(())
    })
}

/// Tasks already running in the subtree are counted from now on: record their counters as
/// baselines, and mark their execs partial. Returns (exec, tgid) of their processes.
fn take_baselines(probes: &mut Probes, execs: &mut Execs) -> Result<Vec<(u64, u32)>> {
    let recs = probes.snapshot()?;
    let mut procs = Vec::new();
    for r in &recs {
        let b = TaskBaseline {
            start_time_ns: r.start_time_ns,
            exec_id: r.exec_id,
            counters: r.counters,
        };
        if let Err(e) = probes.baselines.insert(r.pid, b, 0) {
            eprintln!(
                "profiler: warning: cannot record the baseline of task {}: {e}",
                r.pid
            );
        }
        if let Some(e) = execs.get_mut(r.exec_id) {
            e.partial = true;
        }
        if r.flags & TASK_LEADER != 0 {
            procs.push((r.exec_id, r.tgid));
        }
    }
    Ok(procs)
}

/// comm and argv summary of a running process, from /proc.
fn proc_cmdline(tgid: u32) -> (String, String) {
    let comm = fs::read_to_string(format!("/proc/{tgid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_owned();
    let raw = fs::read(format!("/proc/{tgid}/cmdline")).unwrap_or_default();
    (comm, args_summary(&raw, 96))
}
