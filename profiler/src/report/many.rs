//! The steps of many runs, and a comparison, for the terminal and as JSON.

use std::fmt::Write as _;

use serde::Serialize;

use super::{
    compare::{FigureDiff, StepDiff, Verdict},
    steps::{FIGURES, Figure, Run, StepSummary, Steps},
};
use crate::render::{bytes, dur, printable, truncate};

/// A figure's value for people.
pub fn value(f: &Figure, v: u64) -> String {
    if f.bytes { bytes(v) } else { dur(v) }
}

/// A moved figure's words, as every rendering shows them.
pub struct Moved {
    pub label: &'static str,
    pub base_median: String,
    pub base_min: String,
    pub base_max: String,
    pub new_median: String,
    /// "+27%", or "from 0".
    pub change: String,
}

impl Moved {
    pub fn of(f: &FigureDiff) -> Self {
        let fig = FIGURES
            .iter()
            .find(|x| x.key == f.figure)
            .expect("a figure of FIGURES");
        Self {
            label: fig.label,
            base_median: value(fig, f.base.median),
            base_min: value(fig, f.base.min),
            base_max: value(fig, f.base.max),
            new_median: value(fig, f.new.median),
            change: f
                .change_pct
                .map_or("from 0".into(), |c| format!("{c:+.0}%")),
        }
    }
}

/// The inputs in one line: runs, hosts, files, execs, steps.
pub fn overview(s: &Steps) -> String {
    let hosts = s.hosts();
    let mut o = format!(
        "{} run(s) on {} host(s) from {} file(s): {} execs of {} steps",
        s.runs.len(),
        hosts.len(),
        s.files,
        s.execs(),
        s.steps.len()
    );
    let failed: u64 = s.runs.iter().map(|r| r.failed).sum();
    let oom: u64 = s.runs.iter().map(|r| r.oom_killed).sum();
    if failed > 0 {
        let _ = write!(o, ", {failed} failed");
    }
    if oom > 0 {
        let _ = write!(o, ", {oom} OOM-killed");
    }
    if !s.warnings.is_empty() {
        let _ = write!(o, " ({} input line(s) skipped)", s.warnings.len());
    }
    o
}

/// The terminal table: one row per step, each figure as median and p95 (the max is in the
/// JSON and the page); a figure no step has (all missing or 0) is left out.
pub fn steps_table(s: &Steps, summaries: &[StepSummary]) -> String {
    let mut o = overview(s);
    o.push_str("\n\n");
    let w = summaries
        .iter()
        .map(|x| printable(&x.step).chars().count())
        .max()
        .unwrap_or(4)
        .clamp(4, 60);
    let shown: Vec<&Figure> = FIGURES
        .iter()
        .filter(|f| {
            summaries
                .iter()
                .any(|x| x.get(f).is_some_and(|st| st.max > 0))
        })
        .collect();
    let _ = write!(
        o,
        "{:<w$} {:>5} {:>5} {:>6}",
        "step", "execs", "runs", "failed"
    );
    for f in &shown {
        let _ = write!(o, "  {:>19}", format!("{} med/p95", f.label));
    }
    o.push('\n');
    for x in summaries {
        let _ = write!(
            o,
            "{:<w$} {:>5} {:>5} {:>6}",
            truncate(&printable(&x.step), w),
            x.execs,
            x.runs,
            failed_cell(x.failed, x.oom_killed)
        );
        for f in &shown {
            let cell = match x.get(f) {
                Some(st) => format!("{}/{}", value(f, st.median), value(f, st.p95)),
                None => "n/a".into(),
            };
            let _ = write!(o, "  {cell:>19}");
        }
        o.push('\n');
    }
    o
}

fn failed_cell(failed: usize, oom: usize) -> String {
    match (failed, oom) {
        (0, 0) => "0".into(),
        (f, 0) => f.to_string(),
        (f, o) => format!("{f} ({o} OOM)"),
    }
}

/// How BASE and NEW compare, for the terminal: the steps that changed, with each moved
/// figure; then the new and gone ones; then how many stayed.
pub fn compare_text(base: &Steps, new: &Steps, diffs: &[StepDiff]) -> String {
    let mut o = format!("BASE: {}\nNEW:  {}\n", overview(base), overview(new));
    let _ = writeln!(
        o,
        "A figure moved when NEW's median lies beyond the range of BASE's execs by more than \
         10% of BASE's median (and more than a floor: 5 ms, 256 KiB of disk, 64 KiB of \
         network, 4 MiB of memory).\n"
    );
    let mut same = 0;
    for d in diffs {
        let name = truncate(&printable(&d.step), 80);
        match d.status {
            "changed" => {
                let _ = writeln!(
                    o,
                    "changed  {name}  ({} execs in BASE, {} in NEW)",
                    d.base_execs, d.new_execs
                );
                for f in d.moved() {
                    let m = Moved::of(f);
                    let _ = writeln!(
                        o,
                        "  {:<11} {:>8}  median {} -> {} ({}; BASE {}..{})",
                        m.label,
                        match f.verdict {
                            Verdict::Heavier => "HEAVIER",
                            _ => "lighter",
                        },
                        m.base_median,
                        m.new_median,
                        m.change,
                        m.base_min,
                        m.base_max,
                    );
                }
                if d.newly_failing() {
                    let _ = writeln!(o, "  failed {} time(s) in NEW, never in BASE", d.new_failed);
                }
                if d.newly_oom_killed() {
                    let _ = writeln!(
                        o,
                        "  OOM-killed {} time(s) in NEW, never in BASE",
                        d.new_oom_killed
                    );
                }
            }
            "new" => {
                let _ = writeln!(o, "new      {name}  ({} execs, only in NEW)", d.new_execs);
            }
            "gone" => {
                let _ = writeln!(o, "gone     {name}  ({} execs, only in BASE)", d.base_execs);
            }
            _ => same += 1,
        }
    }
    let _ = writeln!(o, "{same} step(s) within BASE's spread");
    o
}

/// The JSON document of `--json`.
#[derive(Serialize)]
pub struct StepsDoc<'a> {
    pub runs: &'a [Run],
    pub execs: usize,
    pub skipped_lines: usize,
    pub steps: &'a [StepSummary],
}

#[derive(Serialize)]
pub struct CompareDoc<'a> {
    pub base: StepsDoc<'a>,
    pub new: StepsDoc<'a>,
    /// The rule a figure is flagged by.
    pub margin_pct: u64,
    pub steps: &'a [StepDiff],
}

impl<'a> StepsDoc<'a> {
    pub fn of(s: &'a Steps, summaries: &'a [StepSummary]) -> Self {
        Self {
            runs: &s.runs,
            execs: s.execs(),
            skipped_lines: s.warnings.len(),
            steps: summaries,
        }
    }
}
