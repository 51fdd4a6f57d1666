//! `report --markdown`: a GitHub-flavoured summary for a CI page ($GITHUB_STEP_SUMMARY, GitLab
//! and Buildkite annotations): where the time went, the top steps by each resource, failed
//! and OOM-killed steps, a comparison where one was asked for, and a Mermaid gantt of the
//! last run's execs (docs/report.md, "A CI summary").

use std::fmt::Write as _;

use super::{
    compare::{StepDiff, Verdict},
    many::{Moved, overview, value},
    steps::{FIGURES, MISSING, StepSummary, Steps},
};
use crate::render::{dur, printable, truncate};

/// The most execs drawn in the gantt (the longest of the run): Mermaid's input is bounded.
pub const GANTT_MAX: usize = 100;

/// Text for a table cell: control characters escaped, Markdown's own characters quoted.
pub fn cell(s: &str) -> String {
    let mut out = String::new();
    for c in printable(s).chars() {
        if matches!(
            c,
            '\\' | '`'
                | '*'
                | '_'
                | '['
                | ']'
                | '<'
                | '>'
                | '|'
                | '#'
                | '~'
                | '!'
                | '&'
                | '('
                | ')'
        ) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

pub fn render(
    s: &Steps,
    summaries: &[StepSummary],
    compared: Option<(&Steps, &[StepDiff])>,
) -> String {
    let mut o = String::from("## Build profile\n\n");
    let _ = writeln!(o, "{}.\n", overview(s));
    if let Some((base, diffs)) = compared {
        comparison(&mut o, base, diffs);
    }
    let t = s.total();
    if t.task_ns > 0 {
        o.push_str(
            "### Where the time went\n\n| part | time | share of task time |\n|---|---:|---:|\n",
        );
        for (_, label, ns) in t.parts() {
            let _ = writeln!(
                o,
                "| {label} | {} | {:.1}% |",
                dur(ns),
                ns as f64 * 100.0 / t.task_ns as f64
            );
        }
        if t.overlap_ns > 0 {
            let _ = writeln!(o, "| − overlap | {} | |", dur(t.overlap_ns));
        }
        let _ = writeln!(o, "| **task time** | **{}** | 100% |\n", dur(t.task_ns));
    }
    top_steps(&mut o, s, summaries);
    let bad: Vec<&StepSummary> = summaries
        .iter()
        .filter(|x| x.failed + x.oom_killed > 0)
        .collect();
    if !bad.is_empty() {
        o.push_str(
            "### Failed steps\n\n| step | execs | failed | OOM-killed |\n|---|---:|---:|---:|\n",
        );
        for x in bad {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} |",
                cell(&truncate(&x.step, 80)),
                x.execs,
                x.failed,
                x.oom_killed
            );
        }
        o.push('\n');
    }
    gantt(&mut o, s);
    o
}

/// Per figure, the three steps with the most of it over all their execs (memory: the
/// highest peak).
fn top_steps(o: &mut String, s: &Steps, summaries: &[StepSummary]) {
    o.push_str(
        "### Top steps\n\n| resource | step | total | median | execs |\n|---|---|---:|---:|---:|\n",
    );
    for (i, f) in FIGURES.iter().enumerate() {
        let mut ranked: Vec<(&str, u64)> = s
            .steps
            .iter()
            .map(|(step, v)| {
                let vals = v.iter().map(|x| x.figures[i]).filter(|&x| x != MISSING);
                let total = if f.key == "memory" {
                    vals.max().unwrap_or(0)
                } else {
                    vals.fold(0u64, u64::saturating_add)
                };
                (step.as_str(), total)
            })
            .filter(|(_, t)| *t > 0)
            .collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        for (step, total) in ranked.into_iter().take(3) {
            let x = summaries
                .iter()
                .find(|x| x.step == step)
                .expect("a summary per step");
            let med = x.get(f).map_or("n/a".into(), |st| value(f, st.median));
            let total = if f.key == "memory" {
                format!("peak {}", value(f, total))
            } else {
                value(f, total)
            };
            let _ = writeln!(
                o,
                "| {} | {} | {total} | {med} | {} |",
                f.label,
                cell(&truncate(step, 80)),
                x.execs
            );
        }
    }
    o.push('\n');
}

