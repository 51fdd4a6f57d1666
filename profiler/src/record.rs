//! The per-exec record: pure data, made in one place ([`ExecRecord::build`]) from an exec
//! and its inputs. How it is shown (a line, the detailed report, the live table, JSON) is in
//! the `render` module.

use std::collections::HashMap;

use profiler_common::{DiskStats, ExecStats, LAT_BUCKETS, TaskCounters, lat_bucket_floor_ns};
use serde::{Deserialize, Serialize};

use crate::{
    ci::CiContext,
    clock::monotonic_to_unix_ns,
    execs::{Exec, Exit, Live, Proc, top_processes},
    programs::ProgramTotals,
    runtime::{ContainerInfo, Lookup},
    sources::{cgroup_files::CgroupReport, net::NetReport},
};

/// Whether an exec's figures are final.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ExecState {
    /// The exec ended: its figures are final.
    Ended,
    /// It still runs: its figures so far.
    #[default]
    Running,
}

impl ExecState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ended => "ended",
            Self::Running => "running",
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ExecRecord {
    /// The record's format: [`RECORD_SCHEMA`], raised when a field changes meaning or goes
    /// (added fields keep it).
    pub schema: u32,
    /// The host the exec ran on: `host.name` of OTEL_RESOURCE_ATTRIBUTES, else the hostname.
    pub host: String,
    /// Path of the exec's cgroup relative to the attached cgroup ("." for the cgroup itself).
    pub exec: String,
    pub cgroup_id: u64,
    /// What stays the same when the same step runs again (see `step.rs`).
    pub step: String,
    /// What the container runtime says about the exec (id, name, image, command, Kubernetes
    /// pod), when its cgroup is a container's or a BuildKit step's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerInfo>,
    /// argv of the first program the exec ran (its first execve), when one was seen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// How that program's process ended: the exec's outcome (absent while it runs, and when
    /// no program was seen starting).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit: Option<ExecExit>,
    /// The exec's wall time split at its main program's start and end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phases: Option<Phases>,
    /// The CI step and trace the exec belongs to, from its first program's environment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ci: Option<CiContext>,
    pub state: ExecState,
    /// Already running when the profiler attached (figures count from then).
    pub partial: bool,
    pub wall_ns: u64,
    /// The exec's start (cgroup creation, or attach) and end (cgroup removal; for a running
    /// exec the time of the record), in ns since the Unix epoch.
    pub start_unix_ns: u64,
    pub end_unix_ns: u64,
    /// Tasks still running (0 once ended).
    pub live_tasks: u64,
    pub cpu: CpuReport,
    pub disk: DiskReport,
    pub io: IoReport,
    pub tasks: TasksReport,
    pub processes: Vec<ProcReport>,
    /// Processes not listed (folded away to bound memory), and their summed figures.
    pub other_processes: OtherReport,
    /// The exec's figures by program, most on-CPU first (see `--programs`): every process
    /// under the program it ran, so that they sum to the exec's.
    pub programs: Vec<ProgramReport>,
    /// The programs not listed, summed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_programs: Option<ProgramReport>,
    /// The kernel's own accounting from the exec's cgroup files, each figure with its source.
    pub cgroup: Option<CgroupReport>,
    /// Traffic of the exec's sockets and of its own network namespace's interfaces.
    pub network: Option<NetReport>,
    pub notes: Vec<String>,
}

/// The format of the records written now (`report` reads older ones, and warns of newer).
pub const RECORD_SCHEMA: u32 = 1;

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct CpuReport {
    pub on_cpu_ns: u64,
    /// on_cpu_ns split into user and system time by the tasks' tick-sampled utime:stime ratio.
    pub user_ns: u64,
    pub system_ns: u64,
    pub runq_delay_ns: u64,
    pub runq_waits: u64,
    pub iowait_ns: u64,
    pub iowait_waits: u64,
    pub swapin_ns: u64,
    pub reclaim_ns: u64,
    pub thrashing_ns: u64,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    /// Sum over the exec's tasks of their lifetimes in the exec (fork or move-in to exit, or
    /// to now): on-CPU, run-queue and IO-wait are disjoint parts of it.
    pub task_time_ns: u64,
}

