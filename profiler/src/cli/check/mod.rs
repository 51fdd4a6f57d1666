//! `profiler check`: what this host allows, one line per feature, each `ok`, `degraded` (what
//! is lost) or `missing` (how to fix); exit 0 when `attach` can run. It only reads: nothing is
//! loaded, turned on or created, as it runs before each start (ExecStartPre, an image's default
//! command) and must be quick.

use std::{
    fs,
    io::Write as _,
    path::{Path, PathBuf},
};

use anyhow::Result;
use clap::Args;

mod cgroups;

use self::cgroups::{cgroup_line, pressure_line, v1_controllers, watched_lines};
use super::RuntimeArgs;
use crate::{
    cgroup::Hierarchy,
    host,
    kernel_layout::{DEFAULT_BTF, KernelBtf},
    runtime::{Connected, Resolver, RuntimeKind, RuntimeSettings},
    sources,
};

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The cgroup v2 directory that attach would watch (absolute, or relative to the v2
    /// mount): checked to exist, and for the controllers its execs get.
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<String>,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    /// Kernel BTF to read struct layouts and attach points from.
    #[arg(long, default_value = DEFAULT_BTF, value_name = "FILE")]
    pub btf: String,
    /// Check as for `attach --bpf-stats`: the kernel's BPF statistics must then be turned on.
    #[arg(long)]
    pub bpf_stats: bool,
    /// Read the options from attach's TOML file (the keys that check also takes).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Ok,
    /// attach runs, with less.
    Degraded,
    /// attach cannot run.
    Missing,
}

