//! rotel-agent, an OpenTelemetry collector from PyPI, run by a test.

use std::{
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    thread,
    time::{Duration, Instant},
};

use super::{
    Captured, Point, Span, accepts, capture, free_ports, parse_points, parse_spans, rotel_bin,
};
use crate::{Attached, TestCgroup, secs};

/// rotel-agent receiving OTLP on two free loopback ports, exporting nowhere (blackhole) and
/// printing every metric data point it receives. Killed on drop.
pub struct Rotel {
    grpc_port: u16,
    http_port: u16,
    child: Option<Child>,
    captured: Arc<Mutex<Captured>>,
    readers: Vec<thread::JoinHandle<()>>,
    /// What it prints: "metrics", or "traces".
    signal: &'static str,
}

impl Rotel {
    /// Start on free ports and wait until both receivers accept connections; it prints the
    /// metrics it receives.
    pub fn start() -> Rotel {
        Self::start_printing("metrics")
    }

    /// Like [`Self::start`], printing the spans it receives instead.
    pub fn start_for_traces() -> Rotel {
        Self::start_printing("traces")
    }

    fn start_printing(signal: &'static str) -> Rotel {
        let [grpc_port, http_port] = free_ports();
        let mut r = Rotel {
            grpc_port,
            http_port,
            child: None,
            captured: Arc::default(),
            readers: Vec::new(),
            signal,
        };
        r.spawn();
        r
    }

