//! The page of many runs: one row per step, each figure as median, p95 and max; with
//! `--compare`, the steps that moved first. Self-contained and script-free, as the build page.

use std::fmt::Write as _;

use super::esc;
use crate::report::{
    compare::{StepDiff, Verdict},
    many::{Moved, overview, value},
    steps::{FIGURES, StepSummary, Steps},
};

const CSS: &str = "body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}\
table{border-collapse:collapse;margin:1em 0}td,th{padding:.25em .6em;border-bottom:1px solid #ddd;\
text-align:right;vertical-align:top}td:first-child,th:first-child{text-align:left;max-width:40em;\
overflow-wrap:anywhere}small{color:#666}.heavier{color:#b00020;font-weight:600}.lighter{color:#1b7f3b}\
.failed{color:#b00020}";

pub fn render(
    s: &Steps,
    summaries: &[StepSummary],
    compared: Option<(&Steps, &[StepDiff])>,
    source: &str,
) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'\">\n\
         <title>Build steps: {}</title>\n<style>{CSS}</style>\n</head>\n<body>\n\
         <h1>Build steps <small>{}</small></h1>\n<p id=\"overview\">{}.</p>\n",
        esc(source),
        esc(source),
        esc(&overview(s))
    );
    if let Some((base, diffs)) = compared {
        let _ = writeln!(
            o,
            "<h2>Compared with BASE</h2>\n<p>BASE: {}. A figure moved when NEW's median lies beyond \
             the range of BASE's execs by more than 10% of BASE's median.</p>\n<table id=\"compare\">\n\
             <tr><th>step</th><th>status</th><th>figure</th><th>BASE median (range)</th>\
             <th>NEW median</th><th>change</th></tr>",
            esc(&overview(base))
        );
        for d in diffs.iter().filter(|d| d.status != "same") {
            let moved: Vec<_> = d.moved().collect();
            if moved.is_empty() {
                let _ = writeln!(
                    o,
                    "<tr data-status=\"{0}\"><td>{1}</td><td>{0}</td><td colspan=\"4\">{2}</td></tr>",
                    d.status,
                    esc(&d.step),
                    if d.newly_failing() {
                        "fails, never in BASE"
                    } else {
                        ""
                    }
                );
            }
            for f in moved {
                let m = Moved::of(f);
                let class = if f.verdict == Verdict::Heavier {
                    "heavier"
                } else {
                    "lighter"
                };
                let _ = writeln!(
                    o,
                    "<tr data-status=\"{}\" data-figure=\"{}\"><td>{}</td><td class=\"{class}\">{class}</td>\
                     <td>{}</td><td>{} ({}–{})</td><td>{}</td><td class=\"{class}\">{}</td></tr>",
                    d.status,
                    f.figure,
                    esc(&d.step),
                    m.label,
                    m.base_median,
                    m.base_min,
                    m.base_max,
                    m.new_median,
                    m.change,
                );
            }
        }
        o.push_str("</table>\n");
    }
    o.push_str("<h2>Steps</h2>\n<table id=\"steps\">\n<tr><th>step</th><th>execs</th><th>runs</th><th>failed</th>");
    for f in FIGURES {
        let _ = write!(
            o,
            "<th>{}<br><small>median · p95 · max</small></th>",
            f.label
        );
    }
    o.push_str("</tr>\n");
    for x in summaries {
        let failed = if x.failed > 0 {
            format!("<span class=\"failed\">{}</span>", x.failed)
        } else {
            "0".into()
        };
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{failed}{}</td>",
            esc(&x.step),
            x.execs,
            x.runs,
            if x.oom_killed > 0 {
                format!(" <small>({} OOM)</small>", x.oom_killed)
            } else {
                String::new()
            }
        );
        for f in &FIGURES {
            match x.get(f) {
                Some(st) => {
                    let _ = write!(
                        o,
                        "<td data-median=\"{}\">{}<br><small>{} · {}</small></td>",
                        st.median,
                        value(f, st.median),
                        value(f, st.p95),
                        value(f, st.max)
                    );
                }
                None => o.push_str("<td>n/a</td>"),
            }
        }
        o.push_str("</tr>\n");
    }
    o.push_str("</table>\n</body>\n</html>\n");
    o
}
