//! The exported metrics: one table of definitions, and the data points of an exec record.
//! OTLP and the Prometheus endpoint both take their metrics from here.

use std::{borrow::Cow, sync::Arc};

use opentelemetry::{Key, KeyValue, StringValue, Value};

use profiler_common::{LAT_BUCKETS, lat_bucket_floor_ns};
use regex::Regex;

use super::secs;
use crate::{
    record::{ExecRecord, ExecState},
    runtime::container_id,
    sources::cgroup_files::Sourced,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Monotonic cumulative sum.
    Counter,
    Gauge,
    /// Explicit-boundary histogram of seconds (see [`latency_bounds_s`]).
    Histogram,
}

#[derive(Debug)]
pub struct Def {
    pub name: &'static str,
    pub kind: Kind,
    pub unit: &'static str,
    /// Integer values (bytes, counts) rather than seconds.
    pub integer: bool,
    /// Most series of this metric one exec has (its series limit in the SDK is this many per
    /// exec that one export can show).
    pub series_per_exec: usize,
    pub description: &'static str,
}

macro_rules! defs {
    ($($id:ident = $name:literal, $kind:ident, $unit:literal, $int:literal, $series:literal, $desc:literal;)*) => {
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(usize)]
        pub enum M { $($id,)* }
        pub const DEFS: &[Def] = &[$(Def {
            name: $name,
            kind: Kind::$kind,
            unit: $unit,
            integer: $int,
            series_per_exec: $series,
            description: $desc,
        },)*];
    };
}

defs! {
    CpuTime = "container.cpu.time", Counter, "s", false, 2,
        "Time the exec's tasks ran on a CPU, by cpu.mode user/system (eBPF: the tasks' \
         sum_exec_runtime, split by their utime:stime ratio)";
    DiskIo = "container.disk.io", Counter, "By", true, 2,
        "Block-layer bytes of the exec's requests, by disk.io.direction (eBPF)";
    NetworkIo = "container.network.io", Counter, "By", true, 32,
        "Bytes through the interfaces of the exec's own network namespace, by network.io.direction and network.interface.name (eBPF)";
    MemoryUsage = "container.memory.usage", Gauge, "By", true, 1,
        "Memory charged to the exec's cgroup (memory.current, sampled; running execs only)";
    Uptime = "container.uptime", Gauge, "s", false, 1,
        "Time since the exec's cgroup was created (or the profiler attached)";
    RunQueueDelay = "profiler.exec.cpu.run_queue_delay", Counter, "s", false, 1,
        "Time the exec's tasks were runnable but waiting for a CPU (eBPF, schedstat run_delay)";
    IoWait = "profiler.exec.cpu.io_wait", Counter, "s", false, 1,
        "Time the exec's tasks were blocked waiting for IO (eBPF)";
    MemoryStall = "profiler.exec.cpu.memory_stall", Counter, "s", false, 1,
        "Time the exec's tasks stalled on swap-in, reclaim and thrashing (delay accounting)";
    ContextSwitches = "profiler.exec.cpu.context_switches", Counter, "{switch}", true, 2,
        "Context switches of the exec's tasks, by profiler.switch.kind (voluntary, involuntary)";
    DiskOperations = "profiler.exec.disk.operations", Counter, "{operation}", true, 2,
        "Block requests of the exec, each counted once at its first dispatch to the driver, by disk.io.direction (eBPF)";
    DiskLatency = "profiler.exec.disk.latency", Histogram, "s", false, 2,
        "Block request latency from issue to completion, by disk.io.direction (eBPF); exported once, when the exec ends";
    SyscallIo = "profiler.exec.io.syscall", Counter, "By", true, 2,
        "Bytes of read- and write-type syscalls, page-cache hits included, by disk.io.direction (task IO accounting)";
    SocketIo = "profiler.exec.network.socket.io", Counter, "By", true, 4,
        "IP bytes of the exec's sockets in any namespace, by network.io.direction and profiler.network.loopback (eBPF cgroup_skb)";
    PressureStall = "profiler.exec.pressure.stall", Counter, "s", false, 8,
        "PSI stall time of the exec's cgroup, by profiler.pressure.resource (cpu, io, memory, irq) and profiler.pressure.kind (some, full)";
    MemoryPeak = "profiler.exec.memory.peak", Gauge, "By", true, 1,
        "Peak memory charged to the exec's cgroup (memory.peak)";
    OomKills = "profiler.exec.memory.oom_kills", Counter, "{kill}", true, 1,
        "OOM kills in the exec's cgroup (memory.events oom_kill)";
    ProcessesStarted = "profiler.exec.processes.started", Counter, "{process}", true, 1,
        "Processes forked into the exec (eBPF)";
    ThreadsStarted = "profiler.exec.threads.started", Counter, "{thread}", true, 1,
        "Threads started in the exec's processes (eBPF)";
    Execve = "profiler.exec.execve", Counter, "{call}", true, 1,
        "execve calls in the exec (eBPF)";
    Exits = "profiler.exec.exits", Counter, "{exec}", true, 1,
        "1 for an ended exec, by the outcome of its main program: process.exit.code, or profiler.exec.exit.signal (eBPF, at the process's end); exported once, when the exec ends";
    ProcessCpuTime = "profiler.process.cpu.time", Counter, "s", false, 11,
        "CPU time of the exec's processes by program, process.executable.name: the 10 programs with the most, and `other` for the rest, summing to the exec's (eBPF); exported once, when the exec ends";
}

