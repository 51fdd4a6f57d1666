//! The userspace model of execs: which execs exist, their processes, and the record of an
//! exec once its figures are final. Pure logic, fed by kernel events and map reads.

use std::collections::HashMap;

use anyhow::{Result, bail};
use profiler_common::{
    ARGS_LEN, CgroupEvent, EV_CGROUP_CREATED, EV_CGROUP_REMOVED, EV_EXEC_CREATED, EV_EXEC_FINAL,
    EV_PROC_ENV, EV_PROC_EXEC, EV_TASK_END, ExecFinalEvent, PROC_ENV_HEADER, ProcEnvHeader,
    ProcExecEvent, TASK_LEADER, TASK_NO_DELAYS, TASK_OOM_VICTIM, TASK_PARTIAL, TaskCounters,
    TaskRecord,
};

use crate::{
    ci::CiContext,
    programs::{ProgramTotals, Programs},
    runtime::{ContainerInfo, Lookup},
};

/// A record from the ring buffer.
#[derive(Clone, Debug)]
pub enum Event {
    Cgroup(CgroupEvent),
    TaskEnd(TaskRecord),
    ProcExec(ProcExecEvent),
    ExecFinal(ExecFinalEvent),
}

fn read<T: Copy>(bytes: &[u8]) -> Result<T> {
    if bytes.len() < size_of::<T>() {
        bail!(
            "short record: {} bytes, expected {}",
            bytes.len(),
            size_of::<T>()
        );
    }
    // SAFETY: length checked; T is plain data.
    Ok(unsafe { std::ptr::read_unaligned(bytes.as_ptr() as *const T) })
}

impl Event {
    pub fn parse(bytes: &[u8]) -> Result<Event> {
        let kind: u32 = read(bytes)?;
        Ok(match kind {
            EV_EXEC_CREATED | EV_CGROUP_CREATED | EV_CGROUP_REMOVED => Event::Cgroup(read(bytes)?),
            EV_TASK_END => Event::TaskEnd(read(bytes)?),
            EV_PROC_EXEC => Event::ProcExec(read(bytes)?),
            EV_EXEC_FINAL => Event::ExecFinal(read(bytes)?),
            k => bail!("unknown record kind {k}"),
        })
    }
}

/// An environment record (EV_PROC_ENV): read in place, its block never copied.
pub struct ProcEnv<'a> {
    pub exec_id: u64,
    pub tgid: u32,
    /// NAME=value entries separated by NULs, as much as the kernel sent.
    pub block: &'a [u8],
    /// The block was longer than the record holds.
    pub cut: bool,
}

impl<'a> ProcEnv<'a> {
    /// The record, when `bytes` is one (None for other kinds).
    pub fn parse(bytes: &'a [u8]) -> Option<Result<Self>> {
        if read::<u32>(bytes).ok()? != EV_PROC_ENV {
            return None;
        }
        Some((|| {
            let h: ProcEnvHeader = read(bytes)?;
            let len = h.len as usize;
            let Some(block) = bytes.get(PROC_ENV_HEADER..PROC_ENV_HEADER + len) else {
                bail!("environment record of {len} bytes cut short");
            };
            Ok(Self {
                exec_id: h.exec_id,
                tgid: h.tgid,
                block,
                cut: h.full_len as usize > len,
            })
        })())
    }
}

/// NUL-terminated bytes to a string.
pub fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// argv as the kernel stores it (NUL-separated) to "the first words", at most `max` chars.
pub fn args_summary(raw: &[u8], max: usize) -> String {
    let words: Vec<String> = raw
        .split(|&c| c == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    let mut out = String::new();
    for w in words {
        if !out.is_empty() {
            out.push(' ');
        }
        let room = max.saturating_sub(out.chars().count());
        if w.chars().count() > room {
            out.extend(w.chars().take(room));
            out.push('…');
            break;
        }
        out.push_str(&w);
    }
    out
}

const ARGS_SUMMARY_CHARS: usize = 96;

/// `runc init` re-executing itself inside the container's cgroup (runc's cloned-binary
/// guard, at times after the cgroup join): the runtime's own program, not the exec's first.
fn is_runtime_init(raw: &[u8]) -> bool {
    let mut words = raw.split(|&c| c == 0);
    let argv0 = words.next().unwrap_or_default();
    let base = argv0.rsplit(|&c| c == b'/').next().unwrap_or_default();
    base.ends_with(b"runc") && words.next() == Some(b"init")
}

/// One process of an exec (all its threads).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Proc {
    pub tgid: u32,
    pub comm: String,
    pub args: String,
    /// The program it runs: the name the kernel gave it at its execve (the executable's file
    /// name), else its parent's, else its name when first seen.
    pub program: String,
    pub threads: u32,
    pub counters: TaskCounters,
    pub ended: bool,
    /// How it ended (its leader's record), once it has.
    pub exit: Option<Exit>,
}

