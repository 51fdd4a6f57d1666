//! `--prometheus ADDR`: the same metrics in the Prometheus text format, named as the
//! OpenTelemetry-to-Prometheus compatibility rules say (dots to underscores, the unit as a
//! suffix, `_total` on counters, resource attributes in `target_info`).

use std::{
    fmt::Write as _,
    net::SocketAddr,
    sync::{Arc, Mutex},
    thread::JoinHandle,
};

use anyhow::{Result, anyhow};

use super::{
    Shared, lock,
    metrics::{DEFS, Def, ExecSeries, Kind, latency_bounds_s},
};

pub(crate) struct Server {
    pub(crate) addr: SocketAddr,
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    pub(crate) fn start(addr: SocketAddr, shared: Arc<Mutex<Shared>>) -> Result<Self> {
        let server = tiny_http::Server::http(addr)
            .map_err(|e| anyhow!("cannot serve Prometheus metrics on {addr}: {e}"))?;
        let addr = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| anyhow!("cannot serve Prometheus metrics on {addr}"))?;
        let server = Arc::new(server);
        let s = server.clone();
        let target = target_info();
        let thread = std::thread::Builder::new()
            .name("profiler-prometheus".into())
            .spawn(move || {
                for req in s.incoming_requests() {
                    let resp = if req.url() == "/metrics" || req.url().starts_with("/metrics?") {
                        let series = lock(&shared).for_prometheus();
                        let body = render(&series, &target);
                        let ct = tiny_http::Header::from_bytes(
                            &b"Content-Type"[..],
                            &b"text/plain; version=0.0.4; charset=utf-8"[..],
                        )
                        .expect("static header");
                        tiny_http::Response::from_string(body).with_header(ct)
                    } else {
                        tiny_http::Response::from_string("see /metrics\n").with_status_code(404)
                    };
                    let _ = req.respond(resp);
                }
            })?;
        Ok(Self {
            addr,
            server,
            thread: Some(thread),
        })
    }

    pub(crate) fn stop(mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The Prometheus name of a metric: the OTel name with `.` as `_`, the unit as a suffix
/// (`s` -> seconds, `By` -> bytes; `{...}` annotations dropped), `_total` on counters.
pub fn prom_name(d: &Def) -> String {
    let mut n: String = d
        .name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == ':' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let unit = match d.unit {
        "s" => "seconds",
        "By" => "bytes",
        "1" => "ratio",
        u if u.starts_with('{') => "",
        u => u,
    };
    if !unit.is_empty() && !n.ends_with(unit) {
        n.push('_');
        n.push_str(unit);
    }
    if d.kind == Kind::Counter {
        n.push_str("_total");
    }
    n
}

fn label_name(k: &str) -> String {
    let n: String = k
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if n.starts_with(|c: char| c.is_ascii_digit()) {
        format!("key_{n}")
    } else {
        n
    }
}

/// A label value in the text format: `\\`, `"` and newline escaped as the format says; other
/// control and bidirectional characters (ESC, BEL, CR, U+202E) shown as their escapes, as in
/// the records, so that a scrape's text cannot drive a terminal or reorder a name.
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c if crate::render::needs_escape(c) => {
                // `\u{1b}`, its backslash escaped for the format.
                out.push('\\');
                out.extend(c.escape_default());
            }
            c => out.push(c),
        }
    }
    out
}

fn labels<'a>(
    pairs: impl Iterator<Item = (&'a str, &'a str)>,
    extra: Option<(&str, &str)>,
) -> String {
    let mut s = String::new();
    let extra = extra.map(|(k, v)| (k.to_owned(), v.to_owned()));
    let all = pairs
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .chain(extra);
    for (k, v) in all {
        let (k, v) = (k.as_str(), v.as_str());
        if !s.is_empty() {
            s.push(',');
        }
        let _ = write!(s, "{}=\"{}\"", label_name(k), escape(v));
    }
    format!("{{{s}}}")
}

fn target_info() -> String {
    let host = crate::host::host_name();
    format!(
        "# HELP target_info Target metadata\n# TYPE target_info gauge\ntarget_info{}\n",
        labels(
            [
                ("service.name", "profiler"),
                ("service.version", env!("CARGO_PKG_VERSION")),
                ("host.name", host),
            ]
            .into_iter(),
            None
        ) + " 1"
    )
}

