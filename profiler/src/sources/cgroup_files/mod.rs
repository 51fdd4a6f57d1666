//! The cgroup files of each exec: pressure (PSI), cpu.stat and, where the controllers are on
//! the v2 hierarchy, io.stat, memory.* and pids.*; on hybrid hosts the v1 counterparts under
//! the same relative path. Descriptors stay open and are read with pread on each sample.
//! Every figure says where it came from, and a missing one says why.

pub mod parse;

use std::{
    collections::BTreeMap,
    fs::File,
    os::unix::fs::FileExt as _,
    path::{Path, PathBuf},
};

use serde::Serialize;

use self::parse::{Pressure, PsiLine};

/// What a file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Pressure,
    FlatKeyed,
    NestedKeyed,
    Single,
    BlkioV1,
}

/// Where a file lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hierarchy {
    V2,
    /// A v1 hierarchy with this controller.
    V1(&'static str),
}

/// The files read per exec: (name, hierarchy, format, v2 controller that provides it).
const FILES: &[(&str, Hierarchy, Format, Option<&str>)] = &[
    ("cpu.pressure", Hierarchy::V2, Format::Pressure, None),
    ("io.pressure", Hierarchy::V2, Format::Pressure, None),
    ("memory.pressure", Hierarchy::V2, Format::Pressure, None),
    ("irq.pressure", Hierarchy::V2, Format::Pressure, None),
    ("cpu.stat", Hierarchy::V2, Format::FlatKeyed, None),
    ("io.stat", Hierarchy::V2, Format::NestedKeyed, Some("io")),
    (
        "memory.current",
        Hierarchy::V2,
        Format::Single,
        Some("memory"),
    ),
    ("memory.peak", Hierarchy::V2, Format::Single, Some("memory")),
    (
        "memory.stat",
        Hierarchy::V2,
        Format::FlatKeyed,
        Some("memory"),
    ),
    (
        "memory.events",
        Hierarchy::V2,
        Format::FlatKeyed,
        Some("memory"),
    ),
    ("pids.current", Hierarchy::V2, Format::Single, Some("pids")),
    ("pids.peak", Hierarchy::V2, Format::Single, Some("pids")),
    (
        "blkio.throttle.io_service_bytes",
        Hierarchy::V1("blkio"),
        Format::BlkioV1,
        None,
    ),
    (
        "memory.usage_in_bytes",
        Hierarchy::V1("memory"),
        Format::Single,
        None,
    ),
    (
        "memory.max_usage_in_bytes",
        Hierarchy::V1("memory"),
        Format::Single,
        None,
    ),
];

/// A parsed file.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Pressure(Pressure),
    Keyed(BTreeMap<String, u64>),
    Nested(BTreeMap<String, BTreeMap<String, u64>>),
    Single(u64),
}

/// One file of one exec.
#[derive(Debug)]
struct Slot {
    name: &'static str,
    hierarchy: Hierarchy,
    format: Format,
    file: Option<File>,
    /// Why there is no value (file absent, or unreadable).
    missing: Option<String>,
    /// The last value read, when (CLOCK_MONOTONIC ns), and whether it was read after the exec
    /// had emptied (a final value).
    last: Option<(Value, u64, bool)>,
}

/// The host's cgroup layout, as far as the files are concerned.
#[derive(Clone, Debug, Default)]
pub struct Layout {
    pub v2_mount: PathBuf,
    /// Controllers on the v2 hierarchy (root cgroup.controllers).
    pub v2_controllers: Vec<String>,
    /// v1 mount points by controller (hybrid hosts).
    pub v1_mounts: BTreeMap<String, PathBuf>,
    /// /proc/pressure exists (PSI is on).
    pub psi: bool,
}

