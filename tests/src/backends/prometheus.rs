//! Debian's Prometheus, run by a test: it scrapes a `/metrics` endpoint and answers PromQL.

use std::{
    collections::BTreeMap,
    fs,
    io::{Read, Write as _},
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;

use super::{Captured, capture, free_ports, prometheus_bin};
use crate::secs;

/// GET `path` (with its query) from `addr` ("127.0.0.1:PORT") over plain HTTP/1.0 (no chunked
/// encoding, no compression): (status, body).
pub fn http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{text:?}"));
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(bad)?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(bad)?;
    Ok((status, body.to_string()))
}

/// Percent-encode a query parameter.
fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A sample value as Prometheus writes it ("1", "NaN", "+Inf").
fn sample_value(v: &Value) -> f64 {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("not a sample value: {v}"));
    s.parse()
        .unwrap_or_else(|e| panic!("sample value {s:?}: {e}"))
}

/// Prometheus (Debian's) scraping one target or several, optionally evaluating rule files,
/// with its own config and TSDB in a fresh temp directory, on a free loopback port. Killed and
/// removed on drop.
pub struct Prometheus {
    child: Child,
    port: u16,
    dir: PathBuf,
    captured: Arc<Mutex<Captured>>,
}

impl Prometheus {
    /// Scrape `target` ("127.0.0.1:PORT", path /metrics; job "profiler") every
    /// `scrape_interval`; returns once it is ready to answer queries.
    pub fn start(target: &str, scrape_interval: Duration) -> Prometheus {
        Self::start_with(&[target], scrape_interval, &[])
    }

