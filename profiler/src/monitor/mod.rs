//! Ties the pieces together: load and attach the programs on a cgroup subtree, register the
//! execs already there (start.rs), then turn kernel events and map reads into exec records,
//! each when its figures are final (ending.rs).

use std::{
    collections::{HashMap, HashSet},
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::Result;
use profiler_common::{DROP_COUNTERS, DropReason, EV_EXEC_CREATED, ExecStats};

mod ending;
mod start;

use ending::{EndState, Ending, ending, tasks_settled};

use crate::{
    cgroup,
    ci::{CiContext, CiEnv},
    clock::monotonic_ns,
    execs::{Event, Execs, Followup, Live, ProcEnv, Snapshot, cstr},
    kernel_layout::KernelLayout,
    loader::{Probes, ProgramCost},
    record::{ExecRecord, Inputs},
    runtime::{Lookup, Resolver},
    sources::cgroup_files::{ExecFiles, FinalNames, Layout as FileLayout},
    sources::net::{FaultSamples, NetInput, NetReport},
    sources::{cgroup::Limits, net::ExecNet},
};

/// An exec's tasks that have not switched out for the last time, as the kernel counts them.
fn pending(stats: &Option<ExecStats>) -> i64 {
    stats.map(|s| s.pending as i64).unwrap_or(0)
}

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
    /// Execs picked by name among cgroups not otherwise watched (buildah's RUN steps).
    pub named: Vec<NamedExecs>,
}

/// Cgroups made in `parent` whose names begin with `prefix` are execs (their siblings are not
/// watched): buildah puts each RUN step at the cgroup root, `buildah-buildah<N>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedExecs {
    /// Absolute, on the v2 mount.
    pub parent: PathBuf,
    pub prefix: String,
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
    /// Execs to ask about a last time, and when (monotonic ns): see `ask_late`.
    late_asks: Vec<(u64, u64)>,
    /// What the environments the kernel sent at an exec's first programs say, by (exec,
    /// tgid), until the record of the program's execve picks the exec's first program; and
    /// whether the block was cut (then /proc is read for the rest), and the read it came in.
    envs: HashMap<(u64, u32), (CiContext, bool, u64)>,
    /// Reads of the ring buffer so far.
    drains: u64,
}

/// Environments kept waiting for their program's execve record.
const MAX_ENVS: usize = 4096;

/// How long after its second lookup an exec's metadata is looked up a last time.
const LATE_ASK: Duration = Duration::from_millis(50);

