//! The HTML page of `profiler report`: one self-contained file (inline CSS, SVG and script;
//! its Content-Security-Policy forbids any fetch) with the build's time breakdown, a timeline
//! of the execs (one bar per exec from its start to its end, split by where its task time
//! went), details on hover, and a table that sorts by any column.
//!
//! Each exec is named by what ran ([`ExecRecord::name`]), its cgroup path beside it; where its
//! record has a CI step, the step's run and task link to their pages: the page's only links,
//! made only of http(s) addresses ([`web_url`]), opening in a new tab.
//!
//! Everything is rendered here, so the page reads without its script; the script only sorts
//! the table and shows (and pins) the hover details. Every string from the records goes
//! through [`esc`].

use std::fmt::Write as _;

mod details;
pub mod steps;

use self::details::details;
use super::{Breakdown, Build, Ci, ExecRecord, NamedBy, State, summary::http_date};
use crate::render::{bytes, dur, truncate, truncate_start};

const CSS: &str = include_str!("page.css");
const JS: &str = include_str!("page.js");

/// Text or attribute value, escaped for HTML (and SVG).
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A web address that may become a link: http:// or https:// (any case) and a host, with no
/// whitespace or control characters (which a browser would strip and read past). Anything
/// else, javascript: and data: URLs among them, is shown as text only.
pub fn web_url(s: &str) -> bool {
    let b = s.as_bytes();
    let scheme = if b.len() > 8 && b[..8].eq_ignore_ascii_case(b"https://") {
        8
    } else if b.len() > 7 && b[..7].eq_ignore_ascii_case(b"http://") {
        7
    } else {
        return false;
    };
    !matches!(b[scheme], b'/' | b'\\' | b'?' | b'#' | b'@' | b':')
        && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// `text` linking to `url` (in a new tab, telling the target nothing of this page) when
/// `url` is a web address; otherwise the text, and the address beside it as text.
fn link(text: &str, url: Option<&str>) -> String {
    match url {
        Some(u) if web_url(u) => format!(
            "<a href=\"{}\" target=\"_blank\" rel=\"noopener noreferrer\">{}</a>",
            esc(u),
            esc(text)
        ),
        Some(u) if u != text => format!(
            "{} <span class=\"nolink\" title=\"not an http(s) address: not a link\">({})</span>",
            esc(text),
            esc(u)
        ),
        _ => esc(text),
    }
}

/// The CI step of an exec, as (key, header, HTML) rows: system and worker, pipeline, run
/// (linked to cicd.pipeline.run.url.full), task (linked to cicd.pipeline.task.run.url.full).
fn ci_rows(ci: &Ci) -> Vec<(&'static str, &'static str, String)> {
    let mut rows = Vec::new();
    if let Some(sys) = ci.system_name() {
        let mut x = esc(sys);
        if let Some(w) = ci.attr("cicd.worker.id") {
            let _ = write!(x, " &middot; worker {}", esc(w));
        }
        rows.push(("ci", "CI", x));
    }
    if let Some(p) = ci.attr("cicd.pipeline.name") {
        rows.push(("pipeline", "pipeline", esc(p)));
    }
    let run_url = ci.attr("cicd.pipeline.run.url.full");
    if let Some(id) = ci.attr("cicd.pipeline.run.id").or(run_url) {
        rows.push(("run", "run", link(id, run_url)));
    }
    let task_url = ci.attr("cicd.pipeline.task.run.url.full");
    let task = match (
        ci.attr("cicd.pipeline.task.name"),
        ci.attr("cicd.pipeline.task.run.id"),
    ) {
        (Some(n), Some(id)) => Some(format!("{n} #{id}")),
        (n, id) => n.or(id).or(task_url).map(str::to_owned),
    };
    if let Some(t) = task {
        rows.push(("task", "task", link(&t, task_url)));
    }
    rows
}

/// The CI step for the table: "GitHub Actions · CI · run 4242 · build", the run and the task
/// linked; with the same words as plain text (the sort key).
fn ci_cell(ci: &Ci) -> (String, String) {
    let (mut html, mut text) = (Vec::new(), Vec::new());
    let run_url = ci.attr("cicd.pipeline.run.url.full");
    let task_url = ci.attr("cicd.pipeline.task.run.url.full");
    for (v, url) in [
        (ci.system_name().map(str::to_owned), None),
        (ci.attr("cicd.pipeline.name").map(str::to_owned), None),
        (
            match ci.attr("cicd.pipeline.run.id") {
                Some(id) => Some(format!("run {id}")),
                None => run_url.map(|_| "run".to_owned()),
            },
            run_url,
        ),
        (
            ci.attr("cicd.pipeline.task.name")
                .or(ci.attr("cicd.pipeline.task.run.id"))
                .or(task_url.map(|_| "task"))
                .map(str::to_owned),
            task_url,
        ),
    ] {
        if let Some(v) = v {
            html.push(link(&v, url));
            text.push(v);
        }
    }
    (html.join(" &middot; "), text.join(" · "))
}

/// An exec's name, shortened to `n` characters for a label: a path keeps its end (the exec's
/// own name is there), a name or command its start.
fn short_name(r: &ExecRecord, n: usize) -> String {
    match r.name() {
        (p, NamedBy::Path) => truncate_start(p, n),
        (name, _) => truncate(name, n),
    }
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// Offset from the build's start, e.g. "+1.250s".
fn offset(ns: u64) -> String {
    format!("+{:.3}s", ns as f64 / 1e9)
}

pub fn render(build: &Build, source: &str) -> String {
    let mut s = String::new();
    let n = build.records.len();
    let running = build.running();
    let (t0, t1) = build.span();
    let _ = write!(
        s,
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; script-src 'unsafe-inline'; base-uri 'none'; \
         form-action 'none'\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>Build profile: {}</title>\n<style>\n{CSS}</style>\n</head>\n<body>\n",
        esc(source)
    );
    let _ = writeln!(s, "<h1>Build profile <small>{}</small></h1>", esc(source));
    let failed = build.failed();
    let _ = write!(
        s,
        "<p id=\"overview\" data-execs=\"{n}\" data-running=\"{running}\" \
         data-failed=\"{failed}\">{n} execs ({} ended",
        n - running
    );
    if failed > 0 {
        let _ = write!(s, ", <span class=\"failed\">{failed} failed</span>");
    }
    if running > 0 {
        let _ = write!(s, ", {running} still running when recorded");
    }
    let _ = writeln!(
        s,
        "), {} from the first start to the last end, starting {}.</p>",
        dur(t1 - t0),
        esc(&http_date(t0))
    );
    total_section(&mut s, &build.total());
    timeline(&mut s, build);
    table(&mut s, build);
    s.push_str("<div id=\"tip\" role=\"tooltip\" hidden></div>\n");
    for (i, r) in build.records.iter().enumerate() {
        details(&mut s, i, r, t0);
    }
    let _ = write!(s, "<script>\n{JS}</script>\n</body>\n</html>\n");
    s
}

fn total_section(s: &mut String, t: &Breakdown) {
    s.push_str("<section id=\"total\">\n<h2>Where the time went</h2>\n<div class=\"stack\">");
    for (key, label, ns) in t.parts() {
        let _ = write!(
            s,
            "<span class=\"{key}\" style=\"width:{:.3}%\" title=\"{label}\"></span>",
            pct(ns, t.parts_total())
        );
    }
    s.push_str("</div>\n<table class=\"legend\">\n");
    // Shares of task time: the rows add up to it.
    for (key, label, ns) in t.parts() {
        let _ = writeln!(
            s,
            "<tr data-part=\"{key}\"><td><i class=\"{key}\"></i>{label}</td>\
             <td data-v=\"{ns}\">{}</td><td>{:.1}%</td></tr>",
            dur(ns),
            pct(ns, t.task_ns)
        );
    }
    if t.overlap_ns > 0 {
        let _ = writeln!(
            s,
            "<tr data-part=\"overlap\"><td>&minus; counted twice</td><td data-v=\"{}\">{}</td>\
             <td>&minus;{:.1}%</td></tr>",
            t.overlap_ns,
            dur(t.overlap_ns),
            pct(t.overlap_ns, t.task_ns)
        );
    }
    let _ = writeln!(
        s,
        "<tr data-part=\"task\" class=\"whole\"><td>= task time</td><td data-v=\"{}\">{}</td>\
         <td>100%</td></tr>",
        t.task_ns,
        dur(t.task_ns)
    );
    s.push_str("</table>\n");
    if t.overlap_ns > 0 {
        s.push_str(
            "<p class=\"note\">Counted twice: an IO wait ends where the run-queue wait begins, \
             but its two ends may be stamped by the clocks of two CPUs, which can disagree by \
             a little. Where that makes the parts exceed an exec's task time, its other is \
             0.</p>\n",
        );
    }
    s.push_str(
        "<p class=\"def\">Task time is the sum of the lifetimes of the execs' tasks (threads \
         included), from fork or the move into the exec to exit. On-CPU, run-queue (runnable, \
         waiting for a CPU) and IO-wait (blocked in an IO wait) are disjoint parts of it; \
         other is the rest: sleeping or blocked on anything but IO. A bar below shows these \
         shares of its exec's task time across its span: how much, not when.</p>\n</section>\n",
    );
}

/// Layout of the timeline, in SVG user units.
const WIDTH: f64 = 1200.0;
const LABEL_W: f64 = 250.0;
const RIGHT_PAD: f64 = 24.0;
const AXIS_H: f64 = 26.0;

fn timeline(s: &mut String, build: &Build) {
    let n = build.records.len();
    let (t0, t1) = build.span();
    let span = (t1 - t0).max(1) as f64;
    let row_h = if n <= 30 {
        20.0
    } else {
        (600.0 / n as f64).max(3.0)
    };
    let bar_w = WIDTH - LABEL_W - RIGHT_PAD;
    let height = AXIS_H + row_h * n as f64 + 6.0;
    let x_of = |unix_ns: u64| LABEL_W + (unix_ns - t0) as f64 / span * bar_w;
    let _ = writeln!(
        s,
        "<section>\n<h2>Timeline</h2>\n<svg id=\"timeline\" viewBox=\"0 0 {WIDTH} {height:.1}\" \
         xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" aria-label=\"one bar per exec, \
         from its start to its end\">"
    );
    // Time axis: ticks at a round step, 4 to 10 of them.
    let step = tick_step((t1 - t0).max(1));
    s.push_str("<g class=\"axis\">");
    let mut t = 0u64;
    while t <= t1 - t0 {
        let x = x_of(t0 + t);
        let _ = write!(
            s,
            "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.1}\" y2=\"{height:.1}\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\">{}</text>",
            AXIS_H - 6.0,
            AXIS_H - 10.0,
            esc(&tick_label(t, step))
        );
        let Some(next) = t.checked_add(step) else {
            break;
        };
        t = next;
    }
    s.push_str("</g>\n");
    for (i, r) in build.records.iter().enumerate() {
        let y = AXIS_H + row_h * i as f64;
        let bar_h = (row_h * 0.7).max(2.0);
        let by = y + (row_h - bar_h) / 2.0;
        let x0 = x_of(r.start_unix_ns);
        let w = (x_of(r.end_unix_ns.max(r.start_unix_ns)) - x0).max(1.0);
        let class = match (r.state, r.failed()) {
            (State::Ended, false) => "exec",
            (State::Ended, true) => "exec failed",
            (State::Running, _) => "exec running",
        };
        let _ = write!(
            s,
            "<g class=\"{class}\" data-row=\"{i}\"><rect class=\"hit\" x=\"0\" y=\"{y:.2}\" \
             width=\"{WIDTH}\" height=\"{row_h:.2}\"/>"
        );
        if row_h >= 11.0 {
            let _ = write!(
                s,
                "<text class=\"label\" x=\"{:.1}\" y=\"{:.2}\">{}</text>",
                LABEL_W - 8.0,
                y + row_h / 2.0,
                esc(&short_name(r, 34))
            );
        }
        let b = r.breakdown();
        let whole = b.parts_total();
        if whole == 0 {
            let _ = write!(
                s,
                "<rect class=\"none\" x=\"{x0:.2}\" y=\"{by:.2}\" width=\"{w:.2}\" height=\"{bar_h:.2}\"/>"
            );
        } else {
            let mut x = x0;
            for (key, _, ns) in b.parts() {
                if ns == 0 {
                    continue;
                }
                let sw = w * ns as f64 / whole as f64;
                let _ = write!(
                    s,
                    "<rect class=\"{key}\" x=\"{x:.2}\" y=\"{by:.2}\" width=\"{sw:.2}\" height=\"{bar_h:.2}\"/>"
                );
                x += sw;
            }
        }
        // The runtime's setup, before the step's command ran: veiled, the bar's parts still
        // showing through (they are the exec's whole task time).
        if let Some(setup) = r.phases.as_ref().and_then(|p| p.setup_ns)
            && r.wall_ns > 0
        {
            let sw = w * setup.min(r.wall_ns) as f64 / r.wall_ns as f64;
            let _ = write!(
                s,
                "<rect class=\"setup\" x=\"{x0:.2}\" y=\"{by:.2}\" width=\"{sw:.2}\" height=\"{bar_h:.2}\"/>"
            );
        }
        if r.state == State::Running {
            let _ = write!(
                s,
                "<rect class=\"open\" x=\"{x0:.2}\" y=\"{by:.2}\" width=\"{w:.2}\" height=\"{bar_h:.2}\"/>"
            );
        }
        s.push_str("</g>\n");
    }
    s.push_str("</svg>\n<p class=\"legend-line\">");
    for (key, label, _) in Breakdown::default().parts() {
        let _ = write!(s, "<i class=\"{key}\"></i>{label} ");
    }
    s.push_str(
        "<i class=\"none\"></i>no tasks &nbsp; <i class=\"setup\"></i>veiled: the container \
         runtime's setup, before the step's command &nbsp; <i class=\"open\"></i>dashed: still \
         running when recorded</p>\n</section>\n",
    );
}

/// A round step (1, 2 or 5 times a power of ten, in ns) giving 4 to 10 ticks over `span`.
fn tick_step(span: u64) -> u64 {
    let mut step = 1u64;
    loop {
        for m in [1, 2, 5] {
            let s = step.saturating_mul(m);
            if span / s <= 10 {
                return s;
            }
        }
        step = step.saturating_mul(10);
    }
}

/// A tick's offset: whole seconds, seconds with the decimals the step needs, or below a
/// second as ms (us, ns).
fn tick_label(t: u64, step: u64) -> String {
    if step >= 1_000_000_000 {
        format!("{}s", t / 1_000_000_000)
    } else if t >= 1_000_000_000 {
        let decimals = match step {
            100_000_000.. => 1,
            10_000_000.. => 2,
            1_000_000.. => 3,
            _ => 6,
        };
        format!("{:.*}s", decimals, t as f64 / 1e9)
    } else if step >= 1_000_000 {
        format!("{}ms", t / 1_000_000)
    } else {
        dur(t)
    }
}

/// A table cell: the sort key in data-v (empty when the figure is missing), what is shown
/// (HTML, escaped already), and a title.
struct Cell {
    key: &'static str,
    v: String,
    html: String,
    title: Option<String>,
}

fn num(key: &'static str, v: u64, text: String) -> Cell {
    Cell {
        key,
        v: v.to_string(),
        html: esc(&text),
        title: None,
    }
}

fn missing(key: &'static str, why: String) -> Cell {
    Cell {
        key,
        v: String::new(),
        html: "n/a".into(),
        title: Some(why),
    }
}

/// Columns: (key, header, sorts as text).
const COLUMNS: [(&str, &str, bool); 16] = [
    ("exec", "exec", true),
    ("ci", "CI step", true),
    ("state", "state", true),
    ("start", "start", false),
    ("wall", "wall", false),
    ("task_time", "task time", false),
    ("on_cpu", "on-CPU", false),
    ("runq", "run-queue", false),
    ("iowait", "IO-wait", false),
    ("other", "other", false),
    ("disk_read", "disk read", false),
    ("disk_write", "disk write", false),
    ("net_rx", "net rx", false),
    ("net_tx", "net tx", false),
    ("memory_peak", "memory peak", false),
    ("processes", "procs", false),
];

/// The state, and under it the main program's outcome (a failure stands out). Sorted as
/// text: `ended, exit 0` apart from `ended, exit 2` and `ended, SIGKILL`.
fn state_cell(r: &ExecRecord, state: &str) -> Cell {
    match &r.exit {
        Some(e) => {
            let outcome = e.status.summary();
            let class = if r.failed() { "sub failed" } else { "sub" };
            Cell {
                key: "state",
                v: format!("{state}, {outcome}"),
                html: format!(
                    "{}<span class=\"{class}\">{}</span>",
                    esc(state),
                    esc(&outcome)
                ),
                title: Some(format!("its main program, pid {}: {outcome}", e.pid)),
            }
        }
        None => Cell {
            key: "state",
            v: state.to_owned(),
            html: esc(state),
            title: None,
        },
    }
}

fn cells(r: &ExecRecord, t0: u64) -> Vec<Cell> {
    let b = r.breakdown();
    let state = match (r.state, r.partial) {
        (State::Ended, false) => "ended",
        (State::Ended, true) => "ended, partial",
        (State::Running, false) => "running",
        (State::Running, true) => "running, partial",
    };
    let (name, by) = r.name();
    // The name, and under it the cgroup path unless that is the name.
    let mut exec_html = format!("<span class=\"name\">{}</span>", esc(&short_name(r, 48)));
    if by != NamedBy::Path {
        let _ = write!(exec_html, "<span class=\"sub\">{}</span>", esc(&r.exec));
    }
    let (mut ci_html, mut ci_text) = r.ci().map(ci_cell).unwrap_or_default();
    if let Some(t) = r.ci().and_then(|c| c.trace.as_ref()) {
        // The start of the id tells traces apart here; the title and the hover have it whole.
        let _ = write!(
            ci_html,
            "<span class=\"sub trace\" title=\"{}\">trace {}</span>",
            esc(&t.trace_id),
            esc(&truncate(&t.trace_id, 9))
        );
        ci_text = format!("{ci_text} trace {}", t.trace_id);
    }
    let mut v = vec![
        Cell {
            key: "exec",
            v: name.to_owned(),
            html: exec_html,
            title: Some(if by == NamedBy::Path {
                name.to_owned()
            } else {
                format!("{name}\ncgroup path: {}", r.exec)
            }),
        },
        Cell {
            key: "ci",
            v: ci_text.trim().to_owned(),
            html: ci_html,
            title: None,
        },
        state_cell(r, state),
        num("start", r.start_unix_ns - t0, offset(r.start_unix_ns - t0)),
        num("wall", r.wall_ns, dur(r.wall_ns)),
        num("task_time", b.task_ns, dur(b.task_ns)),
        num("on_cpu", b.on_cpu_ns, dur(b.on_cpu_ns)),
        num("runq", b.runq_ns, dur(b.runq_ns)),
        num("iowait", b.iowait_ns, dur(b.iowait_ns)),
        num("other", b.other_ns, dur(b.other_ns)),
        num("disk_read", r.disk.read_bytes, bytes(r.disk.read_bytes)),
        num("disk_write", r.disk.write_bytes, bytes(r.disk.write_bytes)),
    ];
    match r.sockets() {
        Ok(t) => {
            v.push(num("net_rx", t.rx_bytes, bytes(t.rx_bytes)));
            v.push(num("net_tx", t.tx_bytes, bytes(t.tx_bytes)));
        }
        Err(why) => {
            v.push(missing("net_rx", why.clone()));
            v.push(missing("net_tx", why));
        }
    }
    v.push(match r.memory_peak() {
        Ok((m, _)) => num("memory_peak", m, bytes(m)),
        Err(why) => missing("memory_peak", why),
    });
    v.push(num(
        "processes",
        r.tasks.processes_started,
        r.tasks.processes_started.to_string(),
    ));
    v
}

fn table(s: &mut String, build: &Build) {
    let (t0, _) = build.span();
    s.push_str(
        "<section>\n<h2>Execs</h2>\n<p class=\"hint\">Click a column's header to sort by it; \
         hover a row or a bar for details, click it to pin them (their links open in a new \
         tab). An exec is named by its container's name, else its command, else its cgroup \
         path. Net is the exec's sockets (IP bytes, loopback \
         included); procs counts the processes forked in the exec (not one moved into it).</p>\n<div class=\"scroll\"><table id=\"execs\">\n<thead><tr>",
    );
    for (key, header, is_text) in COLUMNS {
        let _ = write!(
            s,
            "<th data-key=\"{key}\" data-type=\"{}\" aria-sort=\"{}\">{header}</th>",
            if is_text { "text" } else { "number" },
            if key == "start" { "ascending" } else { "none" }
        );
    }
    s.push_str("</tr></thead>\n<tbody>\n");
    for (i, r) in build.records.iter().enumerate() {
        let _ = write!(
            s,
            "<tr data-row=\"{i}\" data-cgroup-id=\"{}\">",
            r.cgroup_id
        );
        for c in cells(r, t0) {
            let title = c
                .title
                .map(|t| format!(" title=\"{}\"", esc(&t)))
                .unwrap_or_default();
            let _ = write!(
                s,
                "<td data-key=\"{}\" data-v=\"{}\"{title}>{}</td>",
                c.key,
                esc(&c.v),
                c.html
            );
        }
        s.push_str("</tr>\n");
    }
    s.push_str("</tbody>\n</table></div>\n</section>\n");
}

#[cfg(test)]
mod tests {
    use super::super::tests::{cpu, line, with};
    use super::*;

    #[test]
    fn escapes_every_record_string() {
        let evil = r#"<img src=x onerror=alert(1)>&"'"#;
        let json = serde_json::to_string(evil).unwrap();
        let rec = line("x", 1, "ended", 0, 100, &cpu(1, 0, 0, 2))
            .replace(r#""exec":"x""#, &format!(r#""exec":{json}"#))
            .replace("dd if=/dev/zero", "</template><script>alert(2)</script>");
        let b = Build::read(rec.as_bytes(), "a<b>.jsonl").unwrap();
        let page = render(&b, "a<b>.jsonl");
        assert!(!page.contains("<img"), "{page}");
        assert!(!page.contains("<script>alert"), "{page}");
        assert!(!page.contains("<b>.jsonl"), "{page}");
        assert!(page.contains("&lt;img src=x onerror=alert(1)&gt;&amp;&quot;&#39;"));
        assert_eq!(esc("a&<>\"'b"), "a&amp;&lt;&gt;&quot;&#39;b");
    }

    #[test]
    fn page_is_self_contained_and_lists_every_exec() {
        let text = [
            line(
                "compile",
                1,
                "ended",
                0,
                2000,
                &cpu(1_500_000_000, 0, 0, 1_900_000_000),
            ),
            line("fetch", 2, "ended", 1, 500, &cpu(100, 0, 300, 1000)),
            line("idle", 3, "running", 2, 100, &cpu(0, 0, 0, 0)),
        ]
        .join("\n");
        let b = Build::read(text.as_bytes(), "t").unwrap();
        let page = render(&b, "t");
        // Nothing is fetched: no URL in a src or href, no external reference.
        for bad in ["src=", "href=", "url(", "@import", "http://", "https://"] {
            let n = page.matches(bad).count();
            let allowed = if bad == "http://" { 1 } else { 0 }; // the SVG namespace
            assert_eq!(n, allowed, "{bad} in the page");
        }
        assert_eq!(page.matches("<tr data-row=").count(), 3);
        assert_eq!(page.matches("<g class=\"exec").count(), 3);
        assert_eq!(page.matches("<template id=\"detail-").count(), 3);
        assert!(page.contains("<g class=\"exec running\" data-row=\"2\">"));
        assert!(page.contains("<rect class=\"none\""), "a bar without tasks");
        assert!(page.contains("data-execs=\"3\" data-running=\"1\""));
        assert!(page.contains("<td data-key=\"disk_write\" data-v=\"1048576\">1.0MiB</td>"));
        assert!(page.contains("<td data-key=\"memory_peak\" data-v=\"\" title=\"the memory"));
    }

    #[test]
    fn only_web_addresses_become_links() {
        for good in [
            "https://github.example/acme/app/actions/runs/1",
            "http://ci.example:8080/job/app/41/",
            "HTTPS://CI.EXAMPLE/x?a=1&b=2#frag",
        ] {
            assert!(web_url(good), "{good}");
        }
        for bad in [
            "javascript:alert(1)",
            "JavaScript:alert(1)//https://x",
            "data:text/html,<script>alert(1)</script>",
            "https://",
            "https:///path",
            "https:\\\\x",
            "//ci.example/x",
            "ftp://ci.example/x",
            " https://ci.example/x",
            "https://ci.example/a b",
            "https://ci.example/a\nb",
            "https://ci.example/\u{7}",
            "",
        ] {
            assert!(!web_url(bad), "{bad:?}");
        }
    }

    #[test]
    fn ci_steps_link_to_their_run_and_task() {
        let ci = |system: &str, attrs: &str, trace: &str| {
            format!(r#""ci":{{"system":"{system}","attributes":{{{attrs}}}{trace}}}"#)
        };
        let tp = r#","trace":{"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7","sampled":true,"tracestate":"v=<x>"}"#;
        let text = [
            with(
                &line("gl", 1, "ended", 0, 100, &cpu(1, 0, 0, 2)),
                &format!(
                    r#""command":"make test",{}"#,
                    ci(
                        "gitlab_ci",
                        r#""cicd.pipeline.name":"group/app","cicd.pipeline.run.id":"99","cicd.pipeline.task.name":"test","cicd.pipeline.task.run.id":"555","cicd.pipeline.run.url.full":"https://gitlab.example/group/app/-/pipelines/99?a=1&b=\"2\"","cicd.pipeline.task.run.url.full":"https://gitlab.example/group/app/-/jobs/555""#,
                        tp
                    )
                ),
            ),
            with(
                &line("gh", 2, "ended", 1, 100, &cpu(1, 0, 0, 2)),
                &ci(
                    "github_actions",
                    r#""cicd.pipeline.name":"CI","cicd.pipeline.run.id":"7","cicd.pipeline.task.name":"build","cicd.pipeline.run.url.full":"javascript:alert(1)/acme/app/actions/runs/7""#,
                    "",
                ),
            ),
            line("plain", 3, "ended", 2, 100, &cpu(1, 0, 0, 2)),
        ]
        .join("\n");
        let b = Build::read(text.as_bytes(), "t").unwrap();
        let page = render(&b, "t");
        let run = r#"<a href="https://gitlab.example/group/app/-/pipelines/99?a=1&amp;b=&quot;2&quot;" target="_blank" rel="noopener noreferrer">"#;
        let task = r#"<a href="https://gitlab.example/group/app/-/jobs/555" target="_blank" rel="noopener noreferrer">"#;
        // Each in the table and in the hover details.
        assert_eq!(page.matches(run).count(), 2, "{page}");
        assert_eq!(page.matches(task).count(), 2, "{page}");
        assert_eq!(page.matches("href=").count(), 4, "no other link");
        assert!(page.contains(&format!("{run}run 99</a>")));
        assert!(page.contains(&format!("{task}test #555</a>")));
        // Not an http(s) address: shown, as text.
        assert!(!page.contains("href=\"javascript"));
        assert!(page.contains("7 <span class=\"nolink\""), "{page}");
        assert!(page.contains("(javascript:alert(1)/acme/app/actions/runs/7)"));
        // Named by its command, the path under it; the trace id in the table and details.
        assert!(
            page.contains(
                "<td data-key=\"exec\" data-v=\"make test\" title=\"make test\ncgroup path: gl\">\
                 <span class=\"name\">make test</span><span class=\"sub\">gl</span></td>"
            ),
            "{page}"
        );
        // An exec named by its path shows it once.
        assert!(page.contains(
            "<td data-key=\"exec\" data-v=\"gh\" title=\"gh\"><span class=\"name\">gh</span></td>"
        ));
        assert!(page.contains("<h3>make test</h3>"));
        assert!(page.contains("<tr data-key=\"path\"><th>cgroup path</th><td>gl</td></tr>"));
        assert!(page.contains(
            "<span class=\"sub trace\" title=\"4bf92f3577b34da6a3ce929d0e0e4736\">trace 4bf92f35…</span></td>"
        ));
        assert!(page.contains(
            "data-v=\"GitLab CI · group/app · run 99 · test trace 4bf92f3577b34da6a3ce929d0e0e4736\""
        ));
        assert!(
            page.contains(&format!("{task}test</a>")),
            "the table's task link"
        );
        assert!(page.contains("<code>4bf92f3577b34da6a3ce929d0e0e4736</code>, parent span <code>00f067aa0ba902b7</code>, sampled; tracestate v=&lt;x&gt;"));
        assert!(page.contains("<tr data-key=\"ci\"><th>CI</th><td>GitLab CI</td></tr>"));
        assert!(page.contains("data-v=\"GitHub Actions · CI · run 7 · build\""));
        // A record without CI context has an empty CI cell.
        assert!(page.contains("<td data-key=\"ci\" data-v=\"\"></td><td data-key=\"state\""));
        // The policy still forbids every fetch.
        assert!(page.contains("content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; base-uri 'none'; form-action 'none'\""));
    }

    #[test]
    fn a_run_known_only_by_its_address_is_still_linked() {
        let rec = with(
            &line("bk", 1, "ended", 0, 100, &cpu(1, 0, 0, 2)),
            r#""ci":{"system":"buildkite","attributes":{"cicd.pipeline.run.url.full":"https://buildkite.example/b/12"}}"#,
        );
        let page = render(&Build::read(rec.as_bytes(), "t").unwrap(), "t");
        let a = r#"<a href="https://buildkite.example/b/12" target="_blank" rel="noopener noreferrer">"#;
        assert!(
            page.contains(&format!(
                r#"data-v="Buildkite · run">Buildkite &middot; {a}run</a></td>"#
            )),
            "{page}"
        );
        assert!(page.contains(&format!(
            "<th>run</th><td>{a}https://buildkite.example/b/12</a>"
        )));
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick_step(10_000_000_000), 1_000_000_000);
        assert_eq!(tick_step(12_000_000_000), 2_000_000_000);
        assert_eq!(tick_step(1), 1);
        assert_eq!(tick_step(35_000_000), 5_000_000);
        assert_eq!(tick_label(2_000_000_000, 1_000_000_000), "2s");
        assert_eq!(tick_label(1_500_000_000, 500_000_000), "1.5s");
        assert_eq!(tick_label(1_250_000_000, 50_000_000), "1.25s");
        assert_eq!(tick_label(500_000_000, 500_000_000), "500ms");
        assert_eq!(truncate_start("a/very/long/path", 6), "…/path");
    }
}