fn num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// The text exposition of the given execs.
pub fn render(series: &[Arc<ExecSeries>], target: &str) -> String {
    let mut out = String::from(target);
    let bounds = latency_bounds_s();
    for (i, d) in DEFS.iter().enumerate() {
        let name = prom_name(d);
        let mut body = String::new();
        for s in series {
            let base = || s.attrs.iter().map(|(k, v)| (k.as_str(), v.as_str()));
            for p in s.points.iter().filter(|p| p.metric as usize == i) {
                let l = labels(
                    base().chain(p.attrs.iter().map(|(k, v)| (*k, v.as_ref()))),
                    None,
                );
                let _ = writeln!(body, "{name}{l} {}", num(p.value));
            }
            for h in s.hists.iter().filter(|h| h.metric as usize == i) {
                let mut cum = 0u64;
                for (b, c) in h.counts.iter().enumerate() {
                    cum += c;
                    let le = bounds
                        .get(b)
                        .map(|x| format!("{x}"))
                        .unwrap_or("+Inf".into());
                    let l = labels(
                        base().chain(h.attrs.iter().map(|(k, v)| (*k, v.as_ref()))),
                        Some(("le", &le)),
                    );
                    let _ = writeln!(body, "{name}_bucket{l} {cum}");
                }
                let l = labels(
                    base().chain(h.attrs.iter().map(|(k, v)| (*k, v.as_ref()))),
                    None,
                );
                let _ = writeln!(body, "{name}_sum{l} {}", h.sum_s);
                let _ = writeln!(body, "{name}_count{l} {cum}");
            }
        }
        if body.is_empty() {
            continue;
        }
        let kind = match d.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let _ = writeln!(out, "# HELP {name} {}", d.description);
        let _ = writeln!(out, "# TYPE {name} {kind}");
        out.push_str(&body);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn label_values_escape_controls_and_bidi() {
        assert_eq!(escape("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
        assert_eq!(escape("\x1b[31m\x07\r"), "\\\\u{1b}[31m\\\\u{7}\\\\r");
        assert_eq!(escape("x\u{202e}y"), "x\\\\u{202e}y");
        assert_eq!(escape("plain ünï"), "plain ünï");
    }

    use super::*;
    use crate::export::metrics::{Hist, M, Point};

    #[test]
    fn docs_figures_md_gives_every_prometheus_name() {
        let table = crate::docs_check::section("Prometheus names");
        for d in DEFS {
            let cells = crate::docs_check::row(table, d.name).unwrap_or_else(|| {
                panic!(
                    "docs/figures.md, \"Prometheus names\" has no row for {}",
                    d.name
                )
            });
            assert_eq!(cells[1], format!("`{}`", prom_name(d)), "{}", d.name);
        }
    }

    #[test]
    fn names_follow_the_compatibility_rules() {
        let n = |m: M| prom_name(&DEFS[m as usize]);
        assert_eq!(n(M::CpuTime), "container_cpu_time_seconds_total");
        assert_eq!(n(M::DiskIo), "container_disk_io_bytes_total");
        assert_eq!(n(M::MemoryUsage), "container_memory_usage_bytes");
        assert_eq!(
            n(M::ContextSwitches),
            "profiler_exec_cpu_context_switches_total"
        );
        assert_eq!(n(M::DiskLatency), "profiler_exec_disk_latency_seconds");
        assert_eq!(label_name("k8s.namespace.name"), "k8s_namespace_name");
    }

    #[test]
    fn renders_points_and_histograms() {
        let mut counts = vec![0u64; latency_bounds_s().len() + 1];
        counts[1] = 2;
        counts[4] = 1;
        let s = Arc::new(ExecSeries {
            cgroup_id: 7,
            attrs: vec![("profiler.exec.path".into(), "a\"b".into())],
            kv: vec![],
            points: vec![Point {
                metric: M::CpuTime,
                attrs: vec![],
                value: 1.5,
            }],
            hists: vec![Hist {
                metric: M::DiskLatency,
                attrs: vec![("disk.io.direction", "write".into())],
                counts,
                sum_s: 0.001,
            }],
        });
        let t = render(&[s], "");
        assert!(
            t.contains("# TYPE container_cpu_time_seconds_total counter\n"),
            "{t}"
        );
        assert!(
            t.contains("container_cpu_time_seconds_total{profiler_exec_path=\"a\\\"b\"} 1.5\n"),
            "{t}"
        );
        assert!(t.contains("profiler_exec_disk_latency_seconds_count{profiler_exec_path=\"a\\\"b\",disk_io_direction=\"write\"} 3\n"), "{t}");
        assert!(t.contains("le=\"+Inf\"} 3\n"), "{t}");
        assert!(!t.contains("container_disk_io"), "no empty families: {t}");
    }
}
