//! docs/figures.md is the reference of every figure: these tests keep it from drifting. Every
//! key path the record serializer can emit, every exported metric (with its instrument, unit
//! and point attributes) and every exec attribute must be listed there; `export::spans` and
//! `export::prometheus` check the span attributes and the Prometheus names the same way.
//!
//! The record is made by [`full_record`], which names every field of every struct (no
//! `..Default::default()`): a new field does not compile until it is filled in here, and then
//! it is serialized and must be documented.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::{
    ci::{CiContext, TraceContext},
    export::metrics::{DEFS, Def, EXECS_RUNNING, ExecAttributes, ExecSeries, Kind},
    record::{
        CpuReport, DiskReport, ExecExit, ExecRecord, ExecState, ExitReport, Histogram, IoReport,
        OtherReport, Phases, ProcReport, ProgramReport, TasksReport,
    },
    runtime::{ContainerInfo, K8s},
    sources::cgroup_files::{
        CgroupReport, DiskCrosscheck, PressureReport, PsiReport, Sourced, When,
    },
    sources::net::{Faults, InterfaceReport, NetReport, SampledFaults, SocketsReport, Traffic},
};

pub(crate) const FIGURES: &str = include_str!("../../docs/figures.md");

/// Objects of the record whose keys are data (a file's keys, a CI system's attributes, the
/// user's variables), not fields: the path itself is documented, what is below it is not walked.
const MAPS: &[&str] = &[
    "ci.attributes",
    "ci.env",
    "cgroup.cpu_stat.value",
    "cgroup.io_stat.value",
    "cgroup.memory_stat.value",
    "cgroup.memory_events.value",
    "cgroup.v1_blkio_service_bytes.value",
    "programs[].exits",
    "other_programs.exits",
];

/// The `--ci-env` variable of the full record: its attribute is `profiler.exec.env.NAME`, as
/// figures.md writes it.
const CI_ENV: &str = "NAME";

/// The text under a heading (any level, without its `#`s) up to the next heading of the same
/// or a higher level.
pub(crate) fn section(heading: &str) -> &'static str {
    let mut start = None;
    let mut level = 0;
    let mut offset = 0;
    for line in FIGURES.split_inclusive('\n') {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes > 0 {
            if let Some(s) = start {
                if hashes <= level {
                    return &FIGURES[s..offset];
                }
            } else if line[hashes..].trim() == heading {
                start = Some(offset + line.len());
                level = hashes;
            }
        }
        offset += line.len();
    }
    match start {
        Some(s) => &FIGURES[s..],
        None => panic!("docs/figures.md has no heading {heading:?}"),
    }
}

/// The code spans (text between backticks) of a text.
pub(crate) fn code_spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// The cells of each table row (header and separator rows included), trimmed.
fn rows(text: &str) -> impl Iterator<Item = Vec<&str>> {
    text.lines().filter(|l| l.starts_with('|')).map(|l| {
        l.trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect()
    })
}

/// The cells of the table row whose first cell is `` `first` ``.
pub(crate) fn row<'a>(text: &'a str, first: &str) -> Option<Vec<&'a str>> {
    let want = format!("`{first}`");
    rows(text).find(|cells| cells[0] == want)
}

/// The code spans of the first cell of every table row.
fn key_column(text: &str) -> Vec<&str> {
    rows(text).flat_map(|cells| code_spans(cells[0])).collect()
}

/// Whether a documented key path matches an emitted one: the same keys, where `*` stands for
/// any one key but the last.
fn matches(pattern: &str, path: &str) -> bool {
    let want: Vec<&str> = pattern.split('.').collect();
    let keys: Vec<&str> = path.split('.').collect();
    want.len() == keys.len()
        && want
            .iter()
            .zip(&keys)
            .enumerate()
            .all(|(i, (w, k))| w == k || (*w == "*" && i + 1 < keys.len()))
}