/// The one metric outside the per-exec table: how many execs are followed now (OTLP only,
/// without attributes).
pub const EXECS_RUNNING: Def = Def {
    name: "profiler.execs.running",
    kind: Kind::Gauge,
    unit: "{exec}",
    integer: true,
    series_per_exec: 0,
    description: "Execs the profiler follows now",
};

/// Programs whose CPU time an exec's `profiler.process.cpu.time` carries on series of their
/// own (those with the most; the rest in `other`).
pub const PROGRAMS_PER_EXEC: usize = 10;

/// Histogram boundaries of [`M::DiskLatency`], in seconds: the log2 buckets of the kernel side.
pub fn latency_bounds_s() -> Vec<f64> {
    (1..LAT_BUCKETS)
        .map(|i| lat_bucket_floor_ns(i) as f64 / 1e9)
        .collect()
}

/// A point's own attributes (direction, mode, ...): names and mostly values are fixed
/// strings, which OpenTelemetry takes without a copy.
pub type Attrs = Vec<(&'static str, Cow<'static, str>)>;

#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub metric: M,
    pub attrs: Attrs,
    pub value: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Hist {
    pub metric: M,
    pub attrs: Attrs,
    /// Count per bucket of [`latency_bounds_s`] (one more than the bounds).
    pub counts: Vec<u64>,
    pub sum_s: f64,
}

/// Everything exported of one exec.
#[derive(Clone, Debug, PartialEq)]
pub struct ExecSeries {
    pub cgroup_id: u64,
    /// The exec's attributes, on every point.
    pub attrs: Vec<(String, String)>,
    /// The same as OpenTelemetry attributes, sorted by name, their strings shared: the SDK
    /// copies a point's attributes into each series it keeps, which is then a reference
    /// count, not a string (with 1,000 running execs, ~30,000 series per collection).
    pub kv: Vec<KeyValue>,
    pub points: Vec<Point>,
    pub hists: Vec<Hist>,
}

/// How an exec's attributes are made from its cgroup path.
#[derive(Clone, Debug, Default)]
pub struct ExecAttributes {
    /// A user pattern: each named group that matches becomes an attribute.
    pub pattern: Option<Regex>,
    /// Leave process.command_line out (build commands may carry credentials).
    pub no_command_line: bool,
}

impl ExecAttributes {
    pub fn new(pattern: Option<&str>) -> Result<Self, String> {
        let pattern = pattern
            .map(|p| {
                let re = Regex::new(p).map_err(|e| format!("invalid --exec-attributes pattern: {e}"))?;
                if re.capture_names().flatten().next().is_none() {
                    return Err(format!(
                        "--exec-attributes pattern {p:?} has no named group: name each attribute, e.g. (?P<job>[^/]+)"
                    ));
                }
                Ok(re)
            })
            .transpose()?;
        Ok(Self {
            pattern,
            no_command_line: false,
        })
    }

