//! The fleet test's model (tests/tests/fleet.rs): what the recording rules of
//! deploy/prometheus/profiler-rules.yml and the queries of deploy/grafana/profiler-dashboard.json
//! should answer for a set of execs, from the profilers' records of them, and how to compare
//! that with what a real Prometheus answers.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::Path,
    thread,
    time::{Duration, Instant},
};

use crate::{Value, backends::Prometheus, secs, u};

/// One exec of the test: where it ran and, once ended, its record.
pub struct Ran {
    pub host: &'static str,
    pub instance: String,
    pub id: u64,
    /// Still running when the figures are checked: its step (no record of it yet).
    pub running: Option<&'static str>,
    /// The final record; None for the execs still running.
    pub rec: Option<Value>,
}

/// An expected value: exact (to float rounding), or present with a value the test cannot
/// know (a running exec's).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum W {
    V(f64),
    Any,
}

impl std::ops::Add for W {
    type Output = W;
    fn add(self, o: W) -> W {
        match (self, o) {
            (W::V(a), W::V(b)) => W::V(a + b),
            _ => W::Any,
        }
    }
}

pub type Key = Vec<String>;
pub type Want = BTreeMap<Key, W>;
pub type Got = Vec<(BTreeMap<String, String>, f64)>;
/// An exec's values of a metric, by the value of the label it is split by.
pub type Split = Vec<(&'static str, Option<W>)>;
/// An exec's series key at one level of aggregation (None: left out).
pub type KeyFn<'a> = &'a dyn Fn(&Fig) -> Option<Key>;

pub fn close(got: f64, want: f64) -> bool {
    (got - want).abs() <= 1e-9 * want.abs().max(1.0)
}

/// Compare a query's answer with `want`, series keyed by the values of `keys` (absent labels
/// as ""): the same series, each value within float rounding. `ignore` drops keys whose
/// presence the test cannot know.
pub fn compare(
    got: &Got,
    keys: &[&str],
    want: &Want,
    ignore: &dyn Fn(&Key) -> bool,
) -> Result<(), String> {
    let mut seen = BTreeMap::new();
    for (labels, v) in got {
        let k: Key = keys
            .iter()
            .map(|l| labels.get(*l).cloned().unwrap_or_default())
            .collect();
        if ignore(&k) {
            continue;
        }
        if seen.insert(k.clone(), *v).is_some() {
            return Err(format!("two series for {k:?}"));
        }
    }
    let want: BTreeMap<&Key, &W> = want.iter().filter(|(k, _)| !ignore(k)).collect();
    let got_keys: BTreeSet<&Key> = seen.keys().collect();
    let want_keys: BTreeSet<&Key> = want.keys().copied().collect();
    if got_keys != want_keys {
        return Err(format!(
            "series {got_keys:?}, expected {want_keys:?} (values {seen:?})"
        ));
    }
    for (k, w) in want {
        let g = seen[k];
        if let W::V(w) = w
            && !close(g, *w)
        {
            return Err(format!("{k:?}: {g}, expected {w}"));
        }
    }
    Ok(())
}

/// Poll `promql` until `check` accepts its answer; panics after `timeout` with the last
/// answer and reason.
pub fn wait_check(
    prom: &Prometheus,
    promql: &str,
    timeout: Duration,
    check: impl Fn(&Got) -> Result<(), String>,
) -> Got {
    let deadline = Instant::now() + timeout;
    loop {
        let got = prom.query(promql);
        match check(&got) {
            Ok(()) => return got,
            Err(why) => assert!(
                Instant::now() < deadline,
                "{promql}\n  {why}\n  answer: {got:?}\n{}",
                prom.output()
            ),
        }
        thread::sleep(Duration::from_millis(200));
    }
}

/// Wait until `promql` answers `want` (see [`compare`]).
pub fn expect(
    prom: &Prometheus,
    promql: &str,
    keys: &[&str],
    want: &Want,
    ignore: &dyn Fn(&Key) -> bool,
) {
    wait_check(prom, promql, secs(60), |got| {
        compare(got, keys, want, ignore)
    });
}

/// What the rules and dashboard show of one exec.
#[derive(Clone, Debug)]
pub struct Fig {
    pub host: String,
    pub instance: String,
    pub id: String,
    pub step: String,
    pub pipeline: String,
    pub running: bool,
    pub cpu: W,
    pub io: W,
    pub read: W,
    pub write: W,
    /// Bytes received and sent, loopback left out: None without the socket view.
    pub rx: Option<W>,
    pub tx: Option<W>,
    /// OOM kills: None where memory.events cannot be read.
    pub oom: Option<W>,
    /// Some(failed) for an ended exec.
    pub failed: Option<bool>,
}

impl Fig {
    pub fn of(r: &Ran, socket_view: bool, oom_view: bool) -> Fig {
        let Some(rec) = r.rec.as_ref().filter(|_| r.running.is_none()) else {
            return Fig {
                host: r.host.to_owned(),
                instance: r.instance.clone(),
                id: r.id.to_string(),
                step: r.running.expect("a record or a step").to_owned(),
                pipeline: String::new(),
                running: true,
                cpu: W::Any,
                io: W::Any,
                read: W::Any,
                write: W::Any,
                rx: socket_view.then_some(W::Any),
                tx: socket_view.then_some(W::Any),
                oom: oom_view.then_some(W::Any),
                failed: None,
            };
        };
        let secs_of = |ns: &Value| u(ns) as f64 / 1e9;
        let b = |v: &Value| W::V(u(v) as f64);
        let sock = &rec["network"]["sockets"];
        let net = |k: &str| {
            sock.get(k).map(|all| {
                let lo = sock["loopback"].get(k).map_or(0, u);
                W::V(u(all).saturating_sub(lo) as f64)
            })
        };
        // As the exporter's outcome: a signal, else the code (0 when unknown).
        let exit = &rec["exit"];
        let failed = exit.is_object().then(|| {
            exit.get("signal").is_some_and(|s| !s.is_null())
                || exit["code"].as_i64().unwrap_or(0) != 0
        });
        Fig {
            host: rec["host"].as_str().unwrap().to_owned(),
            instance: r.instance.clone(),
            id: r.id.to_string(),
            step: rec["step"].as_str().unwrap().to_owned(),
            pipeline: rec["ci"]["attributes"]["cicd.pipeline.name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            running: false,
            cpu: W::V(secs_of(&rec["cpu"]["user_ns"]) + secs_of(&rec["cpu"]["system_ns"])),
            io: W::V(secs_of(&rec["cpu"]["iowait_ns"])),
            read: b(&rec["disk"]["read_bytes"]),
            write: b(&rec["disk"]["write_bytes"]),
            rx: net("rx_bytes"),
            tx: net("tx_bytes"),
            oom: rec["cgroup"]["memory_events"]["value"]
                .get("oom_kill")
                .map(|v| W::V(u(v) as f64)),
            failed,
        }
    }
}

impl W {
    pub fn val(self) -> f64 {
        match self {
            W::V(v) => v,
            W::Any => panic!("no known value"),
        }
    }
}

/// Sum `value` over `figs` by `key` (None leaves an exec out).
pub fn agg(
    figs: &[Fig],
    key: impl Fn(&Fig) -> Option<Key>,
    value: impl Fn(&Fig) -> Option<W>,
) -> Want {
    let mut out = Want::new();
    for f in figs {
        if let (Some(k), Some(v)) = (key(f), value(f)) {
            let e = out.entry(k).or_insert(W::V(0.0));
            *e = *e + v;
        }
    }
    out
}

/// A per-exec figure of the rules (and of the dashboard's table): its name in the rules, the
/// extra label it is split by, and the value of one exec for each value of that label.
pub struct Metric {
    pub name: &'static str,
    pub split: Option<&'static str>,
    pub values: fn(&Fig) -> Split,
}

pub fn metrics() -> Vec<Metric> {
    vec![
        Metric {
            name: "profiler_exec_cpu_seconds",
            split: None,
            values: |f| vec![("", Some(f.cpu))],
        },
        Metric {
            name: "profiler_exec_io_wait_seconds",
            split: None,
            values: |f| vec![("", Some(f.io))],
        },
        Metric {
            name: "profiler_exec_disk_bytes",
            split: Some("disk_io_direction"),
            values: |f| vec![("read", Some(f.read)), ("write", Some(f.write))],
        },
        Metric {
            name: "profiler_exec_network_bytes",
            split: Some("network_io_direction"),
            values: |f| vec![("receive", f.rx), ("transmit", f.tx)],
        },
        Metric {
            name: "profiler_exec_oom_kills",
            split: None,
            values: |f| vec![("", f.oom)],
        },
        Metric {
            name: "profiler_exec_exits",
            split: None,
            values: |f| vec![("", f.failed.map(|_| W::V(1.0)))],
        },
        Metric {
            name: "profiler_exec_failures",
            split: None,
            values: |f| vec![("", f.failed.map(|x| W::V(if x { 1.0 } else { 0.0 })))],
        },
    ]
}

/// Expected series of a metric at one level: `level` gives an exec's key (None: left out).
pub fn level_want(figs: &[Fig], m: &Metric, level: &dyn Fn(&Fig) -> Option<Key>) -> Want {
    let mut out = Want::new();
    for split in (m.values)(&figs[0]).into_iter().map(|(s, _)| s) {
        let part = agg(
            figs,
            |f| {
                let mut k = level(f)?;
                if m.split.is_some() {
                    k.push(split.to_owned());
                }
                Some(k)
            },
            |f| {
                (m.values)(f)
                    .into_iter()
                    .find(|(s, _)| *s == split)
                    .and_then(|(_, v)| v)
            },
        );
        out.extend(part);
    }
    out
}

pub fn keys_with<'a>(base: &[&'a str], m: &Metric) -> Vec<&'a str> {
    let mut k = base.to_vec();
    if let Some(s) = m.split {
        k.push(s);
    }
    k
}