    fn spawn(&mut self) {
        let mut cmd = Command::new(rotel_bin());
        cmd.args([
            "start",
            "--otlp-grpc-endpoint",
            &format!("127.0.0.1:{}", self.grpc_port),
            "--otlp-http-endpoint",
            &format!("127.0.0.1:{}", self.http_port),
            "--exporter",
            "blackhole",
            "--debug-log",
            self.signal,
            "--debug-log-verbosity",
            "detailed",
        ]);
        // Its flags also come from ROTEL_* variables: only ours count.
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("ROTEL_") {
                cmd.env_remove(k);
            }
        }
        let mut child = cmd
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", rotel_bin().display()));
        self.readers = capture(
            child.stdout.take(),
            child.stderr.take(),
            &self.captured,
            "rotel",
            // Its log lines start with a timestamp; the data points it prints never do.
            |l| l.starts_with(|c: char| c.is_ascii_digit()),
        );
        self.child = Some(child);
        let deadline = Instant::now() + secs(30);
        while !(accepts(self.grpc_port) && accepts(self.http_port)) {
            let exited = self.child.as_mut().unwrap().try_wait().unwrap();
            if exited.is_some() || Instant::now() > deadline {
                self.stop();
                panic!(
                    "rotel did not listen on 127.0.0.1:{} and :{} ({}):\n{}",
                    self.grpc_port,
                    self.http_port,
                    exited.map_or("timeout".into(), |s| s.to_string()),
                    self.output()
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// (gRPC port, HTTP port)
    pub fn ports(&self) -> (u16, u16) {
        (self.grpc_port, self.http_port)
    }

    /// OTLP/gRPC endpoint, "http://127.0.0.1:PORT".
    pub fn grpc_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.grpc_port)
    }

    /// OTLP/HTTP endpoint, "http://127.0.0.1:PORT" (metrics at /v1/metrics).
    pub fn http_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    /// Kill it (SIGKILL to its own pid) and wait; what it printed stays readable.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for t in self.readers.drain(..) {
            let _ = t.join();
        }
    }

    /// Stop it if running, then start it again on the same ports (an outage).
    pub fn restart(&mut self) {
        self.stop();
        self.captured
            .lock()
            .unwrap()
            .stdout
            .push_str("=== rotel restarted ===\n");
        self.spawn();
    }

    /// Every data point printed so far (across restarts), in order: one per point per export,
    /// so a cumulative series repeats, its last one newest. Waits for its output to
    /// be quiet for 50 ms first (at most 2 s), so that no batch is read half-printed.
    pub fn points(&self) -> Vec<Point> {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let c = self.captured.lock().unwrap();
            let quiet = c
                .last
                .is_none_or(|t| t.elapsed() >= Duration::from_millis(50));
            if quiet || Instant::now() > deadline {
                return parse_points(&c.stdout);
            }
            drop(c);
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Poll [`Self::points`] until some match `pred`; returns those. Panics with rotel's
    /// output after `timeout`.
    pub fn wait_for(&self, timeout: Duration, pred: impl Fn(&Point) -> bool) -> Vec<Point> {
        let deadline = Instant::now() + timeout;
        loop {
            let found: Vec<Point> = self.points().into_iter().filter(|p| pred(p)).collect();
            if !found.is_empty() {
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "no matching data point reached rotel within {timeout:?}; it printed:\n{}",
                self.output()
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Every span printed so far (started with [`Self::start_for_traces`]).
    pub fn spans(&self) -> Vec<Span> {
        parse_spans(&self.captured.lock().unwrap().stdout)
    }

    /// Poll [`Self::spans`] until one matches `pred`. Panics with rotel's output after
    /// `timeout`.
    pub fn wait_for_span(&self, timeout: Duration, pred: impl Fn(&Span) -> bool) -> Span {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.spans().into_iter().find(|s| pred(s)) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "no matching span reached rotel within {timeout:?}; it printed:\n{}",
                self.output()
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Everything it printed so far (stdout, then stderr), for failure messages.
    pub fn output(&self) -> String {
        let c = self.captured.lock().unwrap();
        format!("{}{}", c.stdout, c.stderr)
    }
}

impl Drop for Rotel {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The newest point of `metric` for exec `id` with these attributes, once it has value `want`.
pub fn wait_point(rotel: &Rotel, metric: &str, id: u64, with: &[(&str, &str)], want: f64) -> Point {
    let idv = id.to_string();
    let found = rotel.wait_for(secs(60), |p| {
        p.metric == metric
            && p.attr("profiler.exec.cgroup_id") == Some(idv.as_str())
            && with.iter().all(|(k, v)| p.attr(k) == Some(*v))
            && (p.value - want).abs() <= want.abs() * 1e-9
    });
    found.last().unwrap().clone()
}

/// Wait until every exec of `want` (cgroup id, value) has points of `metric` with that value:
/// the sum of the newest point of each of its series (e.g. cpu.mode user + system).
pub fn wait_all(rotel: &Rotel, metric: &str, want: &[(u64, f64)]) {
    let deadline = std::time::Instant::now() + secs(90);
    loop {
        let pts = rotel.points();
        let mut newest = std::collections::HashMap::new();
        for p in pts.iter().filter(|p| p.metric == metric) {
            if let Some(id) = p.attr("profiler.exec.cgroup_id") {
                newest.insert((id, format!("{:?}", p.attributes)), p.value);
            }
        }
        let mut got: std::collections::HashMap<&str, f64> = std::collections::HashMap::new();
        for ((id, _), v) in newest {
            *got.entry(id).or_default() += v;
        }
        let missing: Vec<&(u64, f64)> = want
            .iter()
            .filter(|(id, v)| {
                got.get(id.to_string().as_str())
                    .is_none_or(|g| (g - v).abs() > v.abs() * 1e-9)
            })
            .collect();
        if missing.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {} execs never arrived with their final {metric}, e.g. {:?}",
            missing.len(),
            want.len(),
            &missing[..missing.len().min(5)]
        );
        thread::sleep(Duration::from_secs(1));
    }
}

/// `attach` exporting over HTTP to `rotel` every second, with these export settings besides.
pub fn attach_exporting(cg: &TestCgroup, rotel: &Rotel, settings: &[&str]) -> Attached {
    let endpoint = rotel.http_endpoint();
    let mut args = vec!["--otlp-endpoint", &endpoint, "--export-interval", "1s"];
    args.extend(settings);
    Attached::start(cg, &args)
}

#[cfg(test)]
mod tests {
    use std::{
        io::{Read as _, Write as _},
        net::TcpStream,
    };

    use super::*;

    use crate::backends::accepts;

    fn http_post(url: &str, path: &str, body: &str) -> (u16, String) {
        let addr = url.strip_prefix("http://").unwrap();
        let mut s = TcpStream::connect(addr).unwrap();
        write!(
            s,
            "POST {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        (
            head.split(' ').nth(1).unwrap().parse().unwrap(),
            body.into(),
        )
    }

    fn otlp_json(run: u64) -> String {
        serde_json::json!({"resourceMetrics": [{
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "harness"}}]},
            "scopeMetrics": [{"scope": {"name": "harness"}, "metrics": [
                {"name": "h.bytes", "unit": "By", "sum": {"aggregationTemporality": 2, "isMonotonic": true,
                    "dataPoints": [{"attributes": [{"key": "run", "value": {"intValue": run.to_string()}}],
                        "timeUnixNano": "1700000000000000000", "asInt": 1000 + run}]}},
                {"name": "h.wait", "unit": "s", "histogram": {"aggregationTemporality": 1,
                    "dataPoints": [{"count": 3, "sum": 2.5, "bucketCounts": [1, 2], "explicitBounds": [1.0]}]}}
            ]}]
        }]})
        .to_string()
    }

    /// Needs rotel-agent (ROTEL_BIN).
    #[test]
    fn rotel_receives_and_survives_a_restart() {
        let mut rotel = Rotel::start();
        let (grpc, http) = (rotel.grpc_endpoint(), rotel.http_endpoint());
        assert_ne!(grpc, http);
        assert_eq!(http_post(&http, "/v1/metrics", &otlp_json(1)).0, 200);
        let p = rotel.wait_for(secs(10), |p| p.metric == "h.bytes");
        assert_eq!((p[0].value, p[0].attr("run")), (1001.0, Some("1")));
        assert_eq!(p[0].resource["service.name"], "harness");
        let h = rotel.wait_for(secs(10), |p| p.metric == "h.wait");
        assert_eq!((h[0].count, h[0].value), (Some(3), 2.5));
        assert_eq!(
            (&h[0].bounds[..], &h[0].bucket_counts[..]),
            (&[1.0][..], &[1, 2][..])
        );
        assert_eq!(h[0].temporality.as_deref(), Some("delta"));

        rotel.stop();
        let port = |e: &str| e.rsplit(':').next().unwrap().parse::<u16>().unwrap();
        assert!(!accepts(port(&grpc)) && !accepts(port(&http)));
        rotel.restart();
        assert_eq!(
            (rotel.grpc_endpoint(), rotel.http_endpoint()),
            (grpc, http.clone())
        );
        assert_eq!(http_post(&http, "/v1/metrics", &otlp_json(2)).0, 200);
        rotel.wait_for(secs(10), |p| p.attr("run") == Some("2"));
        let runs: Vec<_> = rotel
            .points()
            .into_iter()
            .filter(|p| p.metric == "h.bytes")
            .map(|p| p.value)
            .collect();
        assert_eq!(runs, [1001.0, 1002.0], "{}", rotel.output());
    }
}