fn comparison(o: &mut String, base: &Steps, diffs: &[StepDiff]) {
    let _ = writeln!(
        o,
        "### Compared with BASE\n\nBASE: {}. A figure moved when NEW's median lies beyond the range \
         of BASE's execs by more than 10% of BASE's median.\n",
        overview(base)
    );
    let changed: Vec<&StepDiff> = diffs.iter().filter(|d| d.status == "changed").collect();
    if !changed.is_empty() {
        o.push_str("| step | figure | BASE median (range) | NEW median | change |\n|---|---|---:|---:|---:|\n");
        for d in &changed {
            for f in d.moved() {
                let m = Moved::of(f);
                let mark = if f.verdict == Verdict::Heavier {
                    "🔺"
                } else {
                    "🔻"
                };
                let _ = writeln!(
                    o,
                    "| {} | {} | {} ({}–{}) | {} | {mark} {} |",
                    cell(&truncate(&d.step, 80)),
                    m.label,
                    m.base_median,
                    m.base_min,
                    m.base_max,
                    m.new_median,
                    m.change,
                );
            }
            if d.newly_failing() {
                let _ = writeln!(
                    o,
                    "| {} | failures | 0 | {} | new |",
                    cell(&truncate(&d.step, 80)),
                    d.new_failed
                );
            }
            if d.newly_oom_killed() {
                let _ = writeln!(
                    o,
                    "| {} | OOM kills | 0 | {} | new |",
                    cell(&truncate(&d.step, 80)),
                    d.new_oom_killed
                );
            }
        }
        o.push('\n');
    }
    for (status, what) in [("new", "Only in NEW"), ("gone", "Only in BASE")] {
        let v: Vec<String> = diffs
            .iter()
            .filter(|d| d.status == status)
            .map(|d| cell(&truncate(&d.step, 80)))
            .collect();
        if !v.is_empty() {
            let _ = writeln!(o, "{what}: {}.\n", v.join(", "));
        }
    }
    let same = diffs.iter().filter(|d| d.status == "same").count();
    let _ = writeln!(
        o,
        "{} step(s) changed, {same} within BASE's spread.\n",
        changed.len()
    );
}

/// A task name Mermaid reads as text: letters, digits and a few signs kept, the rest spaces
/// (`:` ends a name, `#` and `;` are syntax), cut in the middle (a command's start and its
/// end both tell steps apart), and never a statement at the line's start: a name that begins
/// with a gantt keyword or a digit (a date) gets `step ` before it.
pub fn gantt_name(s: &str) -> String {
    let kept: String = s
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || " ._/+=@-".contains(c) {
                c
            } else {
                ' '
            }
        })
        .collect();
    let name = kept.split_whitespace().collect::<Vec<_>>().join(" ");
    let name = cut_middle(&name, 60);
    // Every statement of Mermaid's gantt grammar (and `gantt` itself).
    const KEYWORDS: [&str; 17] = [
        "gantt",
        "title",
        "dateformat",
        "axisformat",
        "tickinterval",
        "inclusiveenddates",
        "topaxis",
        "excludes",
        "includes",
        "todaymarker",
        "weekday",
        "weekend",
        "section",
        "click",
        "call",
        "acctitle",
        "accdescr",
    ];
    let first = name.split_whitespace().next().unwrap_or("").to_lowercase();
    let statement = KEYWORDS.iter().any(|k| first.starts_with(k))
        || first.starts_with(|c: char| c.is_ascii_digit());
    if name.is_empty() || statement {
        format!("step {name}")
    } else {
        name
    }
}

/// `s` in at most `n` characters: its start and its end around an ellipsis.
fn cut_middle(s: &str, n: usize) -> String {
    let len = s.chars().count();
    if len <= n {
        return s.to_owned();
    }
    let head = (n - 1) / 3;
    let tail = n - 1 - head;
    let start: String = s.chars().take(head).collect();
    let end: String = s.chars().skip(len - tail).collect();
    format!("{start}…{end}")
}