impl From<&TaskCounters> for CpuReport {
    fn from(c: &TaskCounters) -> Self {
        let (user_ns, system_ns) = split_user_system(c.oncpu_ns, c.utime_ns, c.stime_ns);
        Self {
            on_cpu_ns: c.oncpu_ns,
            user_ns,
            system_ns,
            runq_delay_ns: c.runq_ns,
            runq_waits: c.runq_count,
            iowait_ns: c.iowait_ns,
            iowait_waits: c.iowait_count,
            swapin_ns: c.swapin_ns,
            reclaim_ns: c.reclaim_ns,
            thrashing_ns: c.thrashing_ns,
            voluntary_switches: c.nvcsw,
            involuntary_switches: c.nivcsw,
            task_time_ns: c.life_ns,
        }
    }
}

/// Split exact on-CPU time by the ratio of tick-sampled user and system time, as the
/// kernel's cputime_adjust() does: all of it to one side when the other has no tick.
fn split_user_system(on_cpu: u64, utime: u64, stime: u64) -> (u64, u64) {
    if stime == 0 {
        return (on_cpu, 0);
    }
    if utime == 0 {
        return (0, on_cpu);
    }
    let system = (stime as u128 * on_cpu as u128 / (utime as u128 + stime as u128)) as u64;
    (on_cpu - system, system)
}

/// The user and system time an exec's last record gave: a later record never gives less of
/// either, as the kernel's cputime_adjust() keeps them for cpu.stat (the tick ratio that splits
/// on-CPU time moves as the exec runs, and an exported counter that went down would read as a
/// reset).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuSplit {
    user_ns: u64,
    system_ns: u64,
}

impl CpuSplit {
    /// `c` with neither side below this split, both still summing to its on-CPU time (when
    /// they cannot, as given).
    fn apply(self, mut c: CpuReport) -> CpuReport {
        if c.on_cpu_ns < self.user_ns + self.system_ns {
            return c;
        }
        if c.system_ns < self.system_ns {
            c.system_ns = self.system_ns;
            c.user_ns = c.on_cpu_ns - self.system_ns;
        } else if c.user_ns < self.user_ns {
            c.user_ns = self.user_ns;
            c.system_ns = c.on_cpu_ns - self.user_ns;
        }
        c
    }

