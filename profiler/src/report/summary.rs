//! The terminal summary of `profiler report`: where the build's task time went (parts that
//! add up to the whole), then the top execs by each resource.

use std::fmt::Write as _;

use super::{Build, ExecRecord, NamedBy};
use crate::render::{bytes, dur};

/// How a ranked figure is shown.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A duration, with its share of the total over the execs.
    Time,
    /// Bytes, with their share of the total.
    Bytes,
    /// A duration that is no part of a sum (execs overlap): no share.
    Span,
    /// A peak: no share either.
    Peak,
}

/// The resources the summary ranks execs by: title, an exec's figure (None: missing), kind.
type Metric = (&'static str, fn(&ExecRecord) -> Option<u64>, Kind);

const METRICS: [Metric; 9] = [
    ("wall time", |r| Some(r.wall_ns), Kind::Span),
    ("on-CPU", |r| Some(r.breakdown().on_cpu_ns), Kind::Time),
    ("run-queue", |r| Some(r.breakdown().runq_ns), Kind::Time),
    ("IO-wait", |r| Some(r.breakdown().iowait_ns), Kind::Time),
    ("other", |r| Some(r.breakdown().other_ns), Kind::Time),
    ("disk read", |r| Some(r.disk.read_bytes), Kind::Bytes),
    ("disk write", |r| Some(r.disk.write_bytes), Kind::Bytes),
    (
        "network rx+tx",
        |r| r.sockets().ok().map(|t| t.rx_bytes + t.tx_bytes),
        Kind::Bytes,
    ),
    (
        "memory peak",
        |r| r.memory_peak().ok().map(|m| m.0),
        Kind::Peak,
    ),
];

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

pub fn render(build: &Build, top: usize) -> String {
    let mut s = String::new();
    let n = build.records.len();
    let running = build.running();
    let (start, end) = build.span();
    let _ = write!(s, "{n} execs ({} ended", n - running);
    let failed = build.failed();
    if failed > 0 {
        let _ = write!(s, ", {failed} failed");
    }
    if running > 0 {
        let _ = write!(s, ", {running} still running when recorded");
    }
    let _ = writeln!(
        s,
        "), {} from the first start to the last end, starting {}",
        dur(end - start),
        http_date(start)
    );
    if build.superseded > 0 {
        let _ = writeln!(
            s,
            "({} earlier records of the same execs left out: each exec's last one is used)",
            build.superseded
        );
    }

    let t = build.total();
    let _ = writeln!(
        s,
        "\nwhere the time went: task time {} (the lifetimes of the execs' tasks, summed)",
        dur(t.task_ns)
    );
    // Shares of task time: the rows add up to it.
    for (_, label, ns) in t.parts() {
        let _ = writeln!(s, "  {label:<12} {:>10} {:>7}", dur(ns), pct(ns, t.task_ns));
    }
    if t.overlap_ns > 0 {
        let _ = writeln!(
            s,
            "  {:<12} {:>10} {:>7}   (the ends of IO waits, counted in run-queue too)",
            "- overlap",
            dur(t.overlap_ns),
            format!("-{}", pct(t.overlap_ns, t.task_ns))
        );
    }
    let _ = writeln!(
        s,
        "  {:<12} {:>10} {:>7}",
        "= task time",
        dur(t.task_ns),
        "100%"
    );
    let stall: u64 = build
        .records
        .iter()
        .map(|r| {
            r.cpu
                .swapin_ns
                .saturating_add(r.cpu.reclaim_ns)
                .saturating_add(r.cpu.thrashing_ns)
        })
        .fold(0, u64::saturating_add);
    let _ = writeln!(
        s,
        "  memory stalls {} (swap-in, reclaim, thrashing; they overlap the parts above)",
        dur(stall)
    );

    let programs = build.programs();
    if !programs.is_empty() {
        let total: u64 = programs.iter().map(|p| p.2).fold(0, u64::saturating_add);
        let _ = writeln!(s, "\nprograms by on-CPU time, over every exec:");
        for (name, procs, cpu) in programs.iter().take(top.max(1) * 2) {
            let _ = writeln!(
                s,
                "  {:>10} {:>6}  {}: {procs} processes",
                dur(*cpu),
                pct(*cpu, total),
                crate::render::printable(name)
            );
        }
    }
    let failed: Vec<&ExecRecord> = build.records.iter().filter(|r| r.failed()).collect();
    if !failed.is_empty() {
        let _ = writeln!(s, "\nfailed execs:");
        for r in failed.iter().take(top.max(1)) {
            let e = r.exit.as_ref().expect("a failed exec has an exit");
            let _ = writeln!(s, "  {:>10}  {}", e.status.summary(), who(r));
        }
        if failed.len() > top.max(1) {
            let _ = writeln!(s, "  ... and {} more", failed.len() - top.max(1));
        }
    }

    for (title, value, kind) in METRICS {
        let mut ranked: Vec<(u64, &ExecRecord)> = build
            .records
            .iter()
            .filter_map(|r| value(r).map(|v| (v, r)))
            .filter(|(v, _)| *v > 0)
            .collect();
        if ranked.is_empty() {
            continue;
        }
        let total: u64 = ranked.iter().map(|(v, _)| *v).fold(0, u64::saturating_add);
        ranked.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.exec.cmp(&b.1.exec)));
        let _ = writeln!(s, "\ntop execs by {title}:");
        for (v, r) in ranked.iter().take(top.max(1)) {
            let shown = match kind {
                Kind::Time | Kind::Span => dur(*v),
                Kind::Bytes | Kind::Peak => bytes(*v),
            };
            let share = match kind {
                Kind::Time | Kind::Bytes => pct(*v, total),
                Kind::Span | Kind::Peak => String::new(),
            };
            let _ = writeln!(s, "  {shown:>10} {share:>6}  {}", who(r));
        }
    }
    s
}

