//! `report --compare BASE... -- NEW...`: each step's figures in NEW against BASE, flagged
//! where they moved beyond the spread BASE saw (docs/report.md, "Comparing runs").

use std::collections::BTreeMap;

use anyhow::{Result, bail};
use serde::Serialize;

use super::steps::{FIGURES, Figure, Stats, StepSummary};

/// Where a step's figure in NEW stands against BASE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// NEW's median above everything BASE saw, by more than the margin.
    Heavier,
    Lighter,
    /// Within BASE's spread (and the margin).
    Same,
}

/// The margin beyond BASE's spread: 10 % of BASE's median, and at least the figure's floor.
pub const MARGIN_PCT: u64 = 10;

#[derive(Clone, Debug, Serialize)]
pub struct FigureDiff {
    pub figure: &'static str,
    pub base: Stats,
    pub new: Stats,
    /// NEW's median against BASE's, in percent (absent when BASE's is 0).
    pub change_pct: Option<f64>,
    pub verdict: Verdict,
}

impl FigureDiff {
    fn of(f: &Figure, base: Stats, new: Stats) -> Self {
        let margin = (base.median / 100 * MARGIN_PCT).max(f.floor);
        let verdict = if new.median > base.max.saturating_add(margin) {
            Verdict::Heavier
        } else if new.median.saturating_add(margin) < base.min {
            Verdict::Lighter
        } else {
            Verdict::Same
        };
        let change_pct = (base.median > 0)
            .then(|| (new.median as f64 - base.median as f64) * 100.0 / base.median as f64);
        Self {
            figure: f.key,
            base,
            new,
            change_pct,
            verdict,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct StepDiff {
    pub step: String,
    /// "changed", "same", "new" (only in NEW) or "gone" (only in BASE).
    pub status: &'static str,
    pub base_execs: usize,
    pub new_execs: usize,
    pub base_failed: usize,
    pub new_failed: usize,
    pub base_oom_killed: usize,
    pub new_oom_killed: usize,
    /// Every figure both sides have, in the order of [`FIGURES`].
    pub figures: Vec<FigureDiff>,
}

impl StepDiff {
    pub fn moved(&self) -> impl Iterator<Item = &FigureDiff> {
        self.figures.iter().filter(|f| f.verdict != Verdict::Same)
    }

    /// It fails in NEW where it never did in BASE.
    pub fn newly_failing(&self) -> bool {
        self.new_failed > 0 && self.base_failed == 0
    }

    pub fn newly_oom_killed(&self) -> bool {
        self.new_oom_killed > 0 && self.base_oom_killed == 0
    }
}

/// Every step of either side: changed ones first (most grown first), then new, gone, same.
pub fn compare(base: &[StepSummary], new: &[StepSummary]) -> Vec<StepDiff> {
    let base: BTreeMap<&str, &StepSummary> = base.iter().map(|s| (s.step.as_str(), s)).collect();
    let new_by: BTreeMap<&str, &StepSummary> = new.iter().map(|s| (s.step.as_str(), s)).collect();
    let mut out = Vec::new();
    for (step, n) in &new_by {
        let Some(b) = base.get(step) else {
            out.push(side_only(n, "new", false));
            continue;
        };
        let figures: Vec<FigureDiff> = FIGURES
            .iter()
            .filter_map(|f| Some(FigureDiff::of(f, *b.get(f)?, *n.get(f)?)))
            .collect();
        let mut d = StepDiff {
            step: step.to_string(),
            status: "same",
            base_execs: b.execs,
            new_execs: n.execs,
            base_failed: b.failed,
            new_failed: n.failed,
            base_oom_killed: b.oom_killed,
            new_oom_killed: n.oom_killed,
            figures,
        };
        if d.moved().next().is_some() || d.newly_failing() || d.newly_oom_killed() {
            d.status = "changed";
        }
        out.push(d);
    }
    for (step, b) in &base {
        if !new_by.contains_key(step) {
            out.push(side_only(b, "gone", true));
        }
    }
    let rank = |d: &StepDiff| match d.status {
        "changed" => 0,
        "new" => 1,
        "gone" => 2,
        _ => 3,
    };
    let grown = |d: &StepDiff| {
        d.moved()
            .filter_map(|f| f.change_pct)
            .fold(0f64, |a, c| a.max(c.abs()))
    };
    out.sort_by(|a, b| {
        rank(a)
            .cmp(&rank(b))
            .then_with(|| grown(b).total_cmp(&grown(a)))
            .then_with(|| a.step.cmp(&b.step))
    });
    out
}

fn side_only(s: &StepSummary, status: &'static str, is_base: bool) -> StepDiff {
    let (execs, failed, oom) = (s.execs, s.failed, s.oom_killed);
    StepDiff {
        step: s.step.clone(),
        status,
        base_execs: if is_base { execs } else { 0 },
        new_execs: if is_base { 0 } else { execs },
        base_failed: if is_base { failed } else { 0 },
        new_failed: if is_base { 0 } else { failed },
        base_oom_killed: if is_base { oom } else { 0 },
        new_oom_killed: if is_base { 0 } else { oom },
        figures: Vec::new(),
    }
}

/// A `--fail-on` condition.
#[derive(Clone, Debug, PartialEq)]
pub enum FailOn {
    /// A figure flagged heavier, grown by more than the percent where one is given.
    Figure {
        key: &'static str,
        pct: Option<f64>,
    },
    /// Any figure flagged heavier.
    Any,
    /// A step that fails (or is OOM-killed) in NEW and never did in BASE.
    Failed,
    Oom,
}

impl FailOn {
    /// `FIGURE[=PCT%]`, `any`, `failed` or `oom`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let (key, pct) = match s.split_once('=') {
            Some((k, p)) => {
                let p = p.trim().trim_end_matches('%');
                let v: f64 = p
                    .parse()
                    .ok()
                    .filter(|v: &f64| v.is_finite() && *v >= 0.0)
                    .ok_or_else(|| format!("{s:?}: the threshold is a percent, e.g. wall=20%"))?;
                (k.trim(), Some(v))
            }
            None => (s.trim(), None),
        };
        match (key, pct) {
            ("any", None) => return Ok(Self::Any),
            ("failed", None) => return Ok(Self::Failed),
            ("oom", None) => return Ok(Self::Oom),
            _ => {}
        }
        let keys: Vec<&str> = FIGURES.iter().map(|f| f.key).collect();
        match FIGURES.iter().find(|f| f.key == key) {
            Some(f) => Ok(Self::Figure { key: f.key, pct }),
            None => Err(format!(
                "{key:?} is no figure: one of {}, any, failed, oom",
                keys.join(", ")
            )),
        }
    }

    /// The steps that cross it, as lines for people.
    pub fn crossed(&self, diffs: &[StepDiff]) -> Vec<String> {
        let mut out = Vec::new();
        for d in diffs {
            match self {
                Self::Failed if d.newly_failing() => out.push(format!(
                    "{}: failed {} time(s), never in BASE",
                    d.step, d.new_failed
                )),
                Self::Oom if d.newly_oom_killed() => out.push(format!(
                    "{}: OOM-killed {} time(s), never in BASE",
                    d.step, d.new_oom_killed
                )),
                Self::Any | Self::Figure { .. } => {
                    for f in d.moved().filter(|f| f.verdict == Verdict::Heavier) {
                        let hit = match self {
                            Self::Figure { key, pct } => {
                                *key == f.figure
                                    && pct.is_none_or(|p| f.change_pct.is_none_or(|c| c > p))
                            }
                            _ => true,
                        };
                        if hit {
                            out.push(format!(
                                "{}: {} {}",
                                d.step,
                                f.figure,
                                f.change_pct
                                    .map_or("grew from 0".into(), |c| format!("{c:+.0}%"))
                            ));
                        }
                    }
                }
                _ => {}
            }
        }
        out
    }
}

/// Every condition's crossings; an error (for the exit status) when any.
pub fn check(fail_on: &[FailOn], diffs: &[StepDiff]) -> Result<()> {
    let mut lines: Vec<String> = fail_on.iter().flat_map(|f| f.crossed(diffs)).collect();
    lines.dedup();
    if lines.is_empty() {
        return Ok(());
    }
    bail!(Crossed(lines))
}

/// `--fail-on` crossed: exit status 3.
#[derive(Debug)]
pub struct Crossed(pub Vec<String>);

impl std::fmt::Display for Crossed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "--fail-on crossed by {} step figure(s): {}",
            self.0.len(),
            self.0.join("; ")
        )
    }
}