/// Every key path of a serialized record (`a.b`, `a[].b` for the elements of an array), and
/// what stops the walk from seeing every key: a `null` (a field left out of the full record)
/// or an empty array or map.
fn key_paths(v: &Value, path: &str, out: &mut BTreeSet<String>, problems: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if m.is_empty() {
                problems.push(format!("{path}: an empty object"));
            }
            for (k, child) in m {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                out.insert(p.clone());
                if MAPS.contains(&p.as_str()) {
                    if child.as_object().is_none_or(|m| m.is_empty()) {
                        problems.push(format!("{p}: not a map with keys"));
                    }
                } else {
                    key_paths(child, &p, out, problems);
                }
            }
        }
        Value::Array(a) => {
            if a.is_empty() {
                problems.push(format!("{path}: an empty array"));
            }
            for e in a {
                key_paths(e, &format!("{path}[]"), out, problems);
            }
        }
        Value::Null => problems.push(format!("{path}: null (fill it in full_record)")),
        _ => {}
    }
}

fn traffic(n: u64) -> Traffic {
    Traffic {
        rx_bytes: n,
        rx_packets: n,
        tx_bytes: n,
        tx_packets: n,
    }
}

fn sourced<T>(value: T) -> Option<Sourced<T>> {
    Some(Sourced {
        value: Some(value),
        source: "cgroup v2 file".into(),
        when: When::Sample,
        age_ns: Some(1),
        missing: Some("why".into()),
    })
}

fn pressure() -> PressureReport {
    let psi = PsiReport {
        total_s: 1.0,
        avg10: Some(1.0),
        avg60: Some(1.0),
        avg300: Some(1.0),
    };
    PressureReport {
        some: Some(psi),
        full: Some(psi),
    }
}

/// A program's share with every key set.
fn program(name: &str) -> ProgramReport {
    ProgramReport {
        name: name.into(),
        processes: 2,
        running: 1,
        on_cpu_ns: 1,
        runq_delay_ns: 1,
        iowait_ns: 1,
        read_bytes: 1,
        write_bytes: 1,
        storage_read_bytes: 1,
        dirtied_bytes: 1,
        exits: BTreeMap::from([("exit 0".to_owned(), 1)]),
    }
}

/// An exit with every key set (a real one has a code or a signal, not both).
fn every_exit_key() -> ExitReport {
    ExitReport {
        code: Some(3),
        signal: Some("SIGKILL".into()),
        core_dumped: true,
        oom_killed: true,
    }
}

fn histogram() -> Histogram {
    Histogram {
        bounds_ns: vec![0, 2048],
        counts: vec![1, 1],
        sum_ns: 3000,
    }
}