/// How a process ended: the wait status its parent got, whether the OOM killer chose it, and
/// its peak resident set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Exit {
    pub status: u32,
    pub oom_killed: bool,
    pub max_rss_pages: u64,
}

/// An exec's main program: the first it ran (a runtime's own init aside).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MainProgram {
    pub tgid: u32,
    /// Its execve (CLOCK_MONOTONIC).
    pub started_ns: u64,
    /// How its process ended, and when (its leader's last switch).
    pub exit: Option<Exit>,
    pub ended_ns: Option<u64>,
}

impl Exit {
    pub fn of(rec: &TaskRecord) -> Self {
        Self {
            status: rec.exit_code,
            oom_killed: rec.flags & TASK_OOM_VICTIM != 0,
            max_rss_pages: rec.max_rss_pages,
        }
    }
}

impl Proc {
    pub fn cpu(&self) -> u64 {
        self.counters.oncpu_ns
    }
    pub fn io(&self) -> u64 {
        self.counters.rchar + self.counters.wchar
    }
    pub fn stall(&self) -> u64 {
        let c = &self.counters;
        c.runq_ns + c.iowait_ns + c.swapin_ns + c.reclaim_ns + c.thrashing_ns
    }
}

/// The processes of one exec, bounded: ended processes beyond `keep` that rank low on CPU,
/// IO and stall are folded into `other`.
#[derive(Clone, Debug, Default)]
pub struct ProcTable {
    live: HashMap<u32, Proc>,
    done: Vec<Proc>,
    pub other_count: u64,
    pub other: TaskCounters,
    keep: usize,
    /// Every ended task's figures by program, whatever was folded away.
    programs: Programs,
}

/// Live processes kept per exec before the excess is folded into `other`.
const MAX_LIVE: usize = 32768;

impl ProcTable {
    pub fn new(keep: usize) -> Self {
        Self {
            keep: keep.max(3),
            ..Default::default()
        }
    }

    fn live_entry(&mut self, tgid: u32) -> &mut Proc {
        if self.live.len() >= MAX_LIVE && !self.live.contains_key(&tgid) {
            // Far more live processes than any report shows: fold an arbitrary one away.
            if let Some(&k) = self.live.keys().next() {
                let p = self.live.remove(&k).unwrap();
                self.other_count += 1;
                self.other.add(&p.counters);
            }
        }
        self.live.entry(tgid).or_insert_with(|| Proc {
            tgid,
            ..Default::default()
        })
    }

    /// A process with no command line of its own (no execve seen) runs its parent's
    /// program: it takes the parent's command line when the parent is known. Not one that was
    /// running before the profiler saw it (a partial record), whose execve may have come first.
    fn inherit_command(&mut self, rec: &TaskRecord) {
        let (tgid, parent_tgid) = (rec.tgid, rec.parent_tgid);
        if parent_tgid == tgid
            || rec.flags & TASK_PARTIAL != 0
            || self.live.get(&tgid).is_some_and(|p| !p.args.is_empty())
        {
            return;
        }
        let Some(parent) = self.live.get(&parent_tgid).filter(|p| !p.args.is_empty()) else {
            return;
        };
        let (comm, args, program) = (
            parent.comm.clone(),
            parent.args.clone(),
            parent.program.clone(),
        );
        let p = self.live_entry(tgid);
        p.args = args;
        if p.comm.is_empty() {
            p.comm = comm;
        }
        if p.program.is_empty() {
            p.program = program;
        }
    }

    /// A running process, from a snapshot record of its leader: known from now on, with its
    /// name, and its parent's command line if it has not called execve.
    pub fn on_running(&mut self, rec: &TaskRecord) {
        if self.done.iter().any(|p| p.tgid == rec.tgid) {
            return;
        }
        self.inherit_command(rec);
        let p = self.live_entry(rec.tgid);
        if p.comm.is_empty() {
            p.comm = cstr(&rec.comm);
        }
        if p.program.is_empty() {
            p.program = p.comm.clone();
        }
    }

    pub fn on_exec(&mut self, tgid: u32, comm: String, args: String) {
        let p = self.live_entry(tgid);
        p.program = comm.clone();
        p.comm = comm;
        p.args = args;
    }

