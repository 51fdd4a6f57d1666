//! The per-exec record and its embedded renderings: one text line, JSON lines, the live table
//! and the detailed report of `profiler run`.

use std::fmt::Write as _;

use profiler_common::*;
use serde::Serialize;

use crate::{
    cgroup_files::CgroupReport,
    ci::CiContext,
    clock::monotonic_to_unix_ns,
    execs::{Exec, Proc},
    network::NetReport,
    runtime::ContainerInfo,
};

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ExecReport {
    /// Path of the exec's cgroup relative to the attached cgroup ("." for the cgroup itself).
    pub exec: String,
    pub cgroup_id: u64,
    /// What the container runtime says about the exec (id, name, image, command), when its
    /// cgroup is a container's or a BuildKit step's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerInfo>,
    /// argv of the first program the exec ran (its first execve), when one was seen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// The CI step and trace the exec belongs to, from its first program's environment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ci: Option<CiContext>,
    /// "ended" (final figures) or "running" (figures so far).
    pub state: &'static str,
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
    /// The kernel's own accounting from the exec's cgroup files, each figure with its source.
    pub cgroup: Option<CgroupReport>,
    /// Traffic of the exec's sockets and of its own network namespace's interfaces.
    pub network: Option<NetReport>,
    pub notes: Vec<String>,
}

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

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ProcReport {
    pub pid: u32,
    pub comm: String,
    pub args: String,
    pub threads: u32,
    pub ended: bool,
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

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct OtherReport {
    pub processes: u64,
    pub on_cpu_ns: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

impl ExecReport {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        exec: &Exec,
        counters: &TaskCounters,
        stats: &ExecStats,
        wall_ns: u64,
        live_tasks: u64,
        processes: Vec<ProcReport>,
        other_count: u64,
        other: &TaskCounters,
        notes: Vec<String>,
    ) -> Self {
        Self {
            exec: exec.path.clone(),
            cgroup_id: exec.id,
            container: exec.container().cloned(),
            command: exec.command.clone(),
            ci: exec.ci.clone(),
            state: if exec.removed_ns.is_some() {
                "ended"
            } else {
                "running"
            },
            partial: exec.partial,
            wall_ns,
            start_unix_ns: monotonic_to_unix_ns(exec.started_ns),
            end_unix_ns: monotonic_to_unix_ns(exec.started_ns + wall_ns),
            live_tasks,
            cpu: counters.into(),
            disk: (&stats.disk).into(),
            io: counters.into(),
            tasks: TasksReport {
                processes_started: stats.procs_started,
                threads_started: stats.threads_started,
                execve: stats.execve,
                task_exits: stats.task_exits,
                process_exits: stats.proc_exits,
            },
            processes,
            other_processes: OtherReport {
                processes: other_count,
                on_cpu_ns: other.oncpu_ns,
                read_bytes: other.rchar,
                write_bytes: other.wchar,
            },
            cgroup: None,
            network: None,
            notes,
        }
    }

    pub fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// One line: what `profiler attach` prints when an exec ends.
    pub fn line(&self) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            "exec {} [{}]{} {} {}: cpu {} runq {} iowait {} | disk r {} ({} req) w {} ({} req)",
            self.exec,
            self.cgroup_id,
            self.label().map(|l| format!(" ({l})")).unwrap_or_default(),
            self.state,
            dur(self.wall_ns),
            dur(self.cpu.on_cpu_ns),
            dur(self.cpu.runq_delay_ns),
            dur(self.cpu.iowait_ns),
            bytes(self.disk.read_bytes),
            self.disk.read_requests,
            bytes(self.disk.write_bytes),
            self.disk.write_requests,
        );
        if let Some(p99) = self
            .disk
            .write_latency
            .quantile_upper_ns(0.99)
            .or(self.disk.read_latency.quantile_upper_ns(0.99))
        {
            let _ = write!(s, " p99<{}", dur(p99));
        }
        let _ = write!(
            s,
            " | io r {} w {} dirtied {} | {} procs {} threads {} execve",
            bytes(self.io.read_bytes),
            bytes(self.io.write_bytes),
            bytes(self.io.dirtied_bytes),
            self.tasks.processes_started,
            self.tasks.threads_started,
            self.tasks.execve,
        );
        if let Some((rx, tx)) = self.network.as_ref().and_then(|n| n.headline()) {
            let _ = write!(s, " | net rx {} tx {}", bytes(rx), bytes(tx));
        }
        if let Some(p) = self.processes.first() {
            let _ = write!(s, " | top {} {}", name(p), dur(p.on_cpu_ns));
        }
        if let Some(ci) = &self.ci {
            if let Some(sys) = ci.system {
                let a = |k: &str| ci.attributes.get(k).map(String::as_str).unwrap_or("-");
                let _ = write!(
                    s,
                    " | {sys} {} run {} task {}",
                    a("cicd.pipeline.name"),
                    a("cicd.pipeline.run.id"),
                    a("cicd.pipeline.task.name")
                );
            }
            if let Some(t) = &ci.trace {
                let _ = write!(s, " | trace {} parent {}", t.trace_id, t.span_id);
            }
        }
        if self.partial {
            s.push_str(" | partial");
        }
        s
    }

    /// What ran, for people: the runtime, the container's name and image, or the command of
    /// a BuildKit step or of the exec's first program.
    pub fn label(&self) -> Option<String> {
        let cmd = |c: &str| truncate(c, 60);
        match &self.container {
            Some(c) => {
                let mut l = c.runtime.to_owned();
                match (&c.name, &c.command) {
                    (Some(n), _) => {
                        l.push(' ');
                        l.push_str(n);
                    }
                    (None, Some(command)) => {
                        l.push_str(": ");
                        l.push_str(&cmd(command));
                    }
                    (None, None) => {
                        l.push(' ');
                        l.push_str(&truncate(&c.id, 12));
                    }
                }
                if let Some(i) = &c.image {
                    l.push_str(", ");
                    l.push_str(i);
                }
                Some(l)
            }
            None => self.command.as_deref().map(cmd),
        }
    }

    /// The detailed report of `profiler run`.
    pub fn detailed(&self, command: &str, status: &str) -> String {
        let mut s = String::new();
        let c = &self.cpu;
        let d = &self.disk;
        let io = &self.io;
        let _ = writeln!(
            s,
            "profiler: `{command}` {status} after {}",
            dur(self.wall_ns)
        );
        let _ = writeln!(
            s,
            "  cpu        on-cpu {} (user {}, system {})  run-queue {} ({} waits)  io-wait {} ({} waits)  memory stall {}",
            dur(c.on_cpu_ns),
            dur(c.user_ns),
            dur(c.system_ns),
            dur(c.runq_delay_ns),
            c.runq_waits,
            dur(c.iowait_ns),
            c.iowait_waits,
            dur(c.swapin_ns + c.reclaim_ns + c.thrashing_ns)
        );
        let _ = writeln!(
            s,
            "  switches   voluntary {}  involuntary {}",
            c.voluntary_switches, c.involuntary_switches
        );
        let _ = writeln!(
            s,
            "  disk       read {} in {} req  write {} in {} req  discard {}  flushes {}",
            bytes(d.read_bytes),
            d.read_requests,
            bytes(d.write_bytes),
            d.write_requests,
            bytes(d.discard_bytes),
            d.flush_requests
        );
        for (label, h) in [("read", &d.read_latency), ("write", &d.write_latency)] {
            if h.count() > 0 {
                let _ = writeln!(
                    s,
                    "  {label:<5} lat  mean {}  p50 <{}  p99 <{}  max <{}",
                    dur(h.sum_ns / h.count()),
                    dur(h.quantile_upper_ns(0.5).unwrap_or(0)),
                    dur(h.quantile_upper_ns(0.99).unwrap_or(0)),
                    dur(h.quantile_upper_ns(1.0).unwrap_or(0)),
                );
            }
        }
        let _ = writeln!(
            s,
            "  syscalls   read {} ({} calls)  write {} ({} calls)  from storage {}  dirtied {}",
            bytes(io.read_bytes),
            io.read_calls,
            bytes(io.write_bytes),
            io.write_calls,
            bytes(io.storage_read_bytes),
            bytes(io.dirtied_bytes)
        );
        if let Some(n) = &self.network {
            match &n.sockets {
                Some(k) => {
                    let _ = writeln!(
                        s,
                        "  sockets    rx {} ({} pkts)  tx {} ({} pkts)  of which loopback rx {} tx {}",
                        bytes(k.all.rx_bytes),
                        k.all.rx_packets,
                        bytes(k.all.tx_bytes),
                        k.all.tx_packets,
                        bytes(k.loopback.rx_bytes),
                        bytes(k.loopback.tx_bytes)
                    );
                }
                None => {
                    let _ = writeln!(
                        s,
                        "  sockets    n/a ({})",
                        n.sockets_missing.as_deref().unwrap_or("unknown")
                    );
                }
            }
            for i in &n.interfaces {
                let _ = writeln!(
                    s,
                    "  interface  {} (netns {})  rx {} ({} pkts)  tx {} ({} pkts)",
                    i.name,
                    i.netns,
                    bytes(i.traffic.rx_bytes),
                    i.traffic.rx_packets,
                    bytes(i.traffic.tx_bytes),
                    i.traffic.tx_packets
                );
            }
        }
        let t = &self.tasks;
        let _ = writeln!(
            s,
            "  tasks      {} processes, {} threads started, {} execve, {} exits",
            t.processes_started, t.threads_started, t.execve, t.task_exits
        );
        if !self.processes.is_empty() {
            let _ = writeln!(
                s,
                "  {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}  COMMAND",
                "PID", "CPU", "RUNQ", "IOWAIT", "READ", "WRITE"
            );
            for p in &self.processes {
                let _ = writeln!(
                    s,
                    "  {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}  {}",
                    p.pid,
                    dur(p.on_cpu_ns),
                    dur(p.runq_delay_ns),
                    dur(p.iowait_ns),
                    bytes(p.read_bytes),
                    bytes(p.write_bytes),
                    name(p)
                );
            }
        }
        if let Some(c) = &self.cgroup {
            let psi =
                |p: &Option<crate::cgroup_files::Sourced<crate::cgroup_files::PressureReport>>| {
                    match p.as_ref().and_then(|p| p.value) {
                        Some(v) => format!(
                            "some {} full {}",
                            v.some
                                .map(|x| dur((x.total_s * 1e9) as u64))
                                .unwrap_or_else(|| "-".into()),
                            v.full
                                .map(|x| dur((x.total_s * 1e9) as u64))
                                .unwrap_or_else(|| "-".into())
                        ),
                        None => "n/a".into(),
                    }
                };
            let _ = writeln!(
                s,
                "  pressure   cpu {}  io {}  memory {}",
                psi(&c.cpu_pressure),
                psi(&c.io_pressure),
                psi(&c.memory_pressure)
            );
            let val = |x: &Option<crate::cgroup_files::Sourced<u64>>, f: fn(u64) -> String| {
                x.as_ref()
                    .and_then(|x| x.value)
                    .map(f)
                    .unwrap_or_else(|| "n/a".into())
            };
            let oom = c
                .memory_events
                .as_ref()
                .and_then(|e| e.value.as_ref())
                .map(|e| format!("{} oom kills", e.get("oom_kill").copied().unwrap_or(0)))
                .unwrap_or_else(|| "oom n/a".into());
            let _ = writeln!(
                s,
                "  cgroup     cpu.stat usage {}  memory peak {}  {}  pids peak {}",
                val(&c.cpu_usage_usec, |u| dur(u * 1000)),
                val(&c.memory_peak_bytes, bytes),
                oom,
                val(&c.pids_peak, |p| p.to_string())
            );
        }
        let o = &self.other_processes;
        if o.processes > 0 {
            let _ = writeln!(
                s,
                "  ... and {} more processes using {} CPU",
                o.processes,
                dur(o.on_cpu_ns)
            );
        }
        for n in &self.notes {
            let _ = writeln!(s, "  note: {n}");
        }
        s
    }
}