/// A record with every optional key present and every array and map non-empty, of a running
/// exec (so that it has every exported figure) with the CI context `ci`.
pub(crate) fn full_record_with(ci: CiContext) -> ExecRecord {
    // Named field by field, so that a new field of the CI context is not missed either.
    let CiContext {
        system,
        attributes,
        trace,
        env,
    } = ci;
    let TraceContext {
        trace_id,
        span_id,
        sampled,
        tracestate,
    } = trace.expect("a trace context");
    let keyed = BTreeMap::from([("key".to_owned(), 1u64)]);
    let nested = BTreeMap::from([("8:0".to_owned(), keyed.clone())]);
    ExecRecord {
        schema: 1,
        host: "build-7".into(),
        exec: "ci/job-1/step".into(),
        cgroup_id: 42,
        step: "app".into(),
        container: Some(ContainerInfo {
            runtime: "containerd",
            id: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef".into(),
            name: Some("app".into()),
            image: Some("registry/app:1".into()),
            command: Some("/bin/app --serve".into()),
            k8s: Some(K8s {
                pod_name: "web-0".into(),
                namespace: "shop".into(),
                pod_uid: Some("0d3c".into()),
                container_name: Some("app".into()),
            }),
        }),
        command: Some("make -j8".into()),
        exit: Some(ExecExit {
            pid: 7,
            status: every_exit_key(),
        }),
        phases: Some(Phases {
            setup_ns: Some(1),
            run_ns: 1,
            teardown_ns: Some(1),
        }),
        ci: Some(CiContext {
            system,
            attributes,
            trace: Some(TraceContext {
                trace_id,
                span_id,
                sampled,
                tracestate,
            }),
            env,
        }),
        state: ExecState::Running,
        partial: true,
        wall_ns: 1,
        start_unix_ns: 1,
        end_unix_ns: 2,
        live_tasks: 1,
        cpu: CpuReport {
            on_cpu_ns: 2,
            user_ns: 1,
            system_ns: 1,
            runq_delay_ns: 1,
            runq_waits: 1,
            iowait_ns: 1,
            iowait_waits: 1,
            swapin_ns: 1,
            reclaim_ns: 1,
            thrashing_ns: 1,
            voluntary_switches: 1,
            involuntary_switches: 1,
            task_time_ns: 9,
        },
        disk: DiskReport {
            read_bytes: 1,
            write_bytes: 1,
            read_requests: 1,
            write_requests: 1,
            discard_bytes: 1,
            discard_requests: 1,
            flush_requests: 1,
            read_latency: histogram(),
            write_latency: histogram(),
        },
        io: IoReport {
            read_bytes: 1,
            write_bytes: 1,
            read_calls: 1,
            write_calls: 1,
            storage_read_bytes: 1,
            dirtied_bytes: 1,
            cancelled_write_bytes: 1,
        },
        tasks: TasksReport {
            processes_started: 1,
            threads_started: 1,
            execve: 1,
            task_exits: 1,
            process_exits: 1,
        },
        processes: vec![ProcReport {
            pid: 7,
            comm: "cc1".into(),
            args: "cc1 -O2".into(),
            threads: 1,
            ended: true,
            exit: Some(every_exit_key()),
            max_rss_bytes: Some(4096),
            on_cpu_ns: 1,
            runq_delay_ns: 1,
            iowait_ns: 1,
            read_bytes: 1,
            write_bytes: 1,
            storage_read_bytes: 1,
            dirtied_bytes: 1,
        }],
        other_processes: OtherReport {
            processes: 1,
            on_cpu_ns: 1,
            read_bytes: 1,
            write_bytes: 1,
        },
        programs: vec![program("cc1")],
        other_programs: Some(program("3 programs")),
        cgroup: Some(CgroupReport {
            cpu_pressure: sourced(pressure()),
            io_pressure: sourced(pressure()),
            memory_pressure: sourced(pressure()),
            irq_pressure: sourced(pressure()),
            cpu_usage_usec: sourced(1),
            cpu_stat: sourced(keyed.clone()),
            io_stat: sourced(nested.clone()),
            memory_current_bytes: sourced(1),
            memory_peak_bytes: sourced(1),
            memory_stat: sourced(keyed.clone()),
            memory_events: sourced(BTreeMap::from([("oom_kill".to_owned(), 1)])),
            pids_current: sourced(1),
            pids_peak: sourced(1),
            v1_blkio_service_bytes: sourced(nested),
            v1_memory_usage_bytes: sourced(1),
            v1_memory_max_usage_bytes: sourced(1),
            disk_crosscheck: Some(DiskCrosscheck {
                ebpf_read_bytes: 1,
                ebpf_write_bytes: 1,
                io_stat_read_bytes: 1,
                io_stat_write_bytes: 1,
                read_diff_bytes: 0,
                write_diff_bytes: 0,
                io_stat_when: When::Sample,
            }),
        }),
        network: Some(NetReport {
            namespace: "own",
            sockets: Some(SocketsReport {
                all: traffic(2),
                loopback: traffic(1),
            }),
            sockets_missing: Some("why".into()),
            interfaces: vec![InterfaceReport {
                netns: 4026532000,
                name: "eth0".into(),
                ifindex: Some(2),
                loopback: false,
                traffic: traffic(1),
                faults: Some(SampledFaults {
                    faults: Faults {
                        rx_errors: 1,
                        rx_dropped: 1,
                        tx_errors: 1,
                        tx_dropped: 1,
                    },
                    first_sample_ns: 1,
                    last_sample_ns: 2,
                }),
                faults_missing: Some("why"),
            }],
            interfaces_total: Some(traffic(1)),
            interfaces_missing: Some("why".into()),
        }),
        notes: vec!["a note".into()],
    }
}

/// The full record with the first CI system's context.
pub(crate) fn full_record() -> ExecRecord {
    full_record_with(crate::ci::every_context(CI_ENV).remove(0))
}

fn kind(k: Kind) -> &'static str {
    match k {
        Kind::Counter => "counter",
        Kind::Gauge => "gauge",
        Kind::Histogram => "histogram",
    }
}