    /// Command line of a process that was already running at attach.
    pub fn set_args_if_unknown(&mut self, tgid: u32, comm: &str, args: String) {
        let p = self.live_entry(tgid);
        if p.args.is_empty() {
            p.args = args;
        }
        if p.comm.is_empty() {
            p.comm = comm.to_owned();
        }
    }

    pub fn on_task_end(&mut self, rec: &TaskRecord) {
        let comm = cstr(&rec.comm);
        if let Some(p) = self.done.iter_mut().find(|p| p.tgid == rec.tgid) {
            // A thread freed after its process's leader.
            p.counters.add(&rec.counters);
            p.threads += 1;
            self.programs.add_task(&p.program, rec);
            return;
        }
        if rec.flags & TASK_LEADER != 0 {
            self.inherit_command(rec);
        }
        let p = self.live_entry(rec.tgid);
        if p.program.is_empty() {
            p.program = comm.clone();
        }
        let program = p.program.clone();
        p.counters.add(&rec.counters);
        p.threads += 1;
        self.programs.add_task(&program, rec);
        let p = self.live_entry(rec.tgid);
        if rec.flags & TASK_LEADER != 0 {
            p.comm = comm; // the final name (after any execve)
            p.ended = true;
            p.exit = Some(Exit::of(rec));
            let p = self.live.remove(&rec.tgid).unwrap();
            self.done.push(p);
            if self.done.len() > 2 * self.keep {
                self.compact();
            }
        } else if p.comm.is_empty() {
            p.comm = comm;
        }
    }

    /// Keep the processes that rank in the top third of `keep` by CPU, IO or stall.
    fn compact(&mut self) {
        let n = (self.keep / 3).max(1);
        let mut keep = vec![false; self.done.len()];
        for metric in [Proc::cpu as fn(&Proc) -> u64, Proc::io, Proc::stall] {
            let mut idx: Vec<usize> = (0..self.done.len()).collect();
            idx.sort_by_key(|&i| std::cmp::Reverse(metric(&self.done[i])));
            for &i in idx.iter().take(n) {
                keep[i] = true;
            }
        }
        let mut kept = Vec::with_capacity(self.keep);
        for (p, k) in std::mem::take(&mut self.done).into_iter().zip(keep) {
            if k {
                kept.push(p);
            } else {
                self.other_count += 1;
                self.other.add(&p.counters);
            }
        }
        self.done = kept;
    }

    /// All processes: ended ones and, with `live` snapshot counters, running ones.
    pub fn processes(&self, live_counters: &ProcCounters) -> Vec<Proc> {
        let mut out = self.done.clone();
        for p in self.live.values() {
            let mut p = p.clone();
            if let Some((c, threads)) = live_counters.get(&p.tgid) {
                p.counters.add(c);
                p.threads += threads;
            }
            out.push(p);
        }
        // Running processes seen only through threads in the snapshot (the leader has exited).
        for (tgid, (c, threads)) in live_counters {
            if !self.live.contains_key(tgid) && !self.done.iter().any(|p| p.tgid == *tgid) {
                out.push(Proc {
                    tgid: *tgid,
                    threads: *threads,
                    counters: *c,
                    ..Default::default()
                });
            }
        }
        out
    }

    /// Every program of the exec with its totals, running processes' `live_counters` added;
    /// most on-CPU first.
    pub fn programs(&self, live_counters: &ProcCounters) -> Vec<(String, ProgramTotals)> {
        let program_of = |tgid: &u32| -> (&str, bool) {
            match self.live.get(tgid) {
                Some(p) => (p.program.as_str(), true),
                // Threads of a process whose leader has ended.
                None => (
                    self.done
                        .iter()
                        .find(|p| p.tgid == *tgid)
                        .map_or("", |p| p.program.as_str()),
                    false,
                ),
            }
        };
        self.programs
            .with_live(live_counters.iter().map(|(tgid, (c, _))| {
                let (program, running) = program_of(tgid);
                (program, c, running)
            }))
    }

    /// Processes that ran in the exec, including those folded into `other`.
    pub fn known(&self) -> usize {
        self.done.len() + self.live.len() + self.other_count as usize
    }
}