impl Status {
    fn word(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Degraded => "degraded",
            Status::Missing => "missing",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Line {
    feature: String,
    status: Status,
    detail: String,
}

fn line(feature: &str, status: Status, detail: impl Into<String>) -> Line {
    Line {
        feature: feature.to_owned(),
        status,
        detail: detail.into(),
    }
}

/// The table, its columns aligned.
fn render(lines: &[Line]) -> String {
    let width = lines.iter().map(|l| l.feature.len()).max().unwrap_or(0) + 2;
    let mut out = String::new();
    for l in lines {
        // Details are one line each, whatever an error message held.
        let detail = l.detail.split_whitespace().collect::<Vec<_>>().join(" ");
        out.push_str(&format!(
            "{:<width$}{:<10}{detail}\n",
            l.feature,
            l.status.word()
        ));
    }
    out
}

/// 0 when attach can run (possibly degraded), 1 when something it needs is missing.
fn exit_code(lines: &[Line]) -> i32 {
    i32::from(lines.iter().any(|l| l.status == Status::Missing))
}

pub(crate) async fn check(args: CheckArgs) -> Result<i32> {
    let lines = lines(&args);
    let mut out = std::io::stdout().lock();
    // A closed stdout is no reason to fail: the exit code still says it.
    let _ = out.write_all(render(&lines).as_bytes());
    let _ = out.flush();
    Ok(exit_code(&lines))
}

fn lines(args: &CheckArgs) -> Vec<Line> {
    let release = host::kernel_release();
    let caps = host::effective_caps();
    let sys_admin = caps.is_some_and(|v| v & (1 << host::CAP_SYS_ADMIN) != 0);
    let mut v = vec![kernel_line(&release)];
    v.extend(btf_lines(&args.btf, &release));
    let layout = Hierarchy::find();
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    v.push(match &layout {
        Ok(h) => cgroup_line(&h.mount, &h.controllers(), &v1_controllers(&mountinfo)),
        Err(e) => line("cgroup v2", Status::Missing, format!("{e:#}")),
    });
    v.push(pressure_line(Path::new("/proc/pressure/cpu").exists()));
    // The runtime before the watched cgroup: it names the cgroup when --cgroup does not.
    let h = layout.as_ref().ok().cloned().unwrap_or(Hierarchy {
        mount: PathBuf::from("/sys/fs/cgroup"),
    });
    let (runtime_lines, connected) = runtime_lines(&args.runtime, &h);
    if let Ok(h) = &layout {
        v.extend(watched_lines(h, args.cgroup.as_deref(), connected.as_ref()));
    }
    v.extend(cap_lines(caps));
    let knob = |f: &str| fs::read_to_string(f).ok();
    v.push(delayacct_line(
        knob("/proc/sys/kernel/task_delayacct").as_deref(),
        sys_admin,
    ));
    v.push(bpf_stats_line(
        knob("/proc/sys/kernel/bpf_stats_enabled").as_deref(),
        sys_admin,
        args.bpf_stats,
    ));
    v.extend(runtime_lines);
    v
}

// ------------------------------------------------------------------------------------------
// The kernel

/// The leading numbers of a version ("6.18.44-fc" gives [6, 18, 44]).
fn version(s: &str) -> Vec<u32> {
    let end = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    s[..end].split('.').map_while(|p| p.parse().ok()).collect()
}

/// The oldest Linux that has all that attach needs, and what needs it.
fn kernel_needed() -> (&'static str, &'static str) {
    sources::programs()
        .filter(|p| p.stage != sources::Stage::Interfaces)
        .map(|p| (p.since, p.name))
        .chain([(sources::ITERATORS_SINCE, "task iterators")])
        .max_by_key(|(since, _)| version(since))
        .unwrap_or(("0", ""))
}

fn kernel_line(release: &str) -> Line {
    let (since, what) = kernel_needed();
    let have = version(release);
    if have.len() < 2 {
        return line(
            "kernel",
            Status::Ok,
            format!("Linux {release} (version not understood; the programs need {since} or later)"),
        );
    }
    if have < version(since) {
        return line(
            "kernel",
            Status::Missing,
            format!("Linux {release}: the programs need {since} or later ({what}); upgrade it"),
        );
    }
    line(
        "kernel",
        Status::Ok,
        format!("Linux {release} (the programs need {since} or later)"),
    )
}

/// BTF, the tracepoints and program types it shows, and the struct layout the programs read.
fn btf_lines(path: &str, release: &str) -> Vec<Line> {
    let btf = match KernelBtf::open(path) {
        Ok(b) => b,
        Err(e) => {
            let why = "not checked without the kernel's BTF (see btf)";
            return vec![
                line("btf", Status::Missing, format!("{e:#}")),
                line("tracepoints", Status::Missing, why),
                line("program types", Status::Missing, why),
                line("kernel layout", Status::Missing, why),
            ];
        }
    };
    let mut v = vec![line("btf", Status::Ok, path)];
    let optional: Vec<&str> = sources::programs()
        .filter(|p| p.stage == sources::Stage::Interfaces && !btf.has_tracepoint(p.name))
        .map(|p| p.name)
        .collect();
    v.push(tracepoints_line(btf.preflight(release), &optional));
    v.push(program_types_line(
        btf.has_func("bpf_iter_task"),
        btf.field("bpf_ringbuf", "mask").is_some(),
        btf.field("cgroup", "bpf").is_some() && btf.field("bpf_cgroup_link", "cgroup").is_some(),
    ));
    v.push(match btf.layout() {
        Err(e) => line("kernel layout", Status::Missing, format!("{e:#}")),
        Ok(l) => {
            let mut lost: Vec<String> = l.missing.clone();
            if let Err(why) = &l.net {
                lost.push(format!("interface counters ({why})"));
            }
            if lost.is_empty() {
                line(
                    "kernel layout",
                    Status::Ok,
                    "every kernel struct field the programs read was found in BTF",
                )
            } else {
                line(
                    "kernel layout",
                    Status::Degraded,
                    format!(
                        "lacks {}: the figures that need them are zero",
                        lost.join("; ")
                    ),
                )
            }
        }
    });
    v
}

fn tracepoints_line(preflight: Result<bool>, optional_missing: &[&str]) -> Line {
    let fallback = match preflight {
        Err(e) => return line("tracepoints", Status::Missing, format!("{e:#}")),
        Ok(f) => f,
    };
    let mut lost = Vec::new();
    if fallback {
        lost.push(format!(
            "no {} (Linux {}+): block requests are tied to their exec at {} and counted from \
             their first issue",
            sources::block::START.name,
            sources::block::START.since,
            sources::block::START_FALLBACK
        ));
    }
    if !optional_missing.is_empty() {
        lost.push(format!(
            "no {}: no per-exec interface traffic",
            optional_missing.join(", ")
        ));
    }
    if lost.is_empty() {
        let n = sources::programs().count() + 1;
        line(
            "tracepoints",
            Status::Ok,
            format!("all {n} BTF tracepoints the programs attach to (tp_btf)"),
        )
    } else {
        line("tracepoints", Status::Degraded, lost.join("; "))
    }
}

fn program_types_line(iterators: bool, ringbuf: bool, cgroup_links: bool) -> Line {
    if !iterators || !ringbuf {
        let what: Vec<&str> = [(iterators, "task iterators"), (ringbuf, "BPF ring buffer")]
            .iter()
            .filter(|(has, _)| !has)
            .map(|(_, w)| *w)
            .collect();
        return line(
            "program types",
            Status::Missing,
            format!(
                "no {} (Linux {}+); upgrade the kernel",
                what.join(" or "),
                sources::ITERATORS_SINCE
            ),
        );
    }
    if !cgroup_links {
        return line(
            "program types",
            Status::Degraded,
            format!(
                "no cgroup_skb links (CONFIG_CGROUP_BPF, Linux {}+): no per-exec socket traffic",
                sources::net::SOCKET_PROGRAMS_SINCE
            ),
        );
    }
    line(
        "program types",
        Status::Ok,
        "tp_btf, task iterators, ring buffer, cgroup_skb links",
    )
}

// ------------------------------------------------------------------------------------------
// Privileges

/// A capability and what the profiler does with it (as measured on Linux 6.18, as root with
/// a reduced bounding set).
#[derive(Clone, Copy)]
struct Cap {
    bit: u32,
    name: &'static str,
    /// Capabilities that stand in for it.
    or: &'static [u32],
    /// attach cannot run without it.
    required: bool,
    /// What it is used for.
    used_for: &'static str,
    /// What is lost without it.
    lost: &'static str,
}

const CAPS: &[Cap] = &[
    Cap {
        bit: host::CAP_BPF,
        name: "CAP_BPF",
        or: &[host::CAP_SYS_ADMIN],
        required: true,
        used_for: "create the maps, load the programs",
        lost: "cannot create the maps",
    },
    Cap {
        bit: host::CAP_PERFMON,
        name: "CAP_PERFMON",
        or: &[host::CAP_SYS_ADMIN],
        required: true,
        used_for: "load the tracing programs (tp_btf, iterators) that read kernel memory",
        lost: "cannot load the tracing programs",
    },
    Cap {
        bit: host::CAP_NET_ADMIN,
        name: "CAP_NET_ADMIN",
        or: &[host::CAP_SYS_ADMIN],
        required: false,
        used_for: "link the socket counters (cgroup_skb) to the watched cgroup",
        lost: "no per-exec socket traffic",
    },
    Cap {
        bit: host::CAP_SYS_ADMIN,
        name: "CAP_SYS_ADMIN",
        or: &[],
        required: false,
        used_for: "turn on kernel.task_delayacct and BPF statistics (--bpf-stats)",
        // What that costs is said by the delay accounting and bpf_stats lines.
        lost: "",
    },
    Cap {
        bit: host::CAP_SYS_PTRACE,
        name: "CAP_SYS_PTRACE",
        or: &[],
        required: false,
        used_for: "follow /proc/PID/ns/net of the execs' processes",
        lost: "no error and drop figures for the interfaces of execs in network namespaces \
               of their own",
    },
    Cap {
        bit: host::CAP_DAC_READ_SEARCH,
        name: "CAP_DAC_READ_SEARCH",
        or: &[host::CAP_DAC_OVERRIDE],
        required: false,
        used_for: "read /proc/PID/environ of other users' processes (CI context)",
        lost: "no CI context (CI step, trace) for execs run by other users",
    },
];

/// One line per capability: held, or what is lost without it.
fn cap_lines(caps: Option<u64>) -> Vec<Line> {
    CAPS.iter()
        .map(|c| {
            let Some(v) = caps else {
                return line(
                    c.name,
                    Status::Missing,
                    "unknown: /proc/self/status has no CapEff; mount /proc",
                );
            };
            let has = |b: u32| v & (1 << b) != 0;
            if has(c.bit) {
                line(c.name, Status::Ok, format!("held: {}", c.used_for))
            } else if let Some(&b) = c.or.iter().find(|&&b| has(b)) {
                let by = CAPS
                    .iter()
                    .find(|x| x.bit == b)
                    .map_or("CAP_DAC_OVERRIDE", |x| x.name);
                line(
                    c.name,
                    Status::Ok,
                    format!("not held, {by} stands in for it: {}", c.used_for),
                )
            } else if c.lost.is_empty() {
                line(
                    c.name,
                    Status::Ok,
                    format!("not held, not needed ({}: see below)", c.used_for),
                )
            } else if c.required {
                line(
                    c.name,
                    Status::Missing,
                    format!(
                        "not held: {}; grant CAP_BPF and CAP_PERFMON (systemd: \
                         CapabilityBoundingSet=, and AmbientCapabilities= for a non-root User=)",
                        c.lost
                    ),
                )
            } else {
                line(c.name, Status::Degraded, format!("not held: {}", c.lost))
            }
        })
        .collect()
}

// ------------------------------------------------------------------------------------------
// Kernel knobs: read here, set by attach.

fn delayacct_line(knob: Option<&str>, sys_admin: bool) -> Line {
    let name = "delay accounting";
    match knob.map(str::trim) {
        None => line(
            name,
            Status::Degraded,
            "kernel without CONFIG_TASK_DELAY_ACCT: no IO-wait or memory-stall figures",
        ),
        Some("1") => line(name, Status::Ok, "kernel.task_delayacct is on"),
        Some(_) if sys_admin => line(
            name,
            Status::Ok,
            "kernel.task_delayacct is off: attach turns it on (tasks started before have no \
             IO-wait or memory-stall figures)",
        ),
        Some(_) => line(
            name,
            Status::Degraded,
            "kernel.task_delayacct is off and attach cannot turn it on without CAP_SYS_ADMIN: \
             no IO-wait or memory-stall figures; run `sysctl kernel.task_delayacct=1` first",
        ),
    }
}

fn bpf_stats_line(knob: Option<&str>, sys_admin: bool, wanted: bool) -> Line {
    let name = "bpf_stats";
    let since = sources::BPF_STATS_SINCE;
    match (knob.map(str::trim), sys_admin, wanted) {
        (None, _, true) => line(
            name,
            Status::Missing,
            format!("no kernel.bpf_stats_enabled (Linux {since}+): drop --bpf-stats"),
        ),
        // BPF_ENABLE_STATS takes CAP_SYS_ADMIN, whether the sysctl is on or not.
        (Some(_), false, true) => line(
            name,
            Status::Missing,
            "--bpf-stats needs CAP_SYS_ADMIN to turn the kernel's BPF statistics on: grant it, \
             or drop --bpf-stats",
        ),
        (None, _, false) => line(
            name,
            Status::Degraded,
            format!("no kernel.bpf_stats_enabled (Linux {since}+): --bpf-stats cannot work"),
        ),
        (Some("1"), _, _) => line(
            name,
            Status::Ok,
            "kernel.bpf_stats_enabled is on: program costs are counted",
        ),
        (Some(_), true, _) => line(
            name,
            Status::Ok,
            "off: --bpf-stats turns the kernel's BPF statistics on while attach runs",
        ),
        (Some(_), false, false) => line(
            name,
            Status::Degraded,
            "off, and --bpf-stats cannot turn it on without CAP_SYS_ADMIN: no program costs",
        ),
    }
}

// ------------------------------------------------------------------------------------------
// Container runtimes

/// The runtime named with --runtime (missing when it does not answer: attach would fail), and
/// which runtimes answer here (their execs get named).
fn runtime_lines(args: &RuntimeArgs, h: &Hierarchy) -> (Vec<Line>, Option<Connected>) {
    let mut v = Vec::new();
    let mut connected = None;
    let named = args.settings().runtime;
    if let Some(kind) = named {
        let name = format!("runtime {}", kind.name());
        match Resolver::start(&args.settings(), h).map(|(_, c)| c.into_iter().next()) {
            Ok(Some(c)) => {
                v.push(line(&name, Status::Ok, c.describe.clone()));
                connected = Some(c);
            }
            Ok(None) => v.push(line(&name, Status::Ok, "found")),
            Err(e) => v.push(line(&name, Status::Missing, format!("{e:#}"))),
        }
    }
    let (mut found, mut absent) = (Vec::new(), Vec::new());
    for kind in [
        RuntimeKind::Docker,
        RuntimeKind::Podman,
        RuntimeKind::Containerd,
    ] {
        let same = |k: RuntimeKind| match k {
            RuntimeKind::Buildkit => RuntimeKind::Docker,
            k => k,
        };
        if named.map(same) == Some(kind) {
            continue;
        }
        let settings = RuntimeSettings {
            runtime: Some(kind),
            ..Default::default()
        };
        match Resolver::start(&settings, h).map(|(_, c)| c.into_iter().next()) {
            Ok(Some(c)) => found.push(c.describe),
            _ => absent.push(kind.name()),
        }
    }
    let detail = match (found.is_empty(), absent.is_empty()) {
        (true, _) => format!(
            "none answers ({}): execs are named by their cgroup only",
            absent.join(", ")
        ),
        (false, true) => found.join("; "),
        (false, false) => format!("{}; not found: {}", found.join("; "), absent.join(", ")),
    };
    v.push(line("runtimes", Status::Ok, detail));
    (v, connected)
}

#[cfg(test)]
mod tests {
    use super::{cgroups::controllers_line, *};

    #[test]
    fn capabilities_from_status() {
        let status = "Name:\tprofiler\nCapInh:\t0000000000000000\nCapPrm:\t000001fffeffffff\n\
                      CapEff:\t000000c000000000\nCapBnd:\t000001fffeffffff\n";
        let eff = host::cap_eff(status).unwrap();
        assert_eq!(eff, (1 << 39) | (1 << 38));
        let lines = cap_lines(Some(eff));
        let status_of =
            |lines: &[Line], n: &str| lines.iter().find(|l| l.feature == n).unwrap().status;
        assert_eq!(status_of(&lines, "CAP_BPF"), Status::Ok);
        assert_eq!(status_of(&lines, "CAP_PERFMON"), Status::Ok);
        assert_eq!(status_of(&lines, "CAP_SYS_ADMIN"), Status::Ok);
        assert_eq!(status_of(&lines, "CAP_NET_ADMIN"), Status::Degraded);
        assert_eq!(exit_code(&lines), 0);
        // CAP_SYS_ADMIN stands in for CAP_BPF and CAP_PERFMON; CAP_DAC_OVERRIDE for
        // CAP_DAC_READ_SEARCH.
        let admin = cap_lines(Some(
            (1 << host::CAP_SYS_ADMIN) | (1 << host::CAP_DAC_OVERRIDE),
        ));
        assert_eq!(exit_code(&admin), 0);
        assert!(
            admin[0].detail.contains("CAP_SYS_ADMIN stands in"),
            "{:?}",
            admin[0]
        );
        assert_eq!(status_of(&admin, "CAP_DAC_READ_SEARCH"), Status::Ok);
        assert_eq!(status_of(&admin, "CAP_NET_ADMIN"), Status::Ok);
        let none = cap_lines(host::cap_eff("CapEff:\t0000000000000000\n"));
        assert_eq!(exit_code(&none), 1);
        assert_eq!(none[0].feature, "CAP_BPF");
        assert!(none[0].detail.starts_with("not held"), "{:?}", none[0]);
        assert_eq!(host::cap_eff("CapEff: zz\n"), None);
        assert_eq!(exit_code(&cap_lines(None)), 1);
    }

    #[test]
    fn table_is_aligned_one_line_each() {
        let t = render(&[
            line("kernel", Status::Ok, "Linux 6.18"),
            line(
                "CAP_DAC_READ_SEARCH",
                Status::Degraded,
                "not held:\n  two lines",
            ),
        ]);
        assert_eq!(
            t,
            "kernel               ok        Linux 6.18\n\
             CAP_DAC_READ_SEARCH  degraded  not held: two lines\n"
        );
    }

    #[test]
    fn kernel_versions() {
        assert_eq!(version("6.18.44-fc-v1300"), [6, 18, 44]);
        assert_eq!(version("5.4.0-150-generic"), [5, 4, 0]);
        assert_eq!(version("2.6.32"), [2, 6, 32]);
        assert_eq!(kernel_needed(), ("5.18", "sched_switch"));
        assert_eq!(kernel_line("6.1.0-13-amd64").status, Status::Ok);
        assert_eq!(kernel_line("5.18").status, Status::Ok);
        let old = kernel_line("5.15.0-91-generic");
        assert_eq!(old.status, Status::Missing);
        assert!(old.detail.contains("5.18 or later"), "{old:?}");
        assert_eq!(kernel_line("weird").status, Status::Ok);
    }

    #[test]
    fn cgroup_layouts() {
        let hybrid_info = "\
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
        let v1 = v1_controllers(hybrid_info);
        assert_eq!(v1, ["cpu", "memory", "blkio"]);
        let h = cgroup_line(
            Path::new("/sys/fs/cgroup/unified"),
            &["hugetlb".to_owned()],
            &v1,
        );
        assert_eq!(h.status, Status::Degraded);
        assert!(
            h.detail
                .starts_with("hybrid: v2 at /sys/fs/cgroup/unified, controllers cpu, io, memory are on v1: no cpu.stat throttling, io.stat, memory.*, pids.* per exec"),
            "{h:?}"
        );
        let all: Vec<String> = ["cpuset", "cpu", "io", "memory", "pids"]
            .map(String::from)
            .to_vec();
        let pure = cgroup_line(Path::new("/sys/fs/cgroup"), &all, &[]);
        assert_eq!(pure.status, Status::Ok, "{pure:?}");
        let no_io = cgroup_line(Path::new("/sys/fs/cgroup"), &all[..2], &[]);
        assert_eq!(no_io.status, Status::Degraded);
        assert!(
            no_io.detail.contains("lacks the io, memory, pids"),
            "{no_io:?}"
        );
    }

    #[test]
    fn exec_controllers() {
        let all: Vec<String> = ["cpu", "io", "memory", "pids"].map(String::from).to_vec();
        let dir = Path::new("/sys/fs/cgroup/ci");
        assert_eq!(controllers_line(dir, &all, &all).status, Status::Ok);
        let l = controllers_line(dir, &all, &all[..1]);
        assert_eq!(l.status, Status::Degraded);
        assert!(
            l.detail.ends_with(
                "enable with: echo '+io +memory +pids' > /sys/fs/cgroup/ci/cgroup.subtree_control"
            ),
            "{l:?}"
        );
        assert_eq!(controllers_line(dir, &[], &[]).status, Status::Ok);
    }

    #[test]
    fn knobs() {
        assert_eq!(delayacct_line(Some("1\n"), false).status, Status::Ok);
        assert_eq!(delayacct_line(Some("0\n"), true).status, Status::Ok);
        assert_eq!(delayacct_line(Some("0\n"), false).status, Status::Degraded);
        assert_eq!(delayacct_line(None, true).status, Status::Degraded);
        assert_eq!(bpf_stats_line(Some("0"), true, true).status, Status::Ok);
        assert_eq!(
            bpf_stats_line(Some("0"), false, false).status,
            Status::Degraded
        );
        assert_eq!(
            bpf_stats_line(Some("0"), false, true).status,
            Status::Missing
        );
        assert_eq!(bpf_stats_line(Some("1"), false, false).status, Status::Ok);
        assert_eq!(
            bpf_stats_line(Some("1"), false, true).status,
            Status::Missing
        );
        assert_eq!(bpf_stats_line(None, true, true).status, Status::Missing);
    }

    #[test]
    fn program_types_and_tracepoints() {
        assert_eq!(program_types_line(true, true, true).status, Status::Ok);
        assert_eq!(
            program_types_line(true, true, false).status,
            Status::Degraded
        );
        assert_eq!(
            program_types_line(false, true, true).status,
            Status::Missing
        );
        assert_eq!(tracepoints_line(Ok(false), &[]).status, Status::Ok);
        let l = tracepoints_line(Ok(true), &["net_dev_xmit"]);
        assert_eq!(l.status, Status::Degraded);
        assert!(l.detail.contains("block_getrq") && l.detail.contains("net_dev_xmit"));
        let l = tracepoints_line(
            Err(anyhow::anyhow!("kernel 5.4 lacks the tracepoint x")),
            &[],
        );
        assert_eq!(l.status, Status::Missing);
    }
}
