//! How a record is shown: one text line (what `attach` prints when an exec ends), JSON lines,
//! the live table, and the detailed report of `profiler run`.

use std::fmt::Write as _;

use crate::record::{ExecRecord, ProcReport};

impl ExecRecord {
    pub fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// One line: what `profiler attach` prints when an exec ends.
    pub fn line(&self) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            "exec {} [{}]{} {} {}{}: cpu {} runq {} iowait {} | disk r {} ({} req) w {} ({} req)",
            self.exec,
            self.cgroup_id,
            self.label().map(|l| format!(" ({l})")).unwrap_or_default(),
            self.state.as_str(),
            dur(self.wall_ns),
            self.exit
                .as_ref()
                .map(|e| format!(", {}", e.status.summary()))
                .unwrap_or_default(),
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
        if !self.programs.is_empty() {
            s.push_str(" | programs");
            for p in self.programs.iter().take(3) {
                let _ = write!(s, " {} x{} {}", p.name, p.processes, dur(p.on_cpu_ns));
            }
            let more = self.programs.len().saturating_sub(3)
                + self.other_programs.as_ref().map_or(0, |o| {
                    o.name
                        .split(' ')
                        .next()
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(0)
                });
            if more > 0 {
                let _ = write!(s, " +{more}");
            }
        }
        if let Some(ci) = &self.ci {
            if let Some(sys) = ci.system {
                let a = |k: &str| ci.attributes.get(k).map(String::as_str);
                let _ = write!(
                    s,
                    " | {sys} {} run {} task {}",
                    a("cicd.pipeline.name").unwrap_or("-"),
                    a("cicd.pipeline.run.id").unwrap_or("-"),
                    a("cicd.pipeline.task.name").unwrap_or("-")
                );
                if let Some(id) = a("cicd.pipeline.task.run.id") {
                    let _ = write!(s, " #{id}");
                }
                if let Some(w) = a("cicd.worker.name").or(a("cicd.worker.id")) {
                    let _ = write!(s, " on {w}");
                }
            }
            if let Some(t) = &ci.trace {
                let _ = write!(s, " | trace {} parent {}", t.trace_id, t.span_id);
            }
            for (k, v) in &ci.env {
                let _ = write!(s, " | {k}={v}");
            }
        }
        if self.partial {
            s.push_str(" | partial");
        }
        printable(&s)
    }

    /// What ran, for people: the runtime, the container's name (`namespace/pod/container` for
    /// a pod's) and image, or the command of a BuildKit step or of the exec's first program.
    pub fn label(&self) -> Option<String> {
        let cmd = |c: &str| truncate(c, 60);
        match &self.container {
            Some(c) => {
                let mut l = c.runtime.to_owned();
                match (c.display_name(), &c.command) {
                    (Some(n), _) => {
                        l.push(' ');
                        l.push_str(&n);
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
            "profiler: `{}` {status} after {}",
            printable(command),
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
                // Only what went wrong: most processes exit 0.
                let failed = p
                    .exit
                    .as_ref()
                    .filter(|e| !e.success())
                    .map(|e| format!("  [{}]", e.summary()))
                    .unwrap_or_default();
                let _ = writeln!(
                    s,
                    "  {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}  {}{failed}",
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
        if !self.programs.is_empty() {
            let _ = writeln!(
                s,
                "  {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}  PROGRAM",
                "PROCS", "CPU", "RUNQ", "IOWAIT", "READ", "WRITE"
            );
            for p in self.programs.iter().chain(&self.other_programs) {
                let _ = writeln!(
                    s,
                    "  {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}  {}",
                    p.processes,
                    dur(p.on_cpu_ns),
                    dur(p.runq_delay_ns),
                    dur(p.iowait_ns),
                    bytes(p.read_bytes),
                    bytes(p.write_bytes),
                    printable(&p.name)
                );
            }
        }
        if let Some(c) = &self.cgroup {
            let psi = |p: &Option<
                crate::sources::cgroup_files::Sourced<crate::sources::cgroup_files::PressureReport>,
            >| {
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
            let val = |x: &Option<crate::sources::cgroup_files::Sourced<u64>>,
                       f: fn(u64) -> String| {
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
            let _ = writeln!(s, "  note: {}", printable(n));
        }
        s
    }
}

/// Header and rows of the live table.
pub fn live_table(rows: &[ExecRecord]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<28} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}  TOP",
        "EXEC", "AGE", "CPU", "RUNQ", "IOWAIT", "DISK-R", "DISK-W", "TASKS"
    );
    for r in rows {
        let top = r.processes.first().map(name).unwrap_or_default();
        let exec = r
            .container
            .as_ref()
            .and_then(|c| c.display_name())
            .unwrap_or_else(|| r.exec.clone());
        let _ = writeln!(
            s,
            "{:<28} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}  {}",
            truncate(&printable(&exec), 28),
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
            printable(&p.comm)
        }
    } else {
        printable(&p.args)
    }
}

/// Whether a character from a command, a name or a CI value must be shown escaped: a control
/// character (a newline, an escape sequence) would break a record's line or drive the
/// terminal, and a bidirectional formatting character (U+202E and friends) would make a step's
/// name read in another order than its bytes.
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with every character that [`needs_escape`] made visible (`\n`, `\u{1b}`, `\u{202e}`).
pub fn printable(s: &str) -> String {
    if !s.chars().any(needs_escape) {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if needs_escape(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// `s` in at most `n` characters: its start, and an ellipsis where it was cut.
pub fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// `s` in at most `n` characters: its end (where a path names the exec), after an ellipsis.
pub fn truncate_start(s: &str, n: usize) -> String {
    let len = s.chars().count();
    if len <= n {
        return s.to_owned();
    }
    let tail: String = s.chars().skip(len - n.saturating_sub(1)).collect();
    format!("…{tail}")
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
    fn control_characters_are_shown_escaped() {
        assert_eq!(printable("make -j2"), "make -j2");
        assert_eq!(printable("a\nb\x1b[2Jc"), "a\\nb\\u{1b}[2Jc");
        // A right-to-left override would make "make evil\u{202e}txt.exe" read otherwise.
        assert_eq!(
            printable("step\u{202e}1cod\u{2066}x\u{2069}"),
            "step\\u{202e}1cod\\u{2066}x\\u{2069}"
        );
        assert_eq!(printable("naïve ünïcode ✓"), "naïve ünïcode ✓");
        let r = ExecRecord {
            exec: "x".into(),
            command: Some("sh -c 'echo a\necho b'".into()),
            ..Default::default()
        };
        assert!(!r.line().contains('\n'), "{}", r.line());
    }

    #[test]
    fn a_pods_container_is_named_namespace_pod_container() {
        use crate::runtime::{ContainerInfo, K8s};
        let r = ExecRecord {
            exec: "k8s.io/4f1c".into(),
            container: Some(ContainerInfo {
                runtime: "containerd",
                id: "4f1c".into(),
                name: Some("app".into()),
                image: Some("registry.local/app:1".into()),
                k8s: Some(K8s {
                    pod_name: "web-0".into(),
                    namespace: "shop".into(),
                    pod_uid: None,
                    container_name: Some("app".into()),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(
            r.line()
                .contains(" (containerd shop/web-0/app, registry.local/app:1) "),
            "{}",
            r.line()
        );
        assert!(live_table(&[r]).contains("\nshop/web-0/app "));
    }

    #[test]
    fn formats() {
        assert_eq!(dur(0), "0s");
        assert_eq!(dur(1_500), "1.5us");
        assert_eq!(dur(2_000_000_000), "2.000s");
        assert_eq!(bytes(512), "512B");
        assert_eq!(bytes(10 * 1024 * 1024), "10.0MiB");
    }
}