    /// Scrape every one of `targets` (each its own `instance`, all of job "profiler") every
    /// `scrape_interval`, and evaluate the rules of `rule_files` (recording and alerting) as
    /// often; returns once it is ready to answer queries. A rule file Prometheus cannot load
    /// fails the start, with its log.
    pub fn start_with(
        targets: &[&str],
        scrape_interval: Duration,
        rule_files: &[&Path],
    ) -> Prometheus {
        static N: AtomicUsize = AtomicUsize::new(0);
        let bin = prometheus_bin();
        let dir = std::env::temp_dir().join(format!(
            "profiler-prometheus-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let every = scrape_interval.as_millis().max(1);
        // The scrape timeout may not exceed the interval.
        let timeout = every.min(10_000);
        let targets = targets
            .iter()
            .map(|t| format!("'{t}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut config = format!(
            "global:\n  scrape_interval: {every}ms\n  evaluation_interval: {every}ms\n\
             scrape_configs:\n  - job_name: profiler\n    scrape_interval: {every}ms\n    \
             scrape_timeout: {timeout}ms\n    metrics_path: /metrics\n    static_configs:\n      \
             - targets: [{targets}]\n"
        );
        if !rule_files.is_empty() {
            config.push_str("rule_files:\n");
            for f in rule_files {
                let f = f
                    .canonicalize()
                    .unwrap_or_else(|e| panic!("rule file {}: {e}", f.display()));
                config.push_str(&format!("  - '{}'\n", f.display()));
            }
        }
        fs::write(dir.join("prometheus.yml"), config).unwrap();
        let [port] = free_ports();
        let mut child = Command::new(&bin)
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                let _ = fs::remove_dir_all(&dir);
                panic!("start {}: {e}", bin.display())
            });
        let captured = Arc::default();
        // Readers end by themselves when it dies.
        drop(capture(
            child.stdout.take(),
            child.stderr.take(),
            &captured,
            "prometheus",
            |l| !l.contains("level=info") && !l.contains("level=debug"),
        ));
        let mut p = Prometheus {
            child,
            port,
            dir,
            captured,
        };
        let deadline = Instant::now() + secs(30);
        loop {
            if let Ok((200, _)) = http_get(&p.addr(), "/-/ready") {
                return p;
            }
            let exited = p.child.try_wait().unwrap();
            if exited.is_some() || Instant::now() > deadline {
                let _ = p.child.kill();
                let _ = p.child.wait();
                panic!(
                    "prometheus not ready on {} ({}):\n{}",
                    p.addr(),
                    exited.map_or("timeout".into(), |s| s.to_string()),
                    p.output()
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// "127.0.0.1:PORT" of its web UI and API.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// An instant PromQL query: (labels with `__name__`, value) per series; a scalar result is
    /// one sample without labels. Panics on an error answer (a bad query).
    pub fn query(&self, promql: &str) -> Vec<(BTreeMap<String, String>, f64)> {
        let path = format!("/api/v1/query?query={}", urlencode(promql));
        let (status, body) = http_get(&self.addr(), &path)
            .unwrap_or_else(|e| panic!("prometheus query {promql:?}: {e}"));
        let v: Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("prometheus query {promql:?}: {status} {body:?}: {e}"));
        assert_eq!(
            v["status"], "success",
            "prometheus query {promql:?}: {status} {body}"
        );
        let data = &v["data"];
        match data["resultType"].as_str() {
            Some("vector") => data["result"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| {
                    let labels = s["metric"]
                        .as_object()
                        .unwrap()
                        .iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                        .collect();
                    (labels, sample_value(&s["value"][1]))
                })
                .collect(),
            Some("scalar") => vec![(BTreeMap::new(), sample_value(&data["result"][1]))],
            _ => panic!("prometheus query {promql:?}: not an instant vector or scalar: {body}"),
        }
    }

    /// GET an API path (with its query) and return the answer's `data`; panics unless the
    /// status is "success".
    pub fn api(&self, path: &str) -> Value {
        let (status, body) =
            http_get(&self.addr(), path).unwrap_or_else(|e| panic!("prometheus GET {path}: {e}"));
        let v: Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("prometheus GET {path}: {status} {body:?}: {e}"));
        assert_eq!(
            v["status"], "success",
            "prometheus GET {path}: {status} {body}"
        );
        v["data"].clone()
    }

    /// The loaded rules (`/api/v1/rules`): every rule of every group, each with its `health`
    /// ("ok", "err", "unknown" before its first evaluation) and `lastError`.
    pub fn rules(&self) -> Vec<Value> {
        let data = self.api("/api/v1/rules");
        data["groups"]
            .as_array()
            .unwrap_or_else(|| panic!("no rule groups: {data}"))
            .iter()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect()
    }

    /// Poll [`Self::query`] until it returns samples; panics after `timeout` with the scrape
    /// target's state and Prometheus's log.
    pub fn wait_for(
        &self,
        promql: &str,
        timeout: Duration,
    ) -> Vec<(BTreeMap<String, String>, f64)> {
        let deadline = Instant::now() + timeout;
        loop {
            let found = self.query(promql);
            if !found.is_empty() {
                return found;
            }
            if Instant::now() > deadline {
                let targets = http_get(&self.addr(), "/api/v1/targets")
                    .map(|(_, b)| b)
                    .unwrap_or_else(|e| e.to_string());
                panic!(
                    "prometheus: {promql:?} still empty after {timeout:?}\ntargets: {targets}\n{}",
                    self.output()
                );
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Its log so far, for failure messages.
    pub fn output(&self) -> String {
        let c = self.captured.lock().unwrap();
        format!("{}{}", c.stdout, c.stderr)
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A /metrics endpoint serving fixed text.
    fn static_metrics(text: &'static str) -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        thread::spawn(move || {
            for mut s in l.incoming().flatten() {
                let mut req = Vec::new();
                let mut b = [0u8; 1024];
                while !req.ends_with(b"\r\n\r\n") {
                    match s.read(&mut b) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => req.extend_from_slice(&b[..n]),
                    }
                }
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{text}",
                    text.len()
                );
            }
        });
        addr
    }

    /// Needs Prometheus (PROMETHEUS_BIN).
    #[test]
    fn prometheus_scrapes_and_answers() {
        let target = static_metrics(
            "# HELP test_bytes_total Bytes.\n# TYPE test_bytes_total counter\n\
             test_bytes_total{exec=\"a b\",id=\"7\"} 1234\n\
             # TYPE test_ratio gauge\ntest_ratio 0.5\n",
        );
        let prom = Prometheus::start(&target, Duration::from_millis(200));
        let dir = prom.dir.clone();
        assert!(dir.join("prometheus.yml").is_file());
        let got = prom.wait_for("test_bytes_total", secs(30));
        assert_eq!(got.len(), 1);
        let (labels, v) = &got[0];
        assert_eq!(*v, 1234.0);
        let want: BTreeMap<String, String> = [
            ("__name__", "test_bytes_total"),
            ("exec", "a b"),
            ("id", "7"),
            ("instance", target.as_str()),
            ("job", "profiler"),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
        assert_eq!(labels, &want);
        assert_eq!(prom.query("up{job=\"profiler\"}")[0].1, 1.0);
        assert_eq!(prom.query("sum(test_bytes_total) * 2")[0].1, 2468.0);
        assert_eq!(
            prom.query("scalar(test_ratio)"),
            vec![(BTreeMap::new(), 0.5)]
        );
        assert!(prom.query("test_ratio / 0")[0].1.is_infinite());
        assert!(prom.query("nothing_here").is_empty());
        drop(prom);
        assert!(!dir.exists());
    }

    /// Needs Prometheus (PROMETHEUS_BIN): two targets, each its own instance, and a rule file
    /// whose recording rule sums them and whose alert fires.
    #[test]
    fn prometheus_scrapes_several_targets_and_evaluates_rules() {
        let a = static_metrics("# TYPE test_bytes_total counter\ntest_bytes_total 3\n");
        let b = static_metrics("# TYPE test_bytes_total counter\ntest_bytes_total 4\n");
        let rules = std::env::temp_dir().join(format!("profiler-rules-{}.yml", std::process::id()));
        fs::write(
            &rules,
            "groups:\n  - name: t\n    rules:\n      - record: job:test_bytes:sum\n        \
             expr: sum by (job) (test_bytes_total)\n      - alert: TestBytesHigh\n        \
             expr: job:test_bytes:sum > 5\n",
        )
        .unwrap();
        let prom = Prometheus::start_with(&[&a, &b], Duration::from_millis(200), &[&rules]);
        let _ = fs::remove_file(&rules);
        let got = prom.wait_for("count(test_bytes_total) == 2", secs(30));
        assert_eq!(got[0].1, 2.0);
        let instances: Vec<String> = prom
            .query("test_bytes_total")
            .into_iter()
            .map(|(l, _)| l["instance"].clone())
            .collect();
        assert!(
            instances.contains(&a) && instances.contains(&b),
            "{instances:?}"
        );
        let sum = prom.wait_for("job:test_bytes:sum == 7", secs(30));
        assert_eq!(sum[0].0["job"], "profiler");
        prom.wait_for(
            "ALERTS{alertname=\"TestBytesHigh\",alertstate=\"firing\"}",
            secs(30),
        );
        let rules = prom.rules();
        assert_eq!(rules.len(), 2, "{rules:?}");
        assert!(rules.iter().all(|r| r["health"] == "ok"), "{rules:?}");
    }
}