/// The last run's execs as a Mermaid gantt: one bar per exec from its start to its end,
/// failed ones marked `crit`, running ones `active`; by host where the run had several.
fn gantt(o: &mut String, s: &Steps) {
    let Some((run, mut execs)) = s.last_run() else {
        return;
    };
    let _ = writeln!(o, "### Timeline of {}\n", cell(&run.id));
    let left_out = execs.len().saturating_sub(GANTT_MAX);
    if left_out > 0 {
        let mut by_wall: Vec<usize> = (0..execs.len()).collect();
        by_wall.sort_by_key(|&i| std::cmp::Reverse(execs[i].1.figures[0]));
        let keep: std::collections::BTreeSet<usize> = by_wall.into_iter().take(GANTT_MAX).collect();
        execs = execs
            .into_iter()
            .enumerate()
            .filter(|(i, _)| keep.contains(i))
            .map(|(_, e)| e)
            .collect();
    }
    let span_ms = (run.end_unix_ns - run.start_unix_ns.min(run.end_unix_ns)) / 1_000_000;
    // Ticks that differ: milliseconds for a run of seconds.
    let axis = match span_ms {
        0..10_000 => "%S.%L",
        10_000..3_600_000 => "%M:%S",
        _ => "%H:%M",
    };
    o.push_str("```mermaid\ngantt\n    dateFormat x\n");
    let _ = writeln!(o, "    axisFormat {axis}");
    let _ = writeln!(o, "    title {}", gantt_name(&run.id));
    o.push_str("    section execs\n");
    for (i, (step, x)) in execs.iter().enumerate() {
        let start = x.start_unix_ns / 1_000_000;
        let end = (x.end_unix_ns / 1_000_000).max(start + 1);
        let tag = if x.failed || x.oom {
            "crit, "
        } else if x.running {
            "active, "
        } else {
            ""
        };
        let _ = writeln!(o, "    {} :{tag}e{i}, {start}, {end}", gantt_name(step));
    }
    o.push_str("```\n");
    if left_out > 0 {
        let _ = writeln!(o, "\n{left_out} shorter exec(s) left out of the timeline.");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{
        compare::compare,
        steps::tests::steps_of,
        tests::{cpu, line, with},
    };

    #[test]
    fn names_cannot_break_the_table_or_the_gantt() {
        assert_eq!(cell("a|b `c` <i>"), "a\\|b \\`c\\` \\<i\\>");
        assert_eq!(cell("x\ny"), "x\\\\ny", "shown as x\\ny");
        assert_eq!(
            gantt_name("sh -c 'make: all'; echo #1"),
            "sh -c make all echo 1"
        );
        assert_eq!(gantt_name("section b"), "step section b");
        assert_eq!(gantt_name("topAxis x"), "step topAxis x");
        assert_eq!(gantt_name("2026-12-07 nightly"), "step 2026-12-07 nightly");
        assert_eq!(gantt_name(":::"), "step ");
        let long = format!("sh /a/{}/compile.sh", "x".repeat(99));
        let cut = gantt_name(&long);
        assert_eq!(cut.chars().count(), 60, "{cut}");
        assert!(
            cut.starts_with("sh /a/x") && cut.ends_with("x/compile.sh"),
            "{cut}"
        );
    }

    #[test]
    fn the_summary_names_failures_top_steps_and_draws_each_exec() {
        let rec = |id: u64, cmd: &str, fields: &str| {
            with(
                &line(
                    "s",
                    id,
                    "ended",
                    id,
                    100 * id,
                    &cpu(id * 1_000_000, 0, 0, id * 3_000_000),
                ),
                &format!(r#""command":"{cmd}"{fields}"#),
            )
        };
        let fail = r#","exit":{"pid":1,"code":2}"#;
        let s = steps_of(&[(
            "run.jsonl",
            vec![
                rec(1, "make all", ""),
                rec(2, "make test", fail),
                rec(3, "make all", ""),
            ],
        )]);
        let sum = s.summaries();
        let md = render(&s, &sum, None);
        assert!(md.contains("3 execs of 2 steps, 1 failed"), "{md}");
        assert!(md.contains("| make test | 1 | 1 | 0 |"), "{md}");
        assert!(
            md.contains("| on-CPU | make all | 4.0ms | 1.0ms | 2 |"),
            "{md}"
        );
        let bars: Vec<&str> = md
            .lines()
            .filter(|l| l.starts_with("    ") && l.contains(" :"))
            .collect();
        assert_eq!(bars.len(), 3, "{md}");
        assert!(
            bars[1].contains("make test :crit, e1, 1700000002000, 1700000002200"),
            "{md}"
        );
        // A comparison comes first, with the moved figure.
        let base = steps_of(&[(
            "b.jsonl",
            vec![rec(1, "make all", ""), rec(2, "make test", "")],
        )]);
        let d = compare(&base.summaries(), &sum);
        let md = render(&s, &sum, Some((&base, &d)));
        assert!(
            md.contains("| make test | failures | 0 | 1 | new |"),
            "{md}"
        );
    }
}