/// An exec being watched.
#[derive(Clone, Debug)]
pub struct Exec {
    pub id: u64,
    /// Path relative to the attached cgroup ("." for the attached cgroup itself).
    pub path: String,
    /// Already running when the profiler attached: counted from then.
    pub partial: bool,
    pub started_ns: u64,
    pub removed_ns: Option<u64>,
    pub descendants: Vec<u64>,
    pub procs: ProcTable,
    /// The kernel's totals of the exec's cgroup, read when it was removed.
    pub final_figures: Option<ExecFinalEvent>,
    /// argv of the first program the exec ran (its first execve).
    pub command: Option<String>,
    /// The process that ran that program, and how it ended: the exec's outcome.
    pub main: Option<MainProgram>,
    /// A container runtime's own init ran in the exec (runc init): the time before the main
    /// program is the runtime's setup.
    pub runtime_init: bool,
    /// What the container runtime says about the exec: None until the answer is in.
    pub metadata: Option<Lookup>,
    /// Times its metadata was asked for.
    pub metadata_asked: u8,
    /// The CI step and trace its first program's environment names.
    pub ci: Option<CiContext>,
    /// What its record says besides the figures (e.g. that the command left processes).
    pub notes: Vec<String>,
    /// The name its record gives it instead of its path (`profiler run`: the cgroup's path
    /// on the v2 mount, for the attached cgroup's own exec).
    pub report_as: Option<String>,
    /// The user and system time its last record gave (never less in a later one).
    pub cpu_split: crate::record::CpuSplit,
}

impl Exec {
    /// How its record names it: its path relative to the attached cgroup, unless renamed.
    pub fn report_path(&self) -> &str {
        self.report_as.as_deref().unwrap_or(&self.path)
    }

    pub fn container(&self) -> Option<&ContainerInfo> {
        match &self.metadata {
            Some(Lookup::Found(c)) => Some(c),
            _ => None,
        }
    }
}

/// What the monitor must do after an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Followup {
    None,
    /// A non-exec cgroup of the subtree was removed: forget its mapping later.
    ForgetCgroup(u64),
}

/// All execs of the watched subtree.
pub struct Execs {
    /// Kernel path of the attached cgroup ("/a/b"), to make exec paths relative.
    base_path: String,
    execs: HashMap<u64, Exec>,
    /// Non-exec cgroups -> their exec.
    rolled_up: HashMap<u64, u64>,
    keep_procs: usize,
}

impl Execs {
    pub fn new(base_path: &str, keep_procs: usize) -> Self {
        Self {
            base_path: base_path.trim_end_matches('/').to_owned(),
            execs: HashMap::new(),
            rolled_up: HashMap::new(),
            keep_procs,
        }
    }

    /// Kernel path ("/base/x/y") to a path relative to the attached cgroup ("x/y").
    pub fn relative(&self, kernel_path: &str) -> String {
        let rest = kernel_path
            .strip_prefix(&self.base_path)
            .unwrap_or(kernel_path);
        let rest = rest.trim_start_matches('/');
        if rest.is_empty() {
            ".".into()
        } else {
            rest.into()
        }
    }

    /// Path relative to the attached cgroup back to the kernel's ("x" -> "/base/x").
    pub fn kernel_path(&self, relative: &str) -> String {
        match relative {
            "." => self.base_path.clone(),
            r => format!("{}/{r}", self.base_path),
        }
    }

    /// Register an exec (found by walking, or created).
    pub fn add_exec(&mut self, id: u64, kernel_path: &str, now_ns: u64) {
        let path = self.relative(kernel_path);
        let keep = self.keep_procs;
        self.execs.entry(id).or_insert_with(|| Exec {
            id,
            path,
            partial: false,
            started_ns: now_ns,
            removed_ns: None,
            descendants: Vec::new(),
            procs: ProcTable::new(keep),
            final_figures: None,
            command: None,
            main: None,
            runtime_init: false,
            metadata: None,
            metadata_asked: 0,
            ci: None,
            notes: Vec::new(),
            report_as: None,
            cpu_split: Default::default(),
        });
    }

    /// Register a cgroup below exec depth that rolls up into `exec_id`.
    pub fn add_rolled_up(&mut self, id: u64, exec_id: u64) {
        if id == exec_id {
            return;
        }
        self.rolled_up.insert(id, exec_id);
        if let Some(e) = self.execs.get_mut(&exec_id)
            && !e.descendants.contains(&id)
        {
            e.descendants.push(id);
        }
    }

    pub fn get(&self, id: u64) -> Option<&Exec> {
        self.execs.get(&id)
    }

    pub fn get_mut(&mut self, id: u64) -> Option<&mut Exec> {
        self.execs.get_mut(&id)
    }