/// An exec as the summary names it: what ran (see [`ExecRecord::name`]), cut at 60 characters,
/// and its cgroup path in brackets when that is not the name; on one line whatever the
/// record holds (control characters escaped).
fn who(r: &ExecRecord) -> String {
    let printable = crate::render::printable;
    match r.name() {
        (path, NamedBy::Path) => printable(path),
        (name, _) => {
            let mut n: String = name.chars().take(60).collect();
            if name.chars().count() > 60 {
                n.pop();
                n.push('…');
            }
            format!("{}  [{}]", printable(&n), printable(&r.exec))
        }
    }
}

/// Unix ns as an HTTP date (UTC, to the second).
pub fn http_date(unix_ns: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(unix_ns);
    httpdate::fmt_http_date(t)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{cpu, line, with};
    use super::*;

    #[test]
    fn failed_execs_are_counted_and_named_with_their_outcome() {
        let ok = line("fetch", 1, "ended", 0, 100, &cpu(1, 0, 0, 2));
        let text = [
            with(&ok, r#""exit":{"pid":7,"code":0}"#),
            with(
                &line("compile", 2, "ended", 1, 100, &cpu(1, 0, 0, 2)),
                r#""exit":{"pid":8,"code":2}"#,
            ),
            with(
                &line("test", 3, "ended", 2, 100, &cpu(1, 0, 0, 2)),
                r#""exit":{"pid":9,"signal":"SIGKILL","oom_killed":true}"#,
            ),
            line("running", 4, "running", 3, 100, &cpu(1, 0, 0, 2)),
        ]
        .join("\n");
        let b = Build::read(text.as_bytes(), "t").unwrap();
        assert_eq!(b.failed(), 2);
        let s = render(&b, 5);
        assert!(
            s.starts_with("4 execs (3 ended, 2 failed, 1 still running"),
            "{s}"
        );
        assert!(
            s.contains("\nfailed execs:\n      exit 2  compile\n  SIGKILL (OOM kill)  test\n"),
            "{s}"
        );
        let page = crate::report::html::render(&b, "t");
        assert!(page.contains(r#"data-failed="2""#));
        assert!(page.contains(r#"<span class="sub failed">exit 2</span>"#));
        assert!(page.contains(r#"<g class="exec failed""#));
    }

    #[test]
    fn summary_parts_add_up_and_tops_are_ranked() {
        let text = [
            line(
                "compile",
                1,
                "ended",
                0,
                2000,
                &cpu(1_500_000_000, 0, 0, 1_900_000_000),
            ),
            line(
                "fetch",
                2,
                "ended",
                1,
                500,
                &cpu(100_000, 0, 300_000_000, 400_000_000),
            ),
            line(
                "test",
                3,
                "running",
                2,
                100,
                &cpu(50_000_000, 50_000_000, 0, 100_000_000),
            ),
        ]
        .join("\n");
        let b = Build::read(text.as_bytes(), "t").unwrap();
        let s = render(&b, 2);
        assert!(
            s.starts_with("3 execs (2 ended, 1 still running when recorded), 2.100s"),
            "{s}"
        );
        assert!(s.contains("task time 2.400s"), "{s}");
        // 1.55 + 0.05 + 0.3 + 0.4999 = 2.4: other is compile's 0.4 s and fetch's 99.9 ms.
        assert!(s.contains("\n  on-CPU           1.550s   64.6%\n  run-queue        50.0ms    2.1%\n  IO-wait         300.0ms   12.5%\n  other           499.9ms   20.8%\n  = task time      2.400s    100%\n"), "{s}");
        assert!(!s.contains("- overlap"), "{s}");
        let top_cpu = s.split("top execs by on-CPU:\n").nth(1).unwrap();
        let lines: Vec<&str> = top_cpu.lines().take(3).collect();
        assert!(lines[0].ends_with("  compile"), "{s}");
        assert!(lines[1].ends_with("  test"), "{s}");
        assert!(lines[2].is_empty(), "only the top 2: {s}");
        // Nobody waited on memory: no ranking of it; the peak is missing from every record.
        assert!(!s.contains("top execs by memory peak"), "{s}");
        assert!(
            s.contains("top execs by disk write:\n      1.0MiB  33.3%  compile\n"),
            "{s}"
        );
        assert!(
            s.contains("top execs by wall time:\n      2.000s         compile\n"),
            "{s}"
        );
    }

    #[test]
    fn an_overlap_is_shown_and_subtracted() {
        // dd: 4.5 ms on a CPU, 25.3 ms queued, 34.4 ms in IO waits, but lived 64.1 ms.
        let text = line(
            "dd",
            1,
            "ended",
            0,
            75,
            &cpu(4_500_000, 25_300_000, 34_400_000, 64_100_000),
        );
        let s = render(&Build::read(text.as_bytes(), "t").unwrap(), 5);
        assert!(
            s.contains("\n  other                0s    0.0%\n  - overlap       100.0us   -0.2%"),
            "{s}"
        );
        assert!(s.contains("  = task time      64.1ms    100%\n"), "{s}");
    }

    #[test]
    fn execs_are_named_by_what_ran_with_their_path() {
        let text = [
            with(
                &line("steps/1", 1, "ended", 0, 300, &cpu(3, 0, 0, 4)),
                r#""container":{"runtime":"docker","id":"abc","name":"web"},"command":"nginx""#,
            ),
            with(
                &line("steps/2", 2, "ended", 1, 200, &cpu(2, 0, 0, 4)),
                r#""command":"sh -c 'a\nb'""#,
            ),
            line("steps/3", 3, "ended", 2, 100, &cpu(1, 0, 0, 4)),
        ]
        .join("\n");
        let s = render(&Build::read(text.as_bytes(), "t").unwrap(), 5);
        assert!(
            s.contains(
                "top execs by wall time:\n     \
                 300.0ms         web  [steps/1]\n     \
                 200.0ms         sh -c 'a\\nb'  [steps/2]\n     \
                 100.0ms         steps/3\n"
            ),
            "{s}"
        );
    }

    #[test]
    fn dates() {
        assert_eq!(
            http_date(1_700_000_000_500_000_000),
            "Tue, 14 Nov 2023 22:13:20 GMT"
        );
    }
}
