//! Many runs: execs grouped by step identity, each step's figures as count, median, p95 and
//! max over its execs (docs/report.md, "Many runs: steps"). Records are folded in one at a
//! time and only a few numbers of each are kept, so a fleet's worth of files fits.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use super::{Breakdown, ExecRecord, State};

/// A figure the steps are compared by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Figure {
    /// Its name in JSON and in `--fail-on`.
    pub key: &'static str,
    pub label: &'static str,
    pub bytes: bool,
    /// The least change that can count as one (timer and allocator noise).
    pub floor: u64,
}

const MS: u64 = 1_000_000;
const KIB: u64 = 1024;

pub const FIGURES: [Figure; 8] = [
    fig("wall", "wall", false, 5 * MS),
    fig("cpu", "on-CPU", false, 5 * MS),
    fig("runq", "run-queue", false, 5 * MS),
    fig("iowait", "IO-wait", false, 5 * MS),
    fig("read", "disk read", true, 256 * KIB),
    fig("write", "disk write", true, 256 * KIB),
    fig("network", "network", true, 64 * KIB),
    fig("memory", "memory peak", true, 4096 * KIB),
];

const fn fig(key: &'static str, label: &'static str, bytes: bool, floor: u64) -> Figure {
    Figure {
        key,
        label,
        bytes,
        floor,
    }
}

/// A figure the record lacks (a host without the memory controller, say).
pub const MISSING: u64 = u64::MAX;

/// What is kept of one exec.
#[derive(Clone, Debug)]
pub struct Sample {
    pub run: u32,
    pub start_unix_ns: u64,
    pub end_unix_ns: u64,
    /// In the order of [`FIGURES`]; [`MISSING`] where the record has none.
    pub figures: [u64; 8],
    pub failed: bool,
    pub oom: bool,
    pub running: bool,
}

impl Sample {
    pub fn of(r: &ExecRecord, run: u32) -> Self {
        // A real value never reads as missing.
        let net = r.sockets().map_or(MISSING, |t| {
            t.rx_bytes.saturating_add(t.tx_bytes).min(MISSING - 1)
        });
        let mem = r.memory_peak().map_or(MISSING, |(v, _)| v.min(MISSING - 1));
        Self {
            run,
            start_unix_ns: r.start_unix_ns,
            end_unix_ns: r.end_unix_ns,
            figures: [
                r.wall_ns,
                r.cpu.on_cpu_ns,
                r.cpu.runq_delay_ns,
                r.cpu.iowait_ns,
                r.disk.read_bytes,
                r.disk.write_bytes,
                net,
                mem,
            ],
            failed: r.failed(),
            oom: r.oom_killed(),
            running: r.state == State::Running,
        }
    }
}

/// One run: a CI pipeline run (the records' `cicd.pipeline.run.id`), else one file.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Run {
    pub id: String,
    pub hosts: BTreeSet<String>,
    pub files: BTreeSet<String>,
    pub start_unix_ns: u64,
    pub end_unix_ns: u64,
    pub execs: u64,
    pub failed: u64,
    pub oom_killed: u64,
    #[serde(skip)]
    pub total: Breakdown,
}

/// Count, median, p95 and max of a figure over a step's execs (nearest rank: each is one
/// exec's value).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Stats {
    pub count: usize,
    pub min: u64,
    pub median: u64,
    pub p95: u64,
    pub max: u64,
}

impl Stats {
    pub fn of(mut v: Vec<u64>) -> Option<Self> {
        if v.is_empty() {
            return None;
        }
        v.sort_unstable();
        let rank = |p: usize| v[(v.len() * p).div_ceil(100).max(1) - 1];
        Some(Self {
            count: v.len(),
            min: v[0],
            median: rank(50),
            p95: rank(95),
            max: v[v.len() - 1],
        })
    }
}

/// One step's figures.
#[derive(Clone, Debug, Serialize)]
pub struct StepSummary {
    pub step: String,
    pub execs: usize,
    pub runs: usize,
    pub failed: usize,
    pub oom_killed: usize,
    pub running: usize,
    /// Figure key -> its statistics (absent where no exec of the step has it).
    pub figures: BTreeMap<&'static str, Stats>,
}