    pub fn ids(&self) -> Vec<u64> {
        self.execs.keys().copied().collect()
    }

    pub fn len(&self) -> usize {
        self.execs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.execs.is_empty()
    }

    /// Execs whose cgroup is gone, waiting for their final figures.
    pub fn removed(&self) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = self
            .execs
            .values()
            .filter_map(|e| e.removed_ns.map(|t| (e.id, t)))
            .collect();
        v.sort_by_key(|&(_, t)| t);
        v
    }

    pub fn apply(&mut self, ev: &Event) -> Followup {
        match ev {
            Event::Cgroup(c) => match c.kind {
                EV_EXEC_CREATED => {
                    let path = cstr(&c.path);
                    self.add_exec(c.cgroup_id, &path, c.ts_ns);
                }
                EV_CGROUP_CREATED => self.add_rolled_up(c.cgroup_id, c.exec_id),
                EV_CGROUP_REMOVED => {
                    if c.cgroup_id == c.exec_id {
                        if !self.execs.contains_key(&c.cgroup_id) {
                            // Its creation record was lost (ring buffer full): it still ends.
                            let path = cstr(&c.path);
                            self.add_exec(c.cgroup_id, &path, c.ts_ns);
                            if let Some(e) = self.execs.get_mut(&c.cgroup_id) {
                                e.partial = true;
                            }
                        }
                        if let Some(e) = self.execs.get_mut(&c.cgroup_id) {
                            // Its final figures may already have been taken again by a task
                            // that finished exiting later (records of two CPUs).
                            let end = e.final_figures.map_or(c.ts_ns, |f| f.ts_ns.max(c.ts_ns));
                            e.removed_ns.get_or_insert(end);
                        }
                    } else {
                        return Followup::ForgetCgroup(c.cgroup_id);
                    }
                }
                _ => {}
            },
            Event::TaskEnd(t) => {
                if let Some(e) = self.execs.get_mut(&t.exec_id) {
                    e.procs.on_task_end(t);
                    if let Some(m) = &mut e.main
                        && m.tgid == t.tgid
                        && t.flags & TASK_LEADER != 0
                    {
                        m.exit = Some(Exit::of(t));
                        m.ended_ns = Some(t.read_ns);
                    }
                }
            }
            Event::ProcExec(x) => {
                if let Some(e) = self.execs.get_mut(&x.exec_id) {
                    let n = (x.args_len as usize).min(ARGS_LEN);
                    let init = is_runtime_init(&x.args[..n]);
                    e.runtime_init |= init;
                    if e.command.is_none() && !init {
                        e.command =
                            Some(args_summary(&x.args[..n], ARGS_LEN)).filter(|c| !c.is_empty());
                        e.main = Some(MainProgram {
                            tgid: x.tgid,
                            started_ns: x.ts_ns,
                            exit: None,
                            ended_ns: None,
                        });
                    }
                    e.procs.on_exec(
                        x.tgid,
                        cstr(&x.comm),
                        args_summary(&x.args[..n], ARGS_SUMMARY_CHARS),
                    );
                }
            }
            Event::ExecFinal(f) => {
                if let Some(e) = self.execs.get_mut(&f.cgroup_id) {
                    e.final_figures = Some(*f);
                    // A task still exiting at the cgroup's removal (its cgroup_exit() came
                    // before its last switch) ends the exec when it is done: the exec's wall
                    // holds its tasks' lives (docs/figures.md, "When an exec ends").
                    if let Some(end) = e.removed_ns.as_mut() {
                        *end = (*end).max(f.ts_ns);
                    }
                }
            }
        }
        Followup::None
    }

    /// Mark an exec removed (its cgroup vanished without a removal record).
    pub fn mark_removed(&mut self, id: u64, now_ns: u64) {
        if let Some(e) = self.execs.get_mut(&id) {
            e.removed_ns.get_or_insert(now_ns);
        }
    }

    /// Execs not yet seen removed, with their paths relative to the attached cgroup.
    pub fn running(&self) -> Vec<(u64, String)> {
        self.execs
            .values()
            .filter(|e| e.removed_ns.is_none())
            .map(|e| (e.id, e.path.clone()))
            .collect()
    }

    /// Forget a rolled-up cgroup.
    pub fn forget_rolled_up(&mut self, id: u64) {
        if let Some(exec) = self.rolled_up.remove(&id)
            && let Some(e) = self.execs.get_mut(&exec)
        {
            e.descendants.retain(|&d| d != id);
        }
    }

    /// Remove an exec and return it with its cgroup ids (its own and rolled-up ones).
    pub fn take(&mut self, id: u64) -> Option<(Exec, Vec<u64>)> {
        let e = self.execs.remove(&id)?;
        let mut ids = vec![id];
        for d in &e.descendants {
            self.rolled_up.remove(d);
            ids.push(*d);
        }
        Some((e, ids))
    }
}

