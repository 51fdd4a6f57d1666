//! The userspace model of execs: which execs exist, their processes, and the record of an
//! exec once its figures are final. Pure logic, fed by kernel events and map reads.

use std::collections::HashMap;

use profiler_common::{
    ARGS_LEN, EV_CGROUP_CREATED, EV_CGROUP_REMOVED, EV_EXEC_CREATED, ExecFinalEvent, TASK_LEADER,
    TASK_NO_DELAYS, TaskCounters, TaskRecord,
};

mod events;
mod procs;

use self::events::{ARGS_SUMMARY_CHARS, is_runtime_init};
pub use self::{
    events::{Event, ProcEnv, args_summary, cstr},
    procs::{Exit, MainProgram, Proc, ProcTable, top_processes},
};
use crate::{
    ci::CiContext,
    runtime::{ContainerInfo, Lookup},
};

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

    /// Kernel path ("/base/x/y") to a path relative to the attached cgroup ("x/y"); an exec
    /// outside it (picked by name, as buildah's steps at the root) keeps its path from the
    /// root ("/buildah-buildah1").
    pub fn relative(&self, kernel_path: &str) -> String {
        let rest = match kernel_path.strip_prefix(&self.base_path) {
            Some(r) if r.is_empty() || r.starts_with('/') || self.base_path.is_empty() => r,
            _ => return kernel_path.to_owned(),
        };
        let rest = rest.trim_start_matches('/');
        if rest.is_empty() {
            ".".into()
        } else {
            rest.into()
        }
    }

    /// Path relative to the attached cgroup back to the kernel's ("x" -> "/base/x"; a path
    /// from the root stays).
    pub fn kernel_path(&self, relative: &str) -> String {
        match relative {
            "." => self.base_path.clone(),
            r if r.starts_with('/') => r.to_owned(),
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

#[cfg(test)]
pub(crate) mod tests {
    use profiler_common::{
        CGROUP_PATH_LEN, COMM_LEN, CgroupEvent, EV_EXEC_FINAL, EV_TASK_END, ExecFinalEvent,
        MEMCG_EVENTS, PSI_STATES,
    };

    use super::*;

    pub(crate) fn task(tgid: u32, pid: u32, cpu: u64, comm: &str) -> TaskRecord {
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
        // Outside the attached cgroup (an exec picked by name): its path from the root.
        assert_eq!(e.relative("/buildah-buildah1"), "/buildah-buildah1");
        assert_eq!(e.relative("/ci/jobless"), "/ci/jobless");
        assert_eq!(e.kernel_path("/buildah-buildah1"), "/buildah-buildah1");
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
}