impl StepSummary {
    pub fn get(&self, f: &Figure) -> Option<&Stats> {
        self.figures.get(f.key)
    }
}

/// Execs of many runs, by step.
#[derive(Debug, Default)]
pub struct Steps {
    pub runs: Vec<Run>,
    run_index: HashMap<String, u32>,
    /// Step -> its execs.
    pub steps: BTreeMap<String, Vec<Sample>>,
    pub files: usize,
    pub warnings: Vec<String>,
}

impl Steps {
    /// Fold in one exec's record, read from `file`.
    pub fn add(&mut self, r: &ExecRecord, file: &str) {
        let run_id = match r.ci.as_ref().and_then(|c| c.attr("cicd.pipeline.run.id")) {
            Some(id) => {
                let pipeline = r.ci.as_ref().and_then(|c| c.attr("cicd.pipeline.name"));
                match pipeline {
                    Some(p) => format!("{p} #{id}"),
                    None => format!("run {id}"),
                }
            }
            None => file.to_owned(),
        };
        let runs = &mut self.runs;
        let run = *self.run_index.entry(run_id.clone()).or_insert_with(|| {
            runs.push(Run {
                id: run_id,
                start_unix_ns: u64::MAX,
                ..Default::default()
            });
            (runs.len() - 1) as u32
        });
        let s = Sample::of(r, run);
        let run = &mut self.runs[run as usize];
        run.hosts
            .insert(r.host.clone().unwrap_or_else(|| "unknown".into()));
        if !run.files.contains(file) {
            run.files.insert(file.to_owned());
        }
        run.start_unix_ns = run.start_unix_ns.min(r.start_unix_ns);
        run.end_unix_ns = run.end_unix_ns.max(r.end_unix_ns);
        run.execs += 1;
        run.failed += s.failed as u64;
        run.oom_killed += s.oom as u64;
        run.total += r.breakdown();
        let step = r.step();
        match self.steps.get_mut(step.as_ref()) {
            Some(v) => v.push(s),
            None => {
                self.steps.insert(step.into_owned(), vec![s]);
            }
        }
    }

    pub fn execs(&self) -> usize {
        self.steps.values().map(Vec::len).sum()
    }

    pub fn hosts(&self) -> BTreeSet<&str> {
        self.runs
            .iter()
            .flat_map(|r| r.hosts.iter().map(String::as_str))
            .collect()
    }

    /// The build's task time broken down, over every run.
    pub fn total(&self) -> Breakdown {
        let mut t = Breakdown::default();
        for r in &self.runs {
            t += r.total;
        }
        t
    }