impl std::error::Error for Crossed {}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(step: &str, walls_ms: &[u64], failed: usize) -> StepSummary {
        let v = walls_ms.iter().map(|m| m * 1_000_000).collect();
        StepSummary {
            step: step.into(),
            execs: walls_ms.len(),
            runs: walls_ms.len(),
            failed,
            oom_killed: 0,
            running: 0,
            figures: BTreeMap::from([("wall", Stats::of(v).unwrap())]),
        }
    }

    #[test]
    fn a_step_is_flagged_only_beyond_the_base_spread_and_margin() {
        let base = [
            summary("build", &[100, 120, 110], 0),
            summary("test", &[1000, 1400, 1200], 0),
            summary("lint", &[50], 0),
            summary("old", &[10], 0),
        ];
        let new = [
            // 140 ms: above BASE's max (120) by more than 10% of its median (11 ms).
            summary("build", &[140], 0),
            // 1500 ms: above the max (1400) but within the margin (120 ms).
            summary("test", &[1500], 0),
            // 20 ms: below the one BASE value by more than the 5 ms floor.
            summary("lint", &[20], 1),
            summary("fresh", &[10], 0),
        ];
        let d = compare(&base, &new);
        let got: Vec<(&str, &str, Vec<Verdict>)> = d
            .iter()
            .map(|d| {
                (
                    d.step.as_str(),
                    d.status,
                    d.figures.iter().map(|f| f.verdict).collect(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("lint", "changed", vec![Verdict::Lighter]),
                ("build", "changed", vec![Verdict::Heavier]),
                ("fresh", "new", vec![]),
                ("old", "gone", vec![]),
                ("test", "same", vec![Verdict::Same]),
            ]
        );
        let build = &d[1];
        assert_eq!(build.figures[0].change_pct.unwrap().round(), 27.0);
        // --fail-on: any heavier figure; a threshold above the growth passes; failures.
        let parse = |s| FailOn::parse(s).unwrap();
        assert_eq!(parse("any").crossed(&d), ["build: wall +27%"]);
        assert!(parse("wall=30%").crossed(&d).is_empty());
        assert_eq!(parse("wall=20").crossed(&d).len(), 1);
        assert!(parse("cpu").crossed(&d).is_empty());
        assert_eq!(
            parse("failed").crossed(&d),
            ["lint: failed 1 time(s), never in BASE"]
        );
        assert!(check(&[parse("wall=30%")], &d).is_ok());
        let e = check(&[parse("any"), parse("failed")], &d).unwrap_err();
        assert!(e.is::<Crossed>());
        assert!(FailOn::parse("speed").unwrap_err().contains("is no figure"));
        assert!(
            FailOn::parse("wall=fast")
                .unwrap_err()
                .contains("a percent")
        );
        assert!(FailOn::parse("any=3").is_err());
    }
}