impl Layout {
    pub fn discover(v2_mount: &Path) -> Self {
        let v2_controllers = std::fs::read_to_string(v2_mount.join("cgroup.controllers"))
            .map(|s| s.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default();
        let mut v1_mounts = BTreeMap::new();
        if let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") {
            for line in info.lines() {
                let Some((pre, post)) = line.split_once(" - ") else {
                    continue;
                };
                let mut post = post.split_whitespace();
                if post.next() != Some("cgroup") {
                    continue;
                }
                let opts = post.nth(1).unwrap_or("");
                let Some(mount) = pre.split_whitespace().nth(4) else {
                    continue;
                };
                for c in ["blkio", "memory"] {
                    if opts.split(',').any(|o| o == c) {
                        v1_mounts.insert(c.to_owned(), PathBuf::from(mount));
                    }
                }
            }
        }
        Self {
            v2_mount: v2_mount.to_path_buf(),
            v2_controllers,
            v1_mounts,
            psi: Path::new("/proc/pressure").exists(),
        }
    }
}

/// The cgroup files of one exec.
#[derive(Debug)]
pub struct ExecFiles {
    slots: Vec<Slot>,
}

impl ExecFiles {
    /// Open the files of the exec whose v2 cgroup directory is `dir`.
    pub fn open(layout: &Layout, dir: &Path) -> Self {
        let rel = dir.strip_prefix(&layout.v2_mount).unwrap_or(Path::new(""));
        let gone = !dir.exists();
        let enabled: Vec<String> = std::fs::read_to_string(dir.join("cgroup.controllers"))
            .map(|s| s.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default();
        let psi_off_here = std::fs::read_to_string(dir.join("cgroup.pressure"))
            .map(|s| s.trim() == "0")
            .unwrap_or(false);
        let mut slots = Vec::new();
        for &(name, hierarchy, format, controller) in FILES {
            let path = match hierarchy {
                Hierarchy::V2 => dir.join(name),
                Hierarchy::V1(c) => match layout.v1_mounts.get(c) {
                    Some(m) => m.join(rel).join(name),
                    // Pure v2 host: the v1 counterparts do not apply; leave them out.
                    None => continue,
                },
            };
            let (file, missing) = match File::open(&path) {
                Ok(f) => (Some(f), None),
                Err(_) if gone => {
                    (None, Some("the cgroup was removed before its files could be read (the exec lived less than the sample interval)".into()))
                }
                Err(e) => (None, Some(why_missing(layout, &enabled, psi_off_here, name, hierarchy, controller, rel, &e))),
            };
            slots.push(Slot {
                name,
                hierarchy,
                format,
                file,
                missing,
                last: None,
            });
        }
        Self { slots }
    }

    /// Read every open file (pread at offset 0). A file that can no longer be read (the cgroup
    /// is gone) keeps its last value.
    pub fn sample(&mut self, now_ns: u64) {
        self.read_all(now_ns, false);
    }

    /// Read every file after the exec's last task has gone and before its cgroup is removed:
    /// the values are final.
    pub fn sample_final(&mut self, now_ns: u64) {
        self.read_all(now_ns, true);
    }

    fn read_all(&mut self, now_ns: u64, is_final: bool) {
        let mut buf = vec![0u8; 64 * 1024];
        for s in &mut self.slots {
            let Some(f) = &s.file else { continue };
            let n = match f.read_at(&mut buf, 0) {
                Ok(n) => n,
                Err(_) => {
                    s.file = None; // vanished: the last value stands
                    continue;
                }
            };
            let text = String::from_utf8_lossy(&buf[..n]);
            let parsed = match s.format {
                Format::Pressure => parse::pressure(&text).map(Value::Pressure),
                Format::FlatKeyed => parse::flat_keyed(&text).map(Value::Keyed),
                Format::NestedKeyed => parse::nested_keyed(&text).map(Value::Nested),
                Format::Single => parse::single(&text).map(Value::Single),
                Format::BlkioV1 => parse::blkio_v1(&text).map(Value::Nested),
            };
            match parsed {
                Ok(v) => {
                    s.last = Some((v, now_ns, is_final));
                    s.missing = None;
                }
                Err(e) => s.missing = Some(format!("{} unreadable: {e}", s.name)),
            }
        }
    }

    fn slot(&self, name: &str) -> Option<&Slot> {
        self.slots.iter().find(|s| s.name == name)
    }

    /// The last value of a file, when it was read and whether it is final, or why there is none.
    pub fn get(&self, name: &str) -> Result<(&Value, u64, bool), String> {
        match self.slot(name) {
            None => Err(format!("{name} does not apply on this host")),
            Some(s) => match (&s.last, &s.missing) {
                (Some((v, t, f)), _) => Ok((v, *t, *f)),
                (None, Some(why)) => Err(why.clone()),
                (None, None) => Err(format!(
                    "{name} was never read (the exec ended before the first sample)"
                )),
            },
        }
    }

    /// Where a file's figures come from, for the record.
    pub fn source(&self, name: &str) -> String {
        match self.slot(name).map(|s| s.hierarchy) {
            Some(Hierarchy::V1(c)) => format!("cgroup v1 {c} {name}"),
            _ => format!("cgroup v2 {name}"),
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn why_missing(
    layout: &Layout,
    enabled: &[String],
    psi_off_here: bool,
    name: &str,
    hierarchy: Hierarchy,
    controller: Option<&str>,
    rel: &Path,
    e: &std::io::Error,
) -> String {
    if e.kind() != std::io::ErrorKind::NotFound {
        return format!("{name} cannot be opened: {e}");
    }
    match hierarchy {
        Hierarchy::V1(c) => format!(
            "no {} in the cgroup v1 {c} hierarchy",
            Path::new("/").join(rel).display()
        ),
        Hierarchy::V2 => {
            if name.ends_with(".pressure") {
                if !layout.psi {
                    return "PSI is off in this kernel (CONFIG_PSI or boot with psi=1)".into();
                }
                if psi_off_here {
                    return "PSI is off for this cgroup (cgroup.pressure is 0)".into();
                }
                if name == "irq.pressure" {
                    return "no irq.pressure: the kernel does not track IRQ pressure (CONFIG_IRQ_TIME_ACCOUNTING)".into();
                }
            }
            match controller {
                Some(c) if !layout.v2_controllers.iter().any(|x| x == c) => {
                    format!(
                        "no {name}: the {c} controller is not on the cgroup v2 hierarchy (a hybrid host keeps it on v1)"
                    )
                }
                Some(c) if !enabled.iter().any(|x| x == c) => format!(
                    "no {name}: the {c} controller is not enabled for this cgroup (add +{c} to the parent's cgroup.subtree_control)"
                ),
                _ => format!("no {name} in this cgroup (kernel too old for it?)"),
            }
        }
    }
}

// ------------------------------------------------------------------------------------------
// The record's cgroup section.

/// When a figure of the cgroup files was read.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum When {
    /// At or after the exec's end (the kernel's totals at the cgroup's removal, or a read of
    /// the emptied cgroup).
    Final,
    /// The last periodic read before the end.
    Sample,
    /// Just now, while the exec runs.
    Live,
    /// Never: the figure is missing.
    #[default]
    None,
}

/// A group of figures with its source, or the reason it is missing.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Sourced<T> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<T>,
    pub source: String,
    pub when: When,
    /// For "sample": how long before the end (or now) it was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub age_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing: Option<String>,
}

impl<T> Sourced<T> {
    pub fn missing(source: String, why: String) -> Self {
        Self {
            value: None,
            source,
            when: When::None,
            age_ns: None,
            missing: Some(why),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct PsiReport {
    /// Cumulative stall time in seconds (the kernel's `total=`, a counter).
    pub total_s: f64,
    /// Percentages over 10, 60 and 300 s, from the last sample of the file (none when the exec
    /// ended before its first sample).
    pub avg10: Option<f64>,
    pub avg60: Option<f64>,
    pub avg300: Option<f64>,
}

impl From<PsiLine> for PsiReport {
    fn from(l: PsiLine) -> Self {
        Self {
            total_s: l.total_us as f64 / 1e6,
            avg10: Some(l.avg10),
            avg60: Some(l.avg60),
            avg300: Some(l.avg300),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct PressureReport {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub some: Option<PsiReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub full: Option<PsiReport>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct CgroupReport {
    pub cpu_pressure: Option<Sourced<PressureReport>>,
    pub io_pressure: Option<Sourced<PressureReport>>,
    pub memory_pressure: Option<Sourced<PressureReport>>,
    pub irq_pressure: Option<Sourced<PressureReport>>,
    /// cpu.stat's usage_usec: final when read by eBPF at the cgroup's removal.
    pub cpu_usage_usec: Option<Sourced<u64>>,
    /// cpu.stat: usage_usec, user_usec, system_usec and, with the cpu controller, throttling.
    pub cpu_stat: Option<Sourced<BTreeMap<String, u64>>>,
    /// io.stat per device "maj:min": rbytes, wbytes, rios, wios, dbytes, dios.
    pub io_stat: Option<Sourced<BTreeMap<String, BTreeMap<String, u64>>>>,
    pub memory_current_bytes: Option<Sourced<u64>>,
    pub memory_peak_bytes: Option<Sourced<u64>>,
    pub memory_stat: Option<Sourced<BTreeMap<String, u64>>>,
    pub memory_events: Option<Sourced<BTreeMap<String, u64>>>,
    pub pids_current: Option<Sourced<u64>>,
    pub pids_peak: Option<Sourced<u64>>,
    /// Hybrid hosts: v1 blkio bytes per device (read, write, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub v1_blkio_service_bytes: Option<Sourced<BTreeMap<String, BTreeMap<String, u64>>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub v1_memory_usage_bytes: Option<Sourced<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub v1_memory_max_usage_bytes: Option<Sourced<u64>>,
    /// eBPF block-layer bytes against io.stat, where both exist.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_crosscheck: Option<DiskCrosscheck>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct DiskCrosscheck {
    pub ebpf_read_bytes: u64,
    pub ebpf_write_bytes: u64,
    pub io_stat_read_bytes: u64,
    pub io_stat_write_bytes: u64,
    /// eBPF minus io.stat.
    pub read_diff_bytes: i64,
    pub write_diff_bytes: i64,
    /// When io.stat was read (a sample is not the exec's end).
    pub io_stat_when: When,
}

impl ExecFiles {
    /// The record's cgroup section from the last samples. `end_ns` is the exec's end (or now
    /// for a running exec).
    pub fn report(&self, end_ns: u64, running: bool) -> CgroupReport {
        let sourced = |name: &str| -> Option<Sourced<Value>> {
            let slot = self.slot(name)?;
            let source = self.source(name);
            Some(match self.get(name) {
                Ok((v, t, is_final)) => Sourced {
                    value: Some(v.clone()),
                    source,
                    when: if running {
                        When::Live
                    } else if is_final || t >= end_ns {
                        When::Final
                    } else {
                        When::Sample
                    },
                    age_ns: if running || is_final || t >= end_ns {
                        None
                    } else {
                        Some(end_ns - t)
                    },
                    missing: None,
                },
                Err(why) => {
                    let _ = slot;
                    Sourced::missing(source, why)
                }
            })
        };
        fn map<T>(s: Option<Sourced<Value>>, f: impl Fn(Value) -> Option<T>) -> Option<Sourced<T>> {
            s.map(|s| Sourced {
                value: s.value.and_then(&f),
                source: s.source,
                when: s.when,
                age_ns: s.age_ns,
                missing: s.missing,
            })
        }
        let pressure = |v: Value| match v {
            Value::Pressure(p) => Some(PressureReport {
                some: p.some.map(Into::into),
                full: p.full.map(Into::into),
            }),
            _ => None,
        };
        let keyed = |v: Value| match v {
            Value::Keyed(k) => Some(k),
            _ => None,
        };
        let nested = |v: Value| match v {
            Value::Nested(n) => Some(n),
            _ => None,
        };
        let single = |v: Value| match v {
            Value::Single(x) => Some(x),
            _ => None,
        };
        CgroupReport {
            cpu_pressure: map(sourced("cpu.pressure"), pressure),
            io_pressure: map(sourced("io.pressure"), pressure),
            memory_pressure: map(sourced("memory.pressure"), pressure),
            irq_pressure: map(sourced("irq.pressure"), pressure),
            cpu_usage_usec: map(sourced("cpu.stat"), |v| match v {
                Value::Keyed(k) => k.get("usage_usec").copied(),
                _ => None,
            }),
            cpu_stat: map(sourced("cpu.stat"), keyed),
            io_stat: map(sourced("io.stat"), nested),
            memory_current_bytes: map(sourced("memory.current"), single),
            memory_peak_bytes: map(sourced("memory.peak"), single),
            memory_stat: map(sourced("memory.stat"), keyed),
            memory_events: map(sourced("memory.events"), keyed),
            pids_current: map(sourced("pids.current"), single),
            pids_peak: map(sourced("pids.peak"), single),
            v1_blkio_service_bytes: map(sourced("blkio.throttle.io_service_bytes"), nested),
            v1_memory_usage_bytes: map(sourced("memory.usage_in_bytes"), single),
            v1_memory_max_usage_bytes: map(sourced("memory.max_usage_in_bytes"), single),
            disk_crosscheck: None,
        }
    }
}

/// Names of the kernel's enums, for reading an [`ExecFinalEvent`].
#[derive(Clone, Debug, Default)]
pub struct FinalNames {
    pub psi_states: Vec<(String, u32)>,
    pub memcg_events: Vec<(String, u32)>,
}

const FROM_REMOVAL: &str = "kernel totals read by eBPF at the cgroup's removal";

fn final_of<T>(v: T) -> Sourced<T> {
    Sourced {
        value: Some(v),
        source: FROM_REMOVAL.into(),
        when: When::Final,
        age_ns: None,
        missing: None,
    }
}

impl CgroupReport {
    /// Put the kernel's totals read at the cgroup's removal in place of the last samples.
    pub fn apply_final(
        &mut self,
        f: &profiler_common::ExecFinalEvent,
        names: &FinalNames,
        notes: &mut Vec<String>,
    ) {
        use profiler_common::*;
        if f.flags & FINAL_PSI != 0 {
            let idx = |n: &str| {
                names
                    .psi_states
                    .iter()
                    .find(|(x, _)| x == n)
                    .map(|(_, v)| *v as usize)
            };
            let total = |n: &str| {
                idx(n)
                    .filter(|&i| i < PSI_STATES)
                    .map(|i| f.psi_ns[i] as f64 / 1e9)
            };
            for (slot, some, full) in [
                (&mut self.cpu_pressure, "PSI_CPU_SOME", "PSI_CPU_FULL"),
                (&mut self.io_pressure, "PSI_IO_SOME", "PSI_IO_FULL"),
                (&mut self.memory_pressure, "PSI_MEM_SOME", "PSI_MEM_FULL"),
                (&mut self.irq_pressure, "", "PSI_IRQ_FULL"),
            ] {
                let (ts, tf) = (total(some), total(full));
                if ts.is_none() && tf.is_none() {
                    continue; // this kernel has no such state (irq without IRQ time accounting)
                }
                let old = slot.as_ref().and_then(|s| s.value);
                let merge = |t: Option<f64>, o: Option<PsiReport>| {
                    t.map(|total_s| PsiReport {
                        total_s,
                        avg10: o.and_then(|o| o.avg10),
                        avg60: o.and_then(|o| o.avg60),
                        avg300: o.and_then(|o| o.avg300),
                    })
                };
                let value = PressureReport {
                    some: merge(ts, old.and_then(|o| o.some)),
                    full: merge(tf, old.and_then(|o| o.full)),
                };
                *slot = Some(final_of(value));
            }
            if f.flags & FINAL_PSI_ACTIVE != 0 {
                notes.push("a pressure state was still active at the cgroup's removal: PSI totals may lack its last moments".into());
            }
        }
        if f.flags & (FINAL_PSI | FINAL_CPU) != 0 && f.flags & FINAL_CPU_UNKNOWN != 0 {
            notes.push("some CPU's per-cpu area is unknown (CPU hot-plugged since attach?): its part of the final PSI and cpu usage is missing".into());
        }
        if f.flags & FINAL_CPU != 0 {
            self.cpu_usage_usec = Some(final_of(f.cpu_usage_ns / 1000));
        }
        if f.flags & FINAL_MEMORY != 0 {
            self.memory_peak_bytes = Some(final_of(f.memory_peak_pages * 4096));
            let mut events = BTreeMap::new();
            for (name, idx) in &names.memcg_events {
                let Some(n) = name.strip_prefix("MEMCG_") else {
                    continue;
                };
                // memory.events shows these; the swap ones are in memory.swap.events.
                if ["LOW", "HIGH", "MAX", "OOM", "OOM_KILL", "OOM_GROUP_KILL"].contains(&n)
                    && (*idx as usize) < MEMCG_EVENTS
                {
                    events.insert(n.to_ascii_lowercase(), f.memory_events[*idx as usize]);
                }
            }
            self.memory_events = Some(final_of(events));
        }
        if f.flags & FINAL_PIDS != 0 {
            self.pids_peak = Some(final_of(f.pids_peak));
        }
    }

    /// Compare eBPF block-layer bytes with io.stat (summed over devices), where io.stat exists.
    pub fn crosscheck(&mut self, ebpf_read: u64, ebpf_write: u64) {
        let Some(io) = &self.io_stat else { return };
        let Some(devs) = &io.value else { return };
        let sum = |k: &str| {
            devs.values()
                .map(|d| d.get(k).copied().unwrap_or(0))
                .sum::<u64>()
        };
        let (r, w) = (sum("rbytes"), sum("wbytes"));
        self.disk_crosscheck = Some(DiskCrosscheck {
            ebpf_read_bytes: ebpf_read,
            ebpf_write_bytes: ebpf_write,
            io_stat_read_bytes: r,
            io_stat_write_bytes: w,
            read_diff_bytes: ebpf_read as i64 - r as i64,
            write_diff_bytes: ebpf_write as i64 - w as i64,
            io_stat_when: io.when,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_controller_files_say_why() {
        let dir = std::env::temp_dir().join(format!("profiler-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cgroup.controllers"), "cpu pids\n").unwrap();
        std::fs::write(
            dir.join("cpu.stat"),
            "usage_usec 5\nuser_usec 3\nsystem_usec 2\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("cpu.pressure"),
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=7\n",
        )
        .unwrap();
        let layout = Layout {
            v2_mount: dir.clone(),
            v2_controllers: vec!["cpu".into(), "io".into(), "memory".into(), "pids".into()],
            v1_mounts: BTreeMap::new(),
            psi: true,
        };
        let mut f = ExecFiles::open(&layout, &dir);
        f.sample(100);
        let r = f.report(50, false);
        assert_eq!(
            r.cpu_stat.as_ref().unwrap().value.as_ref().unwrap()["usage_usec"],
            5
        );
        assert_eq!(r.cpu_stat.as_ref().unwrap().when, When::Final);
        assert_eq!(
            r.cpu_pressure
                .as_ref()
                .unwrap()
                .value
                .unwrap()
                .some
                .unwrap()
                .total_s,
            7e-6
        );
        let io = r.io_stat.unwrap();
        assert!(io.value.is_none());
        assert!(
            io.missing.unwrap().contains("io controller is not enabled"),
            "never a silent zero"
        );
        let hybrid = Layout {
            v2_controllers: vec!["hugetlb".into()],
            ..layout
        };
        let f = ExecFiles::open(&hybrid, &dir);
        let r = f.report(0, false);
        assert!(
            r.memory_peak_bytes
                .unwrap()
                .missing
                .unwrap()
                .contains("not on the cgroup v2 hierarchy")
        );
        assert!(
            r.irq_pressure
                .unwrap()
                .missing
                .unwrap()
                .contains("IRQ pressure")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