/// Live counters per process (tgid -> counters, threads).
pub type ProcCounters = HashMap<u32, (TaskCounters, u32)>;

/// Live figures of one exec: its running tasks' counters, per process, and how many tasks.
pub struct Live<'a> {
    pub counters: &'a TaskCounters,
    pub procs: &'a ProcCounters,
    pub tasks: u64,
}

/// Sum live snapshot records per exec and per process.
#[derive(Default, Debug)]
pub struct Snapshot {
    pub per_exec: HashMap<u64, TaskCounters>,
    pub per_proc: HashMap<u64, ProcCounters>,
    pub tasks: HashMap<u64, u64>,
    pub without_delays: HashMap<u64, u64>,
}

impl Snapshot {
    pub fn from_records(recs: &[TaskRecord]) -> Self {
        let mut s = Snapshot::default();
        for r in recs {
            s.per_exec.entry(r.exec_id).or_default().add(&r.counters);
            let p = s.per_exec_proc(r.exec_id).entry(r.tgid).or_default();
            p.0.add(&r.counters);
            p.1 += 1;
            *s.tasks.entry(r.exec_id).or_default() += 1;
            if r.flags & TASK_NO_DELAYS != 0 {
                *s.without_delays.entry(r.exec_id).or_default() += 1;
            }
        }
        s
    }

    fn per_exec_proc(&mut self, exec: u64) -> &mut ProcCounters {
        self.per_proc.entry(exec).or_default()
    }
}

/// The union of the top `n` processes by CPU, by IO and by stall, ordered by CPU; `n == 0`
/// keeps them all.
pub fn top_processes(procs: &mut [Proc], n: usize) -> Vec<Proc> {
    if n == 0 || procs.len() <= n {
        let mut v = procs.to_vec();
        v.sort_by_key(|p| (std::cmp::Reverse(p.cpu()), p.tgid));
        return v;
    }
    let mut chosen: Vec<u32> = Vec::new();
    for metric in [Proc::cpu as fn(&Proc) -> u64, Proc::io, Proc::stall] {
        procs.sort_by_key(|p| std::cmp::Reverse(metric(p)));
        for p in procs.iter().take(n) {
            if metric(p) > 0 && !chosen.contains(&p.tgid) {
                chosen.push(p.tgid);
            }
        }
    }
    let mut v: Vec<Proc> = procs
        .iter()
        .filter(|p| chosen.contains(&p.tgid))
        .cloned()
        .collect();
    v.sort_by_key(|p| (std::cmp::Reverse(p.cpu()), p.tgid));
    v
}

#[cfg(test)]
mod tests {
    use profiler_common::{CGROUP_PATH_LEN, COMM_LEN, EV_TASK_SNAPSHOT, MEMCG_EVENTS, PSI_STATES};

    use super::*;

    fn task(tgid: u32, pid: u32, cpu: u64, comm: &str) -> TaskRecord {
        let mut c = [0u8; COMM_LEN];
        c[..comm.len()].copy_from_slice(comm.as_bytes());
        TaskRecord {
            kind: EV_TASK_END,
            pid,
            tgid,
            flags: if pid == tgid { TASK_LEADER } else { 0 },
            exec_id: 7,
            start_time_ns: 0,
            parent_tgid: 1,
            exit_code: 0,
            comm: c,
            counters: TaskCounters {
                oncpu_ns: cpu,
                ..Default::default()
            },
            max_rss_pages: 0,
            read_ns: 0,
        }
    }