    /// The exec's attributes: its path and cgroup id, what its container runtime says of it
    /// (OpenTelemetry's container.* and k8s.* names), the command of its first program, and the user
    /// pattern's groups.
    pub fn of(&self, r: &ExecRecord) -> Vec<(String, String)> {
        let path = r.exec.as_str();
        let mut a = vec![
            ("profiler.exec.path".to_owned(), path.to_owned()),
            (
                "profiler.exec.cgroup_id".to_owned(),
                r.cgroup_id.to_string(),
            ),
        ];
        let mut put = |k: &str, v: Option<&String>| {
            if let Some(v) = v {
                a.push((k.to_owned(), v.clone()));
            }
        };
        match &r.container {
            Some(c) => {
                put("container.id", Some(&c.id));
                put("container.name", c.name.as_ref());
                put("container.image.name", c.image.as_ref());
                put("container.runtime.name", Some(&c.runtime.to_owned()));
                if let Some(k) = &c.k8s {
                    put("k8s.pod.name", Some(&k.pod_name));
                    put("k8s.namespace.name", Some(&k.namespace));
                    put("k8s.pod.uid", k.pod_uid.as_ref());
                    put("k8s.container.name", k.container_name.as_ref());
                }
            }
            None => put("container.id", container_id(path).as_ref()),
        }
        // The step identity may be made of the command: made without it then.
        let step = if self.no_command_line {
            crate::step::identity(
                r.ci.as_ref()
                    .and_then(|c| c.attributes.get("cicd.pipeline.task.name"))
                    .map(String::as_str),
                r.container.as_ref().and_then(|c| c.name.as_deref()),
                None,
                path,
            )
        } else {
            r.step.clone()
        };
        put("profiler.exec.step", Some(&step));
        if !self.no_command_line {
            put(
                "process.command_line",
                r.command
                    .as_ref()
                    .or(r.container.as_ref().and_then(|c| c.command.as_ref())),
            );
        }
        if let Some(ci) = &r.ci {
            for (k, v) in &ci.attributes {
                a.push(((*k).to_owned(), v.clone()));
            }
            for (k, v) in &ci.env {
                a.push((format!("profiler.exec.env.{k}"), v.clone()));
            }
            // The metrics SDK records no exemplars: the trace context goes on as attributes.
            if let Some(t) = &ci.trace {
                a.push(("profiler.exec.trace_id".to_owned(), t.trace_id.clone()));
                a.push(("profiler.exec.parent_span_id".to_owned(), t.span_id.clone()));
            }
        }
        if let Some(re) = &self.pattern
            && let Some(c) = re.captures(path)
        {
            for name in re.capture_names().flatten() {
                if let Some(m) = c.name(name) {
                    a.push((name.to_owned(), m.as_str().to_owned()));
                }
            }
        }
        a
    }
}

fn dir(d: &'static str) -> Attrs {
    vec![("disk.io.direction", Cow::Borrowed(d))]
}

fn net_dir(d: &'static str) -> Attrs {
    vec![("network.io.direction", Cow::Borrowed(d))]
}

/// OpenTelemetry attributes whose strings are shared, sorted by name (the order the SDK
/// keeps them in, so that it keeps one copy).
pub fn shared_kv(attrs: &[(String, String)]) -> Vec<KeyValue> {
    let mut kv: Vec<KeyValue> = attrs
        .iter()
        .map(|(k, v)| {
            KeyValue::new(
                Key::from(Arc::<str>::from(k.as_str())),
                Value::String(StringValue::from(Arc::<str>::from(v.as_str()))),
            )
        })
        .collect();
    kv.sort_by(|a, b| a.key.cmp(&b.key));
    kv
}

/// A point's attributes: the exec's, then the point's own, sorted by name, into `out`.
pub fn point_kv(out: &mut Vec<KeyValue>, exec: &[KeyValue], own: &Attrs) {
    out.clear();
    out.extend(exec.iter().cloned());
    out.extend(own.iter().map(|(k, v)| {
        let v = match v {
            Cow::Borrowed(s) => Value::from(*s),
            Cow::Owned(s) => Value::from(s.clone()),
        };
        KeyValue::new(*k, v)
    }));
    out.sort_by(|a, b| a.key.cmp(&b.key));
}