/// `s` inside a PromQL double-quoted string.
pub fn lit(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// A value for `=~` in PromQL, as Grafana writes a multi-value variable: each value's regex
/// metacharacters escaped, joined with `|`, then escaped for a double-quoted string.
pub fn regex_of(values: &[&str]) -> String {
    let alt: Vec<String> = values
        .iter()
        .map(|v| {
            let mut s = String::new();
            for c in v.chars() {
                if "\\.+*?()|[]{}^$".contains(c) {
                    s.push('\\');
                }
                s.push(c);
            }
            s
        })
        .collect();
    lit(&format!("({})", alt.join("|")))
}

/// The dashboard's template variables and query text.
pub struct Dashboard {
    pub json: Value,
}

impl Dashboard {
    pub fn load() -> Dashboard {
        let p =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/profiler-dashboard.json");
        let json: Value = serde_json::from_str(&fs::read_to_string(&p).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        Dashboard { json }
    }

    /// (panel title, refId, expr) of every query of every panel.
    pub fn targets(&self) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        let mut panels: Vec<&Value> = self.json["panels"].as_array().unwrap().iter().collect();
        while let Some(p) = panels.pop() {
            if let Some(inner) = p["panels"].as_array() {
                panels.extend(inner);
            }
            for t in p["targets"].as_array().into_iter().flatten() {
                out.push((
                    p["title"].as_str().unwrap().to_owned(),
                    t["refId"].as_str().unwrap().to_owned(),
                    t["expr"].as_str().unwrap().to_owned(),
                ));
            }
        }
        out
    }

    /// A query variable's `label_values(SELECTOR, LABEL)`.
    pub fn variable(&self, name: &str) -> (String, String) {
        let v = self.json["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no variable {name}"));
        let q = v["query"]["query"]
            .as_str()
            .or(v["query"].as_str())
            .unwrap();
        let inner = q
            .strip_prefix("label_values(")
            .and_then(|s| s.strip_suffix(')'))
            .unwrap_or_else(|| panic!("variable {name}: {q}"));
        let (sel, label) = inner.rsplit_once(',').unwrap();
        (sel.trim().to_owned(), label.trim().to_owned())
    }
}