impl Monitor {
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
                    log::warn!("bad record from the kernel: {e}");
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
                Err(e) => log::warn!("bad record from the kernel: {e}"),
            }
        }
        for id in created {
            if let Some(e) = self.execs.get(id) {
                log::debug!("exec {id} started: {}", e.path);
            }
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
                self.ask_late(id);
            }
        }
        let now = monotonic_ns();
        let due: Vec<u64> = self
            .late_asks
            .extract_if(.., |(_, at)| *at <= now)
            .map(|(id, _)| id)
            .collect();
        for id in due {
            if self
                .execs
                .get(id)
                .is_some_and(|e| e.removed_ns.is_none() && e.metadata_asked == 2)
            {
                self.request_metadata(id);
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

    /// A last time, `LATE_ASK` after the second answer found nothing while the exec runs on:
    /// `crun run` writes its state as the container's program starts, not before it.
    fn ask_late(&mut self, id: u64) {
        if let Some(e) = self.execs.get(id)
            && e.metadata_asked == 2
            && e.removed_ns.is_none()
            && !matches!(e.metadata, None | Some(Lookup::Found(_)))
            && !self.metadata_pending.contains(&id)
        {
            self.late_asks
                .push((id, monotonic_ns() + LATE_ASK.as_nanos() as u64));
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
        let mut by_exec = self.probes.net.namespaces_by_exec();
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
            self.probes.bio_origins.expire(now, 60_000_000_000);
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
    pub fn poll(&mut self) -> Vec<ExecRecord> {
        self.drain();
        self.probes.tables.release_retired();
        let now = Instant::now();
        let expired: Vec<u64> = self
            .forget
            .iter()
            .filter(|(_, t)| *t <= now)
            .map(|(id, _)| *id)
            .collect();
        self.forget.retain(|(_, t)| *t > now);
        for id in expired {
            self.probes.tables.forget_cgroup(id);
            self.execs.forget_rolled_up(id);
        }
        let now_ns = monotonic_ns();
        let waited = |removed_ns: u64| Duration::from_nanos(now_ns.saturating_sub(removed_ns));
        // Execs whose tasks are all gone (or whose grace period is over), with their totals.
        let settled: Vec<(u64, u64, Option<ExecStats>)> = self
            .execs
            .removed()
            .into_iter()
            .map(|(id, removed_ns)| (id, removed_ns, self.probes.tables.exec_stats(id)))
            .filter(|(_, removed_ns, stats)| {
                tasks_settled(pending(stats), waited(*removed_ns), self.opts.grace)
            })
            .collect();
        let mut out = Vec::new();
        if !settled.is_empty() {
            // Records of the last tasks were emitted before their pending count dropped.
            self.drain();
        }
        // Read once, when the first exec ends (map reads are kept rare: see `sweep`).
        let mut net: Option<HashMap<u64, ExecNet>> = None;
        for (id, removed_ns, stats) in settled {
            let state = EndState {
                pending_tasks: pending(&stats),
                waited: waited(removed_ns),
                late_finals: self
                    .execs
                    .get(id)
                    .and_then(|e| e.final_figures)
                    .is_some_and(|f| f.pending > 0),
                metadata_pending: self.metadata_pending.contains(&id),
            };
            let Ending::Report { notes } = ending(&state, self.opts.grace) else {
                continue;
            };
            log::debug!(
                "exec {id} ends, {:?} after its cgroup's removal: {state:?}",
                state.waited
            );
            self.metadata_pending.remove(&id);
            let net = net
                .get_or_insert_with(|| self.probes.net.by_exec())
                .remove(&id)
                .unwrap_or_default();
            let report = self.record(id, stats, notes, None, &net);
            self.release(id, report.as_ref(), &net);
            out.extend(report);
        }
        self.probes.tables.unmap_cgroups();
        out
    }

    /// The record of an exec, ended or running; nothing is changed (see [`Self::release`]).
    fn record(
        &self,
        id: u64,
        stats: Option<ExecStats>,
        mut notes: Vec<String>,
        snap: Option<&Snapshot>,
        net: &ExecNet,
    ) -> Option<ExecRecord> {
        let exec = self.execs.get(id)?;
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
        let network = Some(NetReport::build(NetInput {
            sock: &stats.sock,
            sockets_status: &self.probes.net.status.sockets,
            interfaces_status: &self.probes.net.status.interfaces,
            namespaces: &net.inums(),
            ifaces: &net.ifaces,
            faults: self.net_faults.get(&id),
        }));
        Some(ExecRecord::build(
            exec,
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
        ))
    }

    /// After an exec's record: keep the user/system split it gave (see `CpuSplit`); an
    /// ended exec leaves the model, and its entries and slots leave the kernel maps.
    fn release(&mut self, id: u64, report: Option<&ExecRecord>, net: &ExecNet) {
        let Some(e) = self.execs.get_mut(id) else {
            return;
        };
        if let Some(r) = report {
            e.cpu_split.keep(&r.cpu);
        }
        if e.removed_ns.is_none() {
            return;
        }
        self.probes.net.forget(net);
        if let Some((_, ids)) = self.execs.take(id) {
            self.files.remove(&id);
            self.net_faults.remove(&id);
            self.metadata_pending.remove(&id);
            self.probes.tables.free_exec(id);
            for c in ids {
                self.probes.tables.forget_cgroup(c);
            }
        }
    }

    /// Figures so far of the execs that still run.
    pub fn live(&mut self) -> Result<Vec<ExecRecord>> {
        let mut out = Vec::new();
        self.live_each(|r| out.push(r))?;
        out.sort_by(|a, b| a.exec.cmp(&b.exec));
        Ok(out)
    }

    /// As [`Self::live`], one record at a time: a caller that keeps only what it derives from
    /// each (the exporters' series) never holds them all (with 1,000 running execs, megabytes).
    pub fn live_each(&mut self, mut f: impl FnMut(ExecRecord)) -> Result<()> {
        self.drain();
        let recs = self.probes.snapshot()?;
        for r in recs.iter().filter(|r| r.pid == r.tgid) {
            if let Some(e) = self.execs.get_mut(r.exec_id) {
                e.procs.on_running(r);
            }
        }
        let snap = Snapshot::from_records(&recs);
        let mut net = self.probes.net.by_exec();
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
            let stats = self.probes.tables.exec_stats(id);
            // The attached cgroup is an exec only of processes placed directly in it.
            let idle = stats
                .map(|s| s.task_exits == 0 && s.disk.read_reqs + s.disk.write_reqs == 0)
                .unwrap_or(true)
                && !snap.tasks.contains_key(&id);
            if idle && self.execs.get(id).is_some_and(|e| e.path == ".") {
                continue;
            }
            let net = net.remove(&id).unwrap_or_default();
            let report = self.record(id, stats, Vec::new(), Some(&snap), &net);
            self.release(id, report.as_ref(), &net);
            report.into_iter().for_each(&mut f);
        }
        Ok(())
    }

    /// Final records on the way out: ended execs (waiting up to the grace period for their
    /// last tasks) and the figures so far of those still running.
    pub fn shutdown(&mut self) -> Result<Vec<ExecRecord>> {
        let deadline = Instant::now() + self.opts.grace;
        let mut out = self.poll();
        while !self.execs.removed().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            out.extend(self.poll());
        }
        // Whatever is still waiting is reported as it stands.
        let mut net = self.probes.net.by_exec();
        for (id, _) in self.execs.removed() {
            let stats = self.probes.tables.exec_stats(id);
            let net = net.remove(&id).unwrap_or_default();
            let notes = vec!["reported at shutdown before its last tasks were freed".into()];
            let report = self.record(id, stats, notes, None, &net);
            self.release(id, report.as_ref(), &net);
            out.extend(report);
        }
        out.extend(self.live()?);
        self.warn_drops();
        Ok(out)
    }

    /// Running execs whose names may still change: their runtime's answer is not in (or a
    /// last lookup is due), or their first program has not been seen and they are younger
    /// than [`SETTLE`]. Their series wait (a series whose attributes change is a new series).
    pub fn settling(&self) -> HashSet<u64> {
        let now = monotonic_ns();
        self.execs
            .ids()
            .into_iter()
            .filter(|id| {
                self.metadata_pending.contains(id)
                    || self.late_asks.iter().any(|(late, _)| late == id)
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
                log::warn!("{} ({} so far)", why.description(), d[i]);
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