impl ExecSeries {
    /// The points of an exec record. Figures the record lacks (a missing cgroup file, a
    /// network view this host does not have) are left out, never sent as zero.
    pub fn of(r: &ExecRecord, attrs: Vec<(String, String)>) -> Self {
        let mut p = Vec::new();
        let mut put = |metric: M, attrs: Attrs, value: f64| {
            p.push(Point {
                metric,
                attrs,
                value,
            })
        };
        let c = &r.cpu;
        put(
            M::CpuTime,
            vec![("cpu.mode", "user".into())],
            secs(c.user_ns),
        );
        put(
            M::CpuTime,
            vec![("cpu.mode", "system".into())],
            secs(c.system_ns),
        );
        put(M::RunQueueDelay, vec![], secs(c.runq_delay_ns));
        // The outcome on a series of its own: as an attribute of every series it would start
        // new ones when the exec ends.
        if let Some(e) = r.exit.as_ref().filter(|_| r.state == ExecState::Ended) {
            let outcome = match (e.status.code, &e.status.signal) {
                (_, Some(sig)) => ("profiler.exec.exit.signal", sig.clone().into()),
                (code, None) => (
                    "process.exit.code",
                    code.unwrap_or_default().to_string().into(),
                ),
            };
            put(M::Exits, vec![outcome], 1.0);
        }
        put(M::IoWait, vec![], secs(c.iowait_ns));
        put(
            M::MemoryStall,
            vec![],
            secs(c.swapin_ns + c.reclaim_ns + c.thrashing_ns),
        );
        for (kind, v) in [
            ("voluntary", c.voluntary_switches),
            ("involuntary", c.involuntary_switches),
        ] {
            put(
                M::ContextSwitches,
                vec![("profiler.switch.kind", kind.into())],
                v as f64,
            );
        }
        let d = &r.disk;
        put(M::DiskIo, dir("read"), d.read_bytes as f64);
        put(M::DiskIo, dir("write"), d.write_bytes as f64);
        put(M::DiskOperations, dir("read"), d.read_requests as f64);
        put(M::DiskOperations, dir("write"), d.write_requests as f64);
        put(M::SyscallIo, dir("read"), r.io.read_bytes as f64);
        put(M::SyscallIo, dir("write"), r.io.write_bytes as f64);
        put(M::Uptime, vec![], secs(r.wall_ns));
        put(
            M::ProcessesStarted,
            vec![],
            r.tasks.processes_started as f64,
        );
        put(M::ThreadsStarted, vec![], r.tasks.threads_started as f64);
        put(M::Execve, vec![], r.tasks.execve as f64);
        if let Some(n) = &r.network {
            if let Some(s) = &n.sockets {
                for (lo, t) in [("false", diff(&s.all, &s.loopback)), ("true", s.loopback)] {
                    for (d, v) in [("receive", t.rx_bytes), ("transmit", t.tx_bytes)] {
                        let mut a = net_dir(d);
                        a.push(("profiler.network.loopback", lo.into()));
                        put(M::SocketIo, a, v as f64);
                    }
                }
            }
            if n.interfaces_total.is_some() {
                for i in n.interfaces.iter().filter(|i| !i.loopback) {
                    for (d, v) in [
                        ("receive", i.traffic.rx_bytes),
                        ("transmit", i.traffic.tx_bytes),
                    ] {
                        let mut a = net_dir(d);
                        a.push(("network.interface.name", i.name.clone().into()));
                        put(M::NetworkIo, a, v as f64);
                    }
                }
            }
        }
        if let Some(cg) = &r.cgroup {
            for (res, psi) in [
                ("cpu", &cg.cpu_pressure),
                ("io", &cg.io_pressure),
                ("memory", &cg.memory_pressure),
                ("irq", &cg.irq_pressure),
            ] {
                let Some(v) = value(psi) else { continue };
                for (kind, line) in [("some", &v.some), ("full", &v.full)] {
                    if let Some(l) = line {
                        put(
                            M::PressureStall,
                            vec![
                                ("profiler.pressure.resource", res.into()),
                                ("profiler.pressure.kind", kind.into()),
                            ],
                            l.total_s,
                        );
                    }
                }
            }
            if r.state == ExecState::Running
                && let Some(v) = value(&cg.memory_current_bytes)
            {
                put(M::MemoryUsage, vec![], *v as f64);
            }
            if let Some(v) = value(&cg.memory_peak_bytes) {
                put(M::MemoryPeak, vec![], *v as f64);
            }
            if let Some(v) = value(&cg.memory_events).and_then(|e| e.get("oom_kill")) {
                put(M::OomKills, vec![], *v as f64);
            }
        }
        // By program, once the figures are final: a running exec's ranking can still change,
        // and a program moving out of `other` would make that series go down.
        if r.state == ExecState::Ended {
            let mut other = r.other_programs.as_ref().map_or(0, |o| o.on_cpu_ns);
            for (i, pr) in r.programs.iter().enumerate() {
                if i < PROGRAMS_PER_EXEC {
                    put(
                        M::ProcessCpuTime,
                        vec![("process.executable.name", pr.name.clone().into())],
                        secs(pr.on_cpu_ns),
                    );
                } else {
                    other += pr.on_cpu_ns;
                }
            }
            if other > 0 || r.other_programs.is_some() {
                put(
                    M::ProcessCpuTime,
                    vec![("process.executable.name", "other".into())],
                    secs(other),
                );
            }
        }
        let mut hists = Vec::new();
        for (d, h) in [("read", &d.read_latency), ("write", &d.write_latency)] {
            let mut counts = vec![0u64; LAT_BUCKETS];
            for (i, c) in h.counts.iter().enumerate().take(LAT_BUCKETS) {
                counts[i] = *c;
            }
            if counts.iter().any(|&c| c > 0) {
                hists.push(Hist {
                    metric: M::DiskLatency,
                    attrs: dir(d),
                    counts,
                    sum_s: secs(h.sum_ns),
                });
            }
        }
        Self {
            cgroup_id: r.cgroup_id,
            kv: shared_kv(&attrs),
            attrs,
            points: p,
            hists,
        }
    }
}