    /// After a record: the split it gave, unless it could not keep this one.
    pub fn keep(&mut self, c: &CpuReport) {
        if c.on_cpu_ns >= self.user_ns + self.system_ns {
            *self = Self {
                user_ns: c.user_ns,
                system_ns: c.system_ns,
            };
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Histogram {
    /// Lower bound of each bucket in nanoseconds; the last bucket is open-ended.
    pub bounds_ns: Vec<u64>,
    pub counts: Vec<u64>,
    pub sum_ns: u64,
}

impl Histogram {
    fn new(counts: &[u64; LAT_BUCKETS], sum_ns: u64) -> Self {
        // Trim empty buckets at the top to keep the output short.
        let last = counts
            .iter()
            .rposition(|&c| c > 0)
            .map(|i| i + 1)
            .unwrap_or(0);
        Self {
            bounds_ns: (0..last).map(lat_bucket_floor_ns).collect(),
            counts: counts[..last].to_vec(),
            sum_ns,
        }
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Upper bound of the bucket holding quantile q (0..1), in ns.
    pub fn quantile_upper_ns(&self, q: f64) -> Option<u64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let want = (q * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return Some(lat_bucket_floor_ns(i + 1));
            }
        }
        None
    }
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct DiskReport {
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub read_requests: u64,
    pub write_requests: u64,
    pub discard_bytes: u64,
    pub discard_requests: u64,
    pub flush_requests: u64,
    pub read_latency: Histogram,
    pub write_latency: Histogram,
}

impl From<&DiskStats> for DiskReport {
    fn from(d: &DiskStats) -> Self {
        Self {
            read_bytes: d.read_bytes,
            write_bytes: d.write_bytes,
            read_requests: d.read_reqs,
            write_requests: d.write_reqs,
            discard_bytes: d.discard_bytes,
            discard_requests: d.discard_reqs,
            flush_requests: d.flush_reqs,
            read_latency: Histogram::new(&d.read_lat, d.read_lat_sum_ns),
            write_latency: Histogram::new(&d.write_lat, d.write_lat_sum_ns),
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct IoReport {
    /// Bytes returned by read-type syscalls (page-cache hits included).
    pub read_bytes: u64,
    /// Bytes passed to write-type syscalls.
    pub write_bytes: u64,
    pub read_calls: u64,
    pub write_calls: u64,
    /// Bytes the exec's tasks caused to be read from storage.
    pub storage_read_bytes: u64,
    /// Bytes of page cache the exec's tasks dirtied (written to storage now or later).
    pub dirtied_bytes: u64,
    pub cancelled_write_bytes: u64,
}

impl From<&TaskCounters> for IoReport {
    fn from(c: &TaskCounters) -> Self {
        Self {
            read_bytes: c.rchar,
            write_bytes: c.wchar,
            read_calls: c.syscr,
            write_calls: c.syscw,
            storage_read_bytes: c.storage_read_bytes,
            dirtied_bytes: c.dirtied_bytes,
            cancelled_write_bytes: c.cancelled_write_bytes,
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct TasksReport {
    pub processes_started: u64,
    pub threads_started: u64,
    pub execve: u64,
    pub task_exits: u64,
    pub process_exits: u64,
}

/// How a process ended, as its parent's wait saw it (docs/figures.md, "Exit status").
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExitReport {
    /// The code it passed to exit(); absent when a signal ended it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<u8>,
    /// The signal that ended it ("SIGKILL"); absent when it called exit().
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub core_dumped: bool,
    /// Chosen by the OOM killer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub oom_killed: bool,
}

impl ExitReport {
    pub fn from_status(status: u32, oom_killed: bool) -> Self {
        let sig = (status & 0x7f) as i32;
        let signal = (sig != 0).then(|| {
            nix::sys::signal::Signal::try_from(sig)
                .map(|s| s.as_str().to_owned())
                .unwrap_or_else(|_| format!("signal {sig}"))
        });
        Self {
            code: (sig == 0).then_some((status >> 8) as u8),
            signal,
            core_dumped: sig != 0 && status & 0x80 != 0,
            oom_killed,
        }
    }

    /// Whether it ended well: exit(0).
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// "exit 3", "SIGKILL (OOM kill)", "SIGSEGV (core dumped)".
    pub fn summary(&self) -> String {
        let mut s = match (&self.signal, self.code) {
            (Some(sig), _) => sig.clone(),
            (None, Some(c)) => format!("exit {c}"),
            (None, None) => "unknown".into(),
        };
        if self.core_dumped {
            s.push_str(" (core dumped)");
        }
        if self.oom_killed {
            s.push_str(" (OOM kill)");
        }
        s
    }
}

impl From<&Exit> for ExitReport {
    fn from(e: &Exit) -> Self {
        Self::from_status(e.status, e.oom_killed)
    }
}

/// An exec's wall time in phases (docs/figures.md, "Phases"): the container runtime's setup
/// up to the main program's execve, the program's run to its process's end, and the teardown
/// to the exec's end. For a container they sum to the wall time.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Phases {
    /// Absent for an exec no container runtime set up (its start is the program's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup_ns: Option<u64>,
    /// Up to the record for a program still running.
    pub run_ns: u64,
    /// Absent until the main program has ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub teardown_ns: Option<u64>,
}

impl Phases {
    /// None when the exec's main program was not seen starting.
    fn of(exec: &Exec, end_ns: u64) -> Option<Self> {
        // No start stamp: a main program that was not among the exec's first execve calls
        // (EARLY_PROGRAMS in profiler-common).
        let m = exec.main.filter(|m| m.started_ns != 0)?;
        let start = m.started_ns.clamp(exec.started_ns, end_ns);
        let ended = m.ended_ns.map(|t| t.clamp(start, end_ns));
        Some(Self {
            setup_ns: (exec.runtime_init || exec.container().is_some())
                .then(|| start - exec.started_ns),
            run_ns: ended.unwrap_or(end_ns) - start,
            teardown_ns: ended.map(|t| end_ns - t),
        })
    }
}

/// The exec's outcome: how its main program's process ended.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExecExit {
    pub pid: u32,
    #[serde(flatten)]
    pub status: ExitReport,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ProcReport {
    pub pid: u32,
    pub comm: String,
    pub args: String,
    pub threads: u32,
    pub ended: bool,
    /// How it ended (absent while it runs, and for a process whose leader's end was not seen).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit: Option<ExitReport>,
    /// Its peak resident set (getrusage's ru_maxrss), known when it has ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_rss_bytes: Option<u64>,
    pub on_cpu_ns: u64,
    pub runq_delay_ns: u64,
    pub iowait_ns: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub storage_read_bytes: u64,
    pub dirtied_bytes: u64,
}

impl From<Proc> for ProcReport {
    fn from(p: Proc) -> Self {
        let c = &p.counters;
        Self {
            pid: p.tgid,
            threads: p.threads,
            ended: p.ended,
            exit: p.exit.as_ref().map(ExitReport::from),
            max_rss_bytes: p.exit.map(|e| e.max_rss_pages * page_size()),
            on_cpu_ns: c.oncpu_ns,
            runq_delay_ns: c.runq_ns,
            iowait_ns: c.iowait_ns,
            read_bytes: c.rchar,
            write_bytes: c.wchar,
            storage_read_bytes: c.storage_read_bytes,
            dirtied_bytes: c.dirtied_bytes,
            comm: p.comm,
            args: p.args,
        }
    }
}

/// One program's share of an exec (docs/figures.md, "`programs`").
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ProgramReport {
    /// The executable's file name as the kernel keeps it (at most 15 bytes); for the summed
    /// rest, how many programs.
    pub name: String,
    /// Processes that ran it: ended, and still running.
    pub processes: u64,
    pub running: u64,
    pub on_cpu_ns: u64,
    pub runq_delay_ns: u64,
    pub iowait_ns: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub storage_read_bytes: u64,
    pub dirtied_bytes: u64,
    /// Ended processes by outcome (`exit 0`, `SIGKILL`).
    pub exits: std::collections::BTreeMap<String, u64>,
}

impl ProgramReport {
    fn of(name: String, t: &ProgramTotals) -> Self {
        let c = &t.counters;
        Self {
            name,
            processes: t.ended + t.running,
            running: t.running,
            on_cpu_ns: c.oncpu_ns,
            runq_delay_ns: c.runq_ns,
            iowait_ns: c.iowait_ns,
            read_bytes: c.rchar,
            write_bytes: c.wchar,
            storage_read_bytes: c.storage_read_bytes,
            dirtied_bytes: c.dirtied_bytes,
            exits: t.exits.clone(),
        }
    }

    /// The first `n` programs (0: all), and the rest summed under the name "N programs".
    fn listed(all: Vec<(String, ProgramTotals)>, n: usize) -> (Vec<Self>, Option<Self>) {
        let n = if n == 0 { all.len() } else { n };
        let mut listed = Vec::new();
        let mut rest = ProgramTotals::default();
        let mut rest_count = 0;
        for (i, (name, t)) in all.into_iter().enumerate() {
            if i < n {
                listed.push(Self::of(name, &t));
            } else {
                rest_count += 1;
                rest.ended += t.ended;
                rest.running += t.running;
                rest.counters.add(&t.counters);
                for (k, v) in t.exits {
                    *rest.exits.entry(k).or_default() += v;
                }
            }
        }
        let other = (rest_count > 0).then(|| Self::of(format!("{rest_count} programs"), &rest));
        (listed, other)
    }
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct OtherReport {
    pub processes: u64,
    pub on_cpu_ns: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

/// Everything one exec's record is made of, besides the exec itself.
pub struct Inputs<'a> {
    /// The kernel's totals of the exec (its ended tasks, its requests, its sockets).
    pub stats: &'a ExecStats,
    /// Its running tasks' counters, for a record of an exec that still runs.
    pub live: Option<Live<'a>>,
    pub now_ns: u64,
    /// Processes listed (see `--top`).
    pub top: usize,
    /// Programs listed (see `--programs`).
    pub programs: usize,
    /// What is degraded or missing, from the profiler's side.
    pub notes: Vec<String>,
    pub cgroup: Option<CgroupReport>,
    pub network: Option<NetReport>,
}

impl ExecRecord {
    /// The record of an exec: the one place a record is made.
    pub fn build(exec: &Exec, i: Inputs<'_>) -> Self {
        let stats = i.stats;
        let mut notes = i.notes;
        let mut counters = stats.ended;
        let empty = HashMap::new();
        let (live_procs, live_tasks) = match i.live {
            Some(l) => {
                counters.add(l.counters);
                (l.procs, l.tasks)
            }
            None => (&empty, 0),
        };
        let end_ns = exec.removed_ns.unwrap_or(i.now_ns);
        let wall_ns = end_ns.saturating_sub(exec.started_ns);
        if exec.partial {
            notes
                .push("already running when the profiler attached: figures count from then".into());
        }
        if let Some(Lookup::Missing(why)) = &exec.metadata {
            notes.push(format!("container metadata unavailable: {why}"));
        }
        if stats.tasks_without_delays > 0 {
            notes.push(format!(
                "IO-wait and memory stall unknown for {} task(s): delay accounting was off when they \
                 started, or the kernel's figure was inconsistent (longer than the task's life)",
                stats.tasks_without_delays
            ));
        }
        notes.extend(exec.notes.iter().cloned());
        let mut procs = exec.procs.processes(live_procs);
        let chosen = top_processes(&mut procs, i.top);
        let (programs, other_programs) =
            ProgramReport::listed(exec.procs.programs(live_procs), i.programs);
        let other = &exec.procs.other;
        let container = exec.container();
        let step = crate::step::identity(
            exec.ci
                .as_ref()
                .and_then(|c| c.attributes.get("cicd.pipeline.task.name"))
                .map(String::as_str),
            container.and_then(|c| c.name.as_deref()),
            container
                .and_then(|c| c.command.as_deref())
                .or(exec.command.as_deref()),
            exec.report_path(),
        );
        Self {
            schema: RECORD_SCHEMA,
            host: crate::host::host_name().to_owned(),
            exec: exec.report_path().to_owned(),
            cgroup_id: exec.id,
            step,
            container: exec.container().cloned(),
            command: exec.command.clone(),
            exit: exec.main.and_then(|m| {
                Some(ExecExit {
                    pid: m.tgid,
                    status: (&m.exit?).into(),
                })
            }),
            phases: Phases::of(exec, end_ns),
            ci: exec.ci.clone(),
            state: if exec.removed_ns.is_some() {
                ExecState::Ended
            } else {
                ExecState::Running
            },
            partial: exec.partial,
            wall_ns,
            start_unix_ns: monotonic_to_unix_ns(exec.started_ns),
            end_unix_ns: monotonic_to_unix_ns(exec.started_ns + wall_ns),
            live_tasks,
            cpu: exec.cpu_split.apply((&counters).into()),
            disk: (&stats.disk).into(),
            io: (&counters).into(),
            tasks: TasksReport {
                processes_started: stats.procs_started,
                threads_started: stats.threads_started,
                execve: stats.execve,
                task_exits: stats.task_exits,
                process_exits: stats.proc_exits,
            },
            processes: chosen.into_iter().map(ProcReport::from).collect(),
            other_processes: OtherReport {
                processes: exec.procs.other_count,
                on_cpu_ns: other.oncpu_ns,
                read_bytes: other.rchar,
                write_bytes: other.wchar,
            },
            programs,
            other_programs,
            cgroup: i.cgroup,
            network: i.network,
            notes,
        }
    }
}

/// The kernel's page size, in which it counts resident memory.
fn page_size() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .map_or(4096, |p| p as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_statuses_are_read_as_the_kernel_writes_them() {
        let e = ExitReport::from_status(3 << 8, false);
        assert_eq!((e.code, e.signal.as_deref()), (Some(3), None));
        assert_eq!(e.summary(), "exit 3");
        assert!(ExitReport::from_status(0, false).success());
        let e = ExitReport::from_status(9, true);
        assert_eq!((e.code, e.signal.as_deref()), (None, Some("SIGKILL")));
        assert_eq!(e.summary(), "SIGKILL (OOM kill)");
        let e = ExitReport::from_status(11 | 0x80, false);
        assert!(e.core_dumped && !e.success());
        assert_eq!(e.summary(), "SIGSEGV (core dumped)");
        assert_eq!(
            serde_json::to_string(&ExitReport::from_status(11 | 0x80, false)).unwrap(),
            r#"{"signal":"SIGSEGV","core_dumped":true}"#
        );
        assert_eq!(
            ExitReport::from_status(64, false).signal.as_deref(),
            Some("signal 64")
        );
    }

    #[test]
    fn user_system_split_follows_the_tick_ratio() {
        assert_eq!(split_user_system(1000, 3, 1), (750, 250));
        assert_eq!(split_user_system(1000, 0, 0), (1000, 0)); // no tick: user, as the kernel
        assert_eq!(split_user_system(1000, 0, 5), (0, 1000));
        assert_eq!(
            split_user_system(u64::MAX, u64::MAX, u64::MAX).0,
            u64::MAX - u64::MAX / 2
        );
    }

    #[test]
    fn an_execs_user_and_system_time_never_go_down() {
        let mut last = CpuSplit::default();
        let cpu = |on_cpu, utime, stime| {
            let (user_ns, system_ns) = split_user_system(on_cpu, utime, stime);
            CpuReport {
                on_cpu_ns: on_cpu,
                user_ns,
                system_ns,
                ..Default::default()
            }
        };
        for (on_cpu, utime, stime, want) in [
            // One tick each: half each.
            (1000, 1, 1, (500, 500)),
            // Many user ticks later the ratio alone would give system 30: it keeps its 500.
            (3000, 99, 1, (2500, 500)),
            // And user keeps what it had when system's share grows.
            (3100, 1, 99, (2500, 600)),
            // Both sides always add up to on-CPU.
            (4000, 1, 1, (2500, 1500)),
        ] {
            let c = last.apply(cpu(on_cpu, utime, stime));
            last.keep(&c);
            assert_eq!((c.user_ns, c.system_ns), want, "{on_cpu} {utime}:{stime}");
        }
    }

    #[test]
    fn histogram_quantiles() {
        let mut counts = [0u64; LAT_BUCKETS];
        counts[3] = 90;
        counts[10] = 10;
        let h = Histogram::new(&counts, 0);
        assert_eq!(h.counts.len(), 11);
        assert_eq!(h.quantile_upper_ns(0.5), Some(lat_bucket_floor_ns(4)));
        assert_eq!(h.quantile_upper_ns(0.99), Some(lat_bucket_floor_ns(11)));
        assert_eq!(
            Histogram::new(&[0; LAT_BUCKETS], 0).quantile_upper_ns(0.5),
            None
        );
    }
}