    #[test]
    fn a_task_that_finishes_exiting_after_the_removal_ends_the_exec() {
        let removal = |ts_ns| {
            Event::Cgroup(CgroupEvent {
                kind: EV_CGROUP_REMOVED,
                depth: 1,
                ts_ns,
                cgroup_id: 7,
                exec_id: 7,
                path: [0; CGROUP_PATH_LEN],
            })
        };
        let last = |ts_ns, pending| {
            Event::ExecFinal(ExecFinalEvent {
                kind: EV_EXEC_FINAL,
                flags: 0,
                cgroup_id: 7,
                psi_ns: [0; PSI_STATES],
                memory_peak_pages: 0,
                memory_events: [0; MEMCG_EVENTS],
                pids_peak: 0,
                cpu_usage_ns: 0,
                pending,
                ts_ns,
            })
        };
        // In ring-buffer order: figures at the removal, the removal, the last task's figures.
        let mut e = Execs::new("/ci", 10);
        e.add_exec(7, "/ci/step", 100);
        e.apply(&last(199, 1));
        e.apply(&removal(200));
        assert_eq!(e.get(7).unwrap().removed_ns, Some(200));
        e.apply(&last(250, 0));
        assert_eq!(e.get(7).unwrap().removed_ns, Some(250));
        // The last task's figures before the removal's record (two CPUs): the later end.
        let mut e = Execs::new("/ci", 10);
        e.add_exec(7, "/ci/step", 100);
        e.apply(&last(250, 0));
        e.apply(&removal(200));
        assert_eq!(e.get(7).unwrap().removed_ns, Some(250));
    }

    #[test]
    fn environment_records_are_read_in_place() {
        let record = |len: u32, full_len: u32, block: &[u8]| {
            let h = ProcEnvHeader {
                kind: EV_PROC_ENV,
                tgid: 42,
                exec_id: 7,
                len,
                full_len,
            };
            // SAFETY: plain data viewed as bytes.
            let mut bytes = unsafe {
                std::slice::from_raw_parts(&h as *const ProcEnvHeader as *const u8, PROC_ENV_HEADER)
            }
            .to_vec();
            bytes.extend_from_slice(block);
            bytes
        };
        let bytes = record(7, 7, b"A=1\0B=2");
        let env = ProcEnv::parse(&bytes).unwrap().unwrap();
        assert_eq!(
            (env.exec_id, env.tgid, env.block, env.cut),
            (7, 42, &b"A=1\0B=2"[..], false)
        );
        let bytes = record(3, 9000, b"A=1");
        assert!(ProcEnv::parse(&bytes).unwrap().unwrap().cut);
        // A length beyond the record, a short header, another kind.
        assert!(ProcEnv::parse(&record(50, 50, b"A=1")).unwrap().is_err());
        assert!(ProcEnv::parse(&EV_PROC_ENV.to_ne_bytes()).unwrap().is_err());
        assert!(ProcEnv::parse(&EV_PROC_EXEC.to_ne_bytes()).is_none());
        assert!(ProcEnv::parse(&[]).is_none());
    }

    #[test]
    fn args_are_summarised() {
        assert_eq!(args_summary(b"cc\0-O2\0-c\0foo.c\0", 96), "cc -O2 -c foo.c");
        assert_eq!(args_summary(b"a\0bbbbbbbbbb\0", 5), "a bbb…");
        assert_eq!(args_summary(b"", 5), "");
    }

    #[test]
    fn the_runtimes_own_init_is_not_the_first_program() {
        assert!(is_runtime_init(b"runc\0init\0"));
        assert!(is_runtime_init(b"/usr/sbin/runc\0init\0"));
        assert!(!is_runtime_init(b"/bin/sh\0-c\0runc init\0"));
        assert!(!is_runtime_init(b"runc\0run\0x\0"));
    }

    #[test]
    fn relative_paths() {
        let e = Execs::new("/ci/job", 10);
        assert_eq!(e.relative("/ci/job"), ".");
        assert_eq!(e.relative("/ci/job/step-1"), "step-1");
        assert_eq!(e.relative("/ci/job/step-1/x"), "step-1/x");
        let root = Execs::new("/", 10);
        assert_eq!(root.relative("/a"), "a");
        assert_eq!(root.relative("/"), ".");
        assert_eq!(e.kernel_path("step-1/x"), "/ci/job/step-1/x");
        assert_eq!(root.kernel_path("a"), "/a");
    }