fn value<T>(s: &Option<Sourced<T>>) -> Option<&T> {
    s.as_ref().and_then(|s| s.value.as_ref())
}

fn diff(
    a: &crate::sources::net::Traffic,
    b: &crate::sources::net::Traffic,
) -> crate::sources::net::Traffic {
    crate::sources::net::Traffic {
        rx_bytes: a.rx_bytes.saturating_sub(b.rx_bytes),
        rx_packets: a.rx_packets.saturating_sub(b.rx_packets),
        tx_bytes: a.tx_bytes.saturating_sub(b.tx_bytes),
        tx_packets: a.tx_packets.saturating_sub(b.tx_packets),
    }
}

/// Values to record into an OTel histogram so that it gets exactly `counts` per bucket and
/// the exact `sum`: each bucket's values sit at one point inside the bucket, raised from its
/// lower bound as far as the sum requires. Returns (value, how many times).
pub fn histogram_values(bounds: &[f64], counts: &[u64], sum: f64) -> Vec<(f64, u64)> {
    let lower = |i: usize| if i == 0 { 0.0 } else { bounds[i - 1] };
    let width = |i: usize| bounds.get(i).map(|u| u - lower(i));
    let mut left = sum
        - counts
            .iter()
            .enumerate()
            .map(|(i, &c)| lower(i) * c as f64)
            .sum::<f64>();
    let mut out = Vec::new();
    // Highest buckets first: the open last bucket takes whatever is left.
    for i in (0..counts.len()).rev() {
        let c = counts[i];
        if c == 0 {
            continue;
        }
        let room = width(i).map(|w| w * 0.999).unwrap_or(f64::INFINITY) * c as f64;
        let add = left.clamp(0.0, room);
        left -= add;
        out.push((lower(i) + add / c as f64, c));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{ContainerInfo, K8s};

    #[test]
    fn names_are_unique_and_units_set() {
        let mut names: Vec<&str> = DEFS.iter().map(|d| d.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), DEFS.len());
        assert_eq!(
            DEFS[M::ProcessCpuTime as usize].name,
            "profiler.process.cpu.time"
        );
        assert!(DEFS.iter().all(|d| !d.unit.is_empty()));
    }

    #[test]
    fn container_metadata_makes_attributes() {
        let h = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let by_path = ExecRecord {
            exec: format!("system.slice/docker-{h}.scope"),
            ..Default::default()
        };
        let from_path = ExecAttributes::default().of(&by_path);
        assert!(from_path.contains(&("container.id".into(), h.into())));
        let r = ExecRecord {
            exec: h.into(),
            container: Some(ContainerInfo {
                runtime: "docker",
                id: h.into(),
                name: Some("pt-cpu".into()),
                image: Some("pbase:1".into()),
                command: Some("/bin/busy 100".into()),
                k8s: None,
            }),
            ..Default::default()
        };
        let v = ExecAttributes::default().of(&r);
        for (k, want) in [
            ("container.id", h),
            ("container.name", "pt-cpu"),
            ("container.image.name", "pbase:1"),
            ("container.runtime.name", "docker"),
            // No first program seen: the runtime's command stands in.
            ("process.command_line", "/bin/busy 100"),
        ] {
            assert!(v.contains(&(k.into(), want.into())), "{k}: {v:?}");
        }
        assert!(!v.iter().any(|(k, _)| k.starts_with("k8s.")), "{v:?}");
        let pod = ExecRecord {
            container: Some(ContainerInfo {
                runtime: "containerd",
                id: h.into(),
                name: Some("app".into()),
                k8s: Some(K8s {
                    pod_name: "web-0".into(),
                    namespace: "shop".into(),
                    pod_uid: Some("0d3c".into()),
                    container_name: Some("app".into()),
                }),
                ..Default::default()
            }),
            ..r
        };
        let v = ExecAttributes::default().of(&pod);
        for (k, want) in [
            ("k8s.pod.name", "web-0"),
            ("k8s.namespace.name", "shop"),
            ("k8s.pod.uid", "0d3c"),
            ("k8s.container.name", "app"),
            ("container.name", "app"),
        ] {
            assert!(v.contains(&(k.into(), want.into())), "{k}: {v:?}");
        }
    }

    #[test]
    fn user_pattern_makes_attributes() {
        let a = ExecAttributes::new(Some(r"^ci/(?P<job>[^/]+)/(?P<step>[^/]+)")).unwrap();
        let r = ExecRecord {
            exec: "ci/build-7/test".into(),
            cgroup_id: 9,
            command: Some("make test".into()),
            ..Default::default()
        };
        let v = a.of(&r);
        assert!(v.contains(&("job".into(), "build-7".into())));
        assert!(v.contains(&("step".into(), "test".into())));
        assert!(v.contains(&("profiler.exec.cgroup_id".into(), "9".into())));
        assert!(v.contains(&("process.command_line".into(), "make test".into())));
        assert!(!v.iter().any(|(k, _)| k.starts_with("container.")));
        let quiet = ExecAttributes {
            no_command_line: true,
            ..a
        };
        assert!(
            !quiet
                .of(&r)
                .iter()
                .any(|(k, _)| k == "process.command_line")
        );
        assert!(ExecAttributes::new(Some("(")).is_err());
        assert!(ExecAttributes::new(Some("no-groups")).is_err());
    }

    #[test]
    fn histogram_values_keep_counts_and_sum() {
        let bounds = latency_bounds_s();
        let mut counts = vec![0u64; LAT_BUCKETS];
        counts[3] = 5; // 8..16 us
        counts[9] = 2; // ~0.5..1 ms
        let sum = 5.0 * 10e-6 + 2.0 * 700e-6;
        let vals = histogram_values(&bounds, &counts, sum);
        let total: f64 = vals.iter().map(|(v, n)| v * *n as f64).sum();
        assert!((total - sum).abs() < 1e-12, "{total} vs {sum}");
        for (v, n) in vals {
            let b = bounds.iter().position(|&u| v < u).unwrap_or(bounds.len());
            assert_eq!(counts[b], n, "value {v} in bucket {b}");
        }
    }
}