/// A choice of the dashboard's variables.
pub struct Selection {
    pub hosts: Vec<String>,
    pub steps: Option<Vec<String>>,
}

impl Selection {
    pub fn substitute(&self, expr: &str) -> String {
        let hosts: Vec<&str> = self.hosts.iter().map(String::as_str).collect();
        let steps = match &self.steps {
            Some(s) => regex_of(&s.iter().map(String::as_str).collect::<Vec<_>>()),
            None => ".*".to_owned(),
        };
        let q = expr
            .replace("${host}", "$host")
            .replace("${step}", "$step")
            .replace("$host", &regex_of(&hosts))
            .replace("$step", &steps)
            .replace("$__range", "10m")
            .replace("$__rate_interval", "1m")
            .replace("$__interval", "15s");
        assert!(!q.contains('$'), "a variable left in {q}");
        q
    }

    pub fn holds(&self, f: &Fig) -> bool {
        self.hosts.contains(&f.host) && self.steps.as_ref().is_none_or(|s| s.contains(&f.step))
    }
}

/// What a query of the dashboard promises under selection `sel`: (key labels, series, whether
/// the running sleeps' step may be absent).
pub fn panel_want(
    title: &str,
    refid: &str,
    all: &[Fig],
    sel: &Selection,
) -> (Vec<&'static str>, Want, bool) {
    let figs: Vec<Fig> = all.iter().filter(|f| sel.holds(f)).cloned().collect();
    let step = |f: &Fig| Some(vec![f.step.clone()]);
    let by_step = |v: &dyn Fn(&Fig) -> Option<W>| agg(&figs, step, v);
    let pipeline_step = |f: &Fig| Some(vec![f.pipeline.clone(), f.step.clone()]);
    let nonzero = |w: Want| -> Want { w.into_iter().filter(|(_, v)| *v != W::V(0.0)).collect() };
    let metric = |name: &str| metrics().into_iter().find(|m| m.name == name).unwrap();
    let s = vec!["profiler_exec_step"];
    match (title, refid) {
        ("Top steps by CPU", "A") => (s, by_step(&|f| Some(f.cpu)), false),
        ("CPU seconds per exec by step", "A") => {
            let cpu = by_step(&|f| Some(f.cpu));
            let n = by_step(&|_| Some(W::V(1.0)));
            let w = cpu
                .into_iter()
                .map(|(k, c)| {
                    let v = match c {
                        W::V(c) => W::V(c / n[&k].val()),
                        W::Any => W::Any,
                    };
                    (k, v)
                })
                .collect();
            (s, w, false)
        }
        ("IO-wait share by step", "A") => {
            let cpu = by_step(&|f| Some(f.cpu));
            let w = by_step(&|f| Some(f.io))
                .into_iter()
                .filter_map(|(k, io)| match (io, cpu[&k]) {
                    (W::V(io), W::V(c)) => (io + c > 0.0).then(|| (k, W::V(io / (io + c)))),
                    _ => Some((k, W::Any)),
                })
                .collect();
            (s, w, true)
        }
        ("Disk bytes by step", "A") => (
            vec!["profiler_exec_step", "disk_io_direction"],
            level_want(&figs, &metric("profiler_exec_disk_bytes"), &step),
            false,
        ),
        ("Network bytes by step", "A") => (
            vec!["profiler_exec_step", "network_io_direction"],
            level_want(&figs, &metric("profiler_exec_network_bytes"), &step),
            false,
        ),
        ("OOM kills and failures by step and pipeline", "A") => (
            vec!["cicd_pipeline_name", "profiler_exec_step"],
            nonzero(agg(&figs, pipeline_step, |f| {
                f.oom.filter(|v| *v != W::Any)
            })),
            false,
        ),
        ("OOM kills and failures by step and pipeline", "B") => (
            vec!["cicd_pipeline_name", "profiler_exec_step"],
            nonzero(agg(&figs, pipeline_step, |f| {
                f.failed.map(|x| W::V(if x { 1.0 } else { 0.0 }))
            })),
            false,
        ),
        // Not filtered by step: every running exec of the hosts chosen.
        ("Execs running per host", "A") => (
            vec!["host_name"],
            agg(
                all,
                |f| (f.running && sel.hosts.contains(&f.host)).then(|| vec![f.host.clone()]),
                |_| Some(W::V(1.0)),
            ),
            false,
        ),
        ("Steps", r) => {
            let w = match r {
                "A" => by_step(&|_| Some(W::V(1.0))),
                "B" => by_step(&|f| Some(f.cpu)),
                "C" => by_step(&|f| Some(f.io)),
                "D" => by_step(&|f| Some(f.write)),
                "E" => by_step(&|f| Some(f.read)),
                "F" => by_step(&|f| Some(f.rx? + f.tx?)),
                "G" => nonzero(by_step(&|f| {
                    f.failed.map(|x| W::V(if x { 1.0 } else { 0.0 }))
                })),
                "H" => by_step(&|f| f.oom),
                _ => panic!("the table's query {r} has no expectation here"),
            };
            (s, w, false)
        }
        _ => panic!("dashboard query {title:?} ({refid}) has no expectation here: add one"),
    }
}