    #[test]
    fn threads_merge_into_their_process() {
        let mut t = ProcTable::new(10);
        t.on_exec(100, "cc1".into(), "cc1 -O2".into());
        t.on_task_end(&task(100, 101, 5, "cc1"));
        t.on_task_end(&task(100, 100, 7, "cc1"));
        // A thread freed after its leader still joins the process.
        t.on_task_end(&task(100, 102, 1, "cc1"));
        let p = t.processes(&HashMap::new());
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].counters.oncpu_ns, 13);
        assert_eq!(p[0].threads, 3);
        assert_eq!(p[0].args, "cc1 -O2");
        assert!(p[0].ended);
    }

    #[test]
    fn forked_child_inherits_command_until_exec() {
        let mut t = ProcTable::new(10);
        t.on_exec(1, "make".into(), "make -j2".into());
        // Running, seen in a snapshot: the parent's command line and its own name.
        let mut running = task(2, 2, 0, "make");
        running.kind = EV_TASK_SNAPSHOT;
        t.on_running(&running);
        // Ended without a snapshot: the parent's command line too.
        t.on_task_end(&task(3, 3, 1, "make"));
        // A child that called execve keeps its own.
        t.on_exec(4, "cc1".into(), "cc1 -O2".into());
        t.on_task_end(&task(4, 4, 1, "cc1"));
        // One running before the profiler saw it may have called execve unseen.
        let mut partial = task(5, 5, 1, "sh");
        partial.flags |= TASK_PARTIAL;
        t.on_task_end(&partial);
        let p = t.processes(&HashMap::new());
        let args = |tgid| p.iter().find(|p| p.tgid == tgid).unwrap().args.clone();
        assert_eq!(args(2), "make -j2");
        assert_eq!(args(3), "make -j2");
        assert_eq!(args(4), "cc1 -O2");
        assert_eq!(args(5), "");
        assert_eq!(p.iter().find(|p| p.tgid == 2).unwrap().comm, "make");
    }

    #[test]
    fn table_stays_bounded_and_keeps_the_top() {
        let mut t = ProcTable::new(30);
        for i in 1..=10_000u32 {
            t.on_task_end(&task(i, i, i as u64, "x"));
        }
        let p = t.processes(&HashMap::new());
        assert!(p.len() <= 60, "{}", p.len());
        assert!(
            p.iter().any(|p| p.tgid == 10_000),
            "the biggest CPU user is kept"
        );
        let total: u64 = p.iter().map(|p| p.cpu()).sum::<u64>() + t.other.oncpu_ns;
        assert_eq!(total, (1..=10_000u64).sum::<u64>(), "nothing is lost");
        assert_eq!(t.known(), 10_000);
    }

    #[test]
    fn exec_lifecycle_events() {
        let mut execs = Execs::new("/base", 10);
        let mut path = [0u8; CGROUP_PATH_LEN];
        path[..7].copy_from_slice(b"/base/a");
        let ev = |kind, id, exec| {
            Event::Cgroup(CgroupEvent {
                kind,
                depth: 1,
                ts_ns: 1000,
                cgroup_id: id,
                exec_id: exec,
                path,
            })
        };
        execs.apply(&ev(EV_EXEC_CREATED, 5, 5));
        assert_eq!(execs.get(5).unwrap().path, "a");
        execs.apply(&ev(EV_CGROUP_CREATED, 6, 5));
        assert_eq!(
            execs.apply(&ev(EV_CGROUP_REMOVED, 6, 5)),
            Followup::ForgetCgroup(6)
        );
        execs.forget_rolled_up(6);
        execs.apply(&ev(EV_CGROUP_CREATED, 8, 5));
        execs.apply(&ev(EV_CGROUP_REMOVED, 5, 5));
        assert_eq!(execs.removed(), vec![(5, 1000)]);
        let (_, ids) = execs.take(5).unwrap();
        assert_eq!(ids, vec![5, 8]);
        assert!(execs.is_empty());
    }

    #[test]
    fn removal_without_creation_record_still_ends_the_exec() {
        let mut execs = Execs::new("/base", 10);
        let mut path = [0u8; CGROUP_PATH_LEN];
        path[..7].copy_from_slice(b"/base/z");
        execs.apply(&Event::Cgroup(CgroupEvent {
            kind: EV_CGROUP_REMOVED,
            depth: 1,
            ts_ns: 5,
            cgroup_id: 9,
            exec_id: 9,
            path,
        }));
        assert_eq!(execs.removed(), vec![(9, 5)]);
        let e = execs.get(9).unwrap();
        assert_eq!(e.path, "z");
        assert!(e.partial, "its start is unknown");
    }

    #[test]
    fn parse_rejects_short_and_unknown_records() {
        assert!(Event::parse(&[1, 0]).is_err());
        assert!(Event::parse(&99u32.to_ne_bytes()).is_err());
        let rec = task(1, 1, 1, "a");
        // SAFETY: plain data viewed as bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                &rec as *const TaskRecord as *const u8,
                size_of::<TaskRecord>(),
            )
        };
        assert!(matches!(Event::parse(bytes).unwrap(), Event::TaskEnd(_)));
        assert!(Event::parse(&bytes[..20]).is_err());
    }
}