/// Header and rows of the live table.
pub fn live_table(rows: &[ExecReport]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<28} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}  TOP",
        "EXEC", "AGE", "CPU", "RUNQ", "IOWAIT", "DISK-R", "DISK-W", "TASKS"
    );
    for r in rows {
        let top = r.processes.first().map(name).unwrap_or_default();
        let exec = match r.container.as_ref().and_then(|c| c.name.as_ref()) {
            Some(n) => n.clone(),
            None => r.exec.clone(),
        };
        let _ = writeln!(
            s,
            "{:<28} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}  {}",
            truncate(&exec, 28),
            dur(r.wall_ns),
            dur(r.cpu.on_cpu_ns),
            dur(r.cpu.runq_delay_ns),
            dur(r.cpu.iowait_ns),
            bytes(r.disk.read_bytes),
            bytes(r.disk.write_bytes),
            r.live_tasks,
            truncate(&top, 40)
        );
    }
    s
}

fn name(p: &ProcReport) -> String {
    if p.args.is_empty() {
        if p.comm.is_empty() {
            format!("[{}]", p.pid)
        } else {
            p.comm.clone()
        }
    } else {
        p.args.clone()
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

/// Nanoseconds, human-readable.
pub fn dur(ns: u64) -> String {
    match ns {
        0 => "0s".into(),
        n if n < 1_000 => format!("{n}ns"),
        n if n < 1_000_000 => format!("{:.1}us", n as f64 / 1e3),
        n if n < 1_000_000_000 => format!("{:.1}ms", n as f64 / 1e6),
        n => format!("{:.3}s", n as f64 / 1e9),
    }
}

/// Bytes, human-readable (binary units).
pub fn bytes(b: u64) -> String {
    const K: f64 = 1024.0;
    let f = b as f64;
    if b < 1024 {
        format!("{b}B")
    } else if f < K * K {
        format!("{:.1}KiB", f / K)
    } else if f < K * K * K {
        format!("{:.1}MiB", f / K / K)
    } else {
        format!("{:.2}GiB", f / K / K / K)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(dur(0), "0s");
        assert_eq!(dur(1_500), "1.5us");
        assert_eq!(dur(2_000_000_000), "2.000s");
        assert_eq!(bytes(512), "512B");
        assert_eq!(bytes(10 * 1024 * 1024), "10.0MiB");
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