    /// Each step's figures, the steps that took the most wall time in all first.
    pub fn summaries(&self) -> Vec<StepSummary> {
        let mut out: Vec<(u64, StepSummary)> = self
            .steps
            .iter()
            .map(|(step, samples)| {
                let mut figures = BTreeMap::new();
                for (i, f) in FIGURES.iter().enumerate() {
                    let v: Vec<u64> = samples
                        .iter()
                        .map(|s| s.figures[i])
                        .filter(|&v| v != MISSING)
                        .collect();
                    if let Some(st) = Stats::of(v) {
                        figures.insert(f.key, st);
                    }
                }
                let runs: BTreeSet<u32> = samples.iter().map(|s| s.run).collect();
                let wall: u64 = samples
                    .iter()
                    .fold(0u64, |a, s| a.saturating_add(s.figures[0]));
                let summary = StepSummary {
                    step: step.clone(),
                    execs: samples.len(),
                    runs: runs.len(),
                    failed: samples.iter().filter(|s| s.failed).count(),
                    oom_killed: samples.iter().filter(|s| s.oom).count(),
                    running: samples.iter().filter(|s| s.running).count(),
                    figures,
                };
                (wall, summary)
            })
            .collect();
        out.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.step.cmp(&b.1.step)));
        out.into_iter().map(|(_, s)| s).collect()
    }

    /// The run that started last (the one a CI summary is about), and its execs with their
    /// steps, by start.
    pub fn last_run(&self) -> Option<(&Run, Vec<(&str, &Sample)>)> {
        let (i, run) = self
            .runs
            .iter()
            .enumerate()
            .max_by_key(|(_, r)| (r.start_unix_ns, r.id.as_str()))?;
        let mut execs: Vec<(&str, &Sample)> = self
            .steps
            .iter()
            .flat_map(|(step, v)| {
                v.iter()
                    .filter(|s| s.run as usize == i)
                    .map(move |s| (step.as_str(), s))
            })
            .collect();
        execs.sort_by_key(|(step, s)| (s.start_unix_ns, *step));
        Some((run, execs))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::report::{
        Build,
        tests::{cpu, line, with},
    };

    pub(crate) fn steps_of(files: &[(&str, Vec<String>)]) -> Steps {
        let mut s = Steps::default();
        for (name, lines) in files {
            let b = Build::read(lines.join("\n").as_bytes(), name).unwrap();
            for r in &b.records {
                s.add(r, name);
            }
        }
        s
    }

    #[test]
    fn nearest_rank_statistics() {
        assert_eq!(Stats::of(vec![]), None);
        let s = Stats::of(vec![5]).unwrap();
        assert_eq!((s.count, s.min, s.median, s.p95, s.max), (1, 5, 5, 5, 5));
        let s = Stats::of((1..=20).rev().collect()).unwrap();
        assert_eq!((s.median, s.p95, s.max), (10, 19, 20));
        let s = Stats::of(vec![1, 2, 3, 100]).unwrap();
        assert_eq!((s.median, s.p95), (2, 100));
    }

    #[test]
    fn execs_group_by_step_and_runs_by_run_id_else_file() {
        let cc = |id, file: &str, wall| {
            with(
                &line(
                    file,
                    id,
                    "ended",
                    id,
                    wall,
                    &cpu(wall * 1_000_000, 0, 0, wall * 2_000_000),
                ),
                &format!(r#""command":"cc -o /tmp/cc{id}x.o -c main.c""#),
            )
        };
        let ci = |id, run: &str| {
            with(
                &line("j", id, "ended", 0, 10, &cpu(1, 0, 0, 2)),
                &format!(
                    r#""host":"h2","ci":{{"system":"gitlab_ci","attributes":{{"cicd.pipeline.name":"app","cicd.pipeline.run.id":"{run}","cicd.pipeline.task.name":"test"}}}},"command":"make check""#
                ),
            )
        };
        let s = steps_of(&[
            (
                "a.jsonl",
                vec![cc(1, "a", 100), cc(2, "a", 300), ci(3, "7")],
            ),
            ("b.jsonl", vec![cc(1, "b", 200), ci(4, "7"), ci(5, "8")]),
        ]);
        let ids: Vec<&str> = s.runs.iter().map(|r| r.id.as_str()).collect();
        // In the order first seen (each file's records by start).
        assert_eq!(ids, ["app #7", "a.jsonl", "app #8", "b.jsonl"]);
        assert_eq!(s.runs[0].execs, 2);
        assert_eq!(s.runs[0].files.len(), 2, "one CI run over two files");
        assert_eq!(s.runs[0].hosts.iter().collect::<Vec<_>>(), ["h2"]);
        assert_eq!(s.runs[1].hosts.iter().collect::<Vec<_>>(), ["unknown"]);
        let sum = s.summaries();
        let names: Vec<&str> = sum.iter().map(|s| s.step.as_str()).collect();
        // The temp path is normalized away: three execs of one step.
        assert_eq!(names, ["cc -o /tmp/<tmp> -c main.c", "test: make check"]);
        let w = sum[0].get(&FIGURES[0]).unwrap();
        assert_eq!((w.count, w.median, w.max), (3, 200 * MS, 300 * MS));
        assert_eq!((sum[0].execs, sum[0].runs), (3, 2));
        assert_eq!(sum[1].runs, 2);
        // Memory peak is missing from these records: no statistics, not zeros.
        assert!(sum[0].get(&FIGURES[7]).is_none());
        let (run, execs) = s.last_run().unwrap();
        // a.jsonl and b.jsonl both start at +1 s: the later name wins the tie.
        assert_eq!(run.id, "b.jsonl");
        assert_eq!(execs.len(), 1);
    }
}