#[test]
fn docs_figures_md_lists_every_record_key() {
    let json = serde_json::to_value(full_record()).unwrap();
    let mut paths = BTreeSet::new();
    let mut problems = Vec::new();
    key_paths(&json, "", &mut paths, &mut problems);
    assert!(
        problems.is_empty(),
        "the full record does not show every key:\n{}",
        problems.join("\n")
    );
    for m in MAPS {
        assert!(paths.contains(*m), "MAPS names {m}, which the record lacks");
    }
    let keys = key_column(section("The JSON record"));
    let undocumented: Vec<&String> = paths
        .iter()
        .filter(|p| !keys.iter().any(|k| matches(k, p)))
        .collect();
    assert!(
        undocumented.is_empty(),
        "record keys missing from a key column of docs/figures.md, \"The JSON record\": {undocumented:?}"
    );
    let stale: Vec<&&str> = keys
        .iter()
        .filter(|k| !paths.iter().any(|p| matches(k, p)))
        .collect();
    assert!(
        stale.is_empty(),
        "docs/figures.md, \"The JSON record\" lists keys the record does not have: {stale:?}"
    );
}

#[test]
fn docs_figures_md_lists_every_metric_and_attribute() {
    let table = section("Exported metrics");
    let defs: Vec<&Def> = DEFS.iter().chain([&EXECS_RUNNING]).collect();
    for d in &defs {
        let cells = row(table, d.name).unwrap_or_else(|| {
            panic!(
                "docs/figures.md, \"Exported metrics\" has no row for {}",
                d.name
            )
        });
        assert_eq!(
            (cells[1], cells[2]),
            (kind(d.kind), d.unit),
            "instrument and unit of {}",
            d.name
        );
    }
    for (i, cells) in rows(table).enumerate().skip(2) {
        let name = cells[0].trim_matches('`');
        assert!(
            defs.iter().any(|d| d.name == name),
            "docs/figures.md, \"Exported metrics\" row {i} names {name}, which is not exported"
        );
    }
    let attributes = code_spans(section("Attributes"));
    let mut emitted = BTreeSet::new();
    // Running and ended (the outcome is exported at the end), killed by a signal or exited.
    let variants = crate::ci::every_context(CI_ENV).into_iter().flat_map(|ci| {
        let running = full_record_with(ci);
        let mut ended = running.clone();
        ended.state = ExecState::Ended;
        let mut exited = ended.clone();
        if let Some(e) = &mut exited.exit {
            e.status.signal = None;
        }
        [running, ended, exited]
    });
    for r in variants {
        let exec_attrs = ExecAttributes::default().of(&r);
        for (k, _) in &exec_attrs {
            assert!(
                attributes.contains(&k.as_str()),
                "docs/figures.md, \"Attributes\" does not list the exec attribute {k}"
            );
        }
        let s = ExecSeries::of(&r, exec_attrs);
        let own = s
            .points
            .iter()
            .map(|p| (p.metric, &p.attrs))
            .chain(s.hists.iter().map(|h| (h.metric, &h.attrs)));
        for (m, attrs) in own {
            let d = &DEFS[m as usize];
            emitted.insert(d.name);
            let cells = row(table, d.name).unwrap();
            for (k, _) in attrs {
                assert!(
                    code_spans(cells[3]).contains(k),
                    "docs/figures.md, \"Exported metrics\": the row of {} does not name its attribute {k}",
                    d.name
                );
            }
        }
    }
    let never: Vec<&str> = DEFS
        .iter()
        .map(|d| d.name)
        .filter(|n| !emitted.contains(n))
        .collect();
    assert!(
        never.is_empty(),
        "the full record does not export {never:?}"
    );
}

#[test]
fn docs_check_matches_paths_as_documented() {
    assert!(matches("cpu.on_cpu_ns", "cpu.on_cpu_ns"));
    assert!(matches("cgroup.*.source", "cgroup.io_stat.source"));
    assert!(matches(
        "cgroup.*.value.*.avg10",
        "cgroup.cpu_pressure.value.some.avg10"
    ));
    assert!(
        !matches("cgroup.*", "cgroup.io_stat"),
        "* never stands for the last key"
    );
    assert!(!matches("cgroup.*.source", "cgroup.io_stat.value.source"));
    assert_eq!(
        code_spans("a `b` c `d.e` f"),
        ["b", "d.e"],
        "code spans are between backticks"
    );
    assert!(section("Which exec is charged").contains("partial"));
    assert!(!section("The JSON record").contains("## Exported metrics"));
}
