//! Real metric backends for the exporter's end-to-end tests: rotel, an OpenTelemetry collector
//! (OTLP over gRPC and HTTP) that prints every data point it receives, and Prometheus, which
//! scrapes a `/metrics` endpoint and answers PromQL.
//!
//! `cargo xtask test` installs both and names them in ROTEL_BIN and PROMETHEUS_BIN. Without
//! them these tests fail and say why; they never skip.
//!
//! What rotel's detailed debug log (the collector's debug-exporter format) does NOT print, so
//! tests cannot check it: whether a number was sent as an int or a double (`Value: 3` is
//! either), data point flags (e.g. no-recorded-value), dropped-attribute counts, and the type of
//! attribute values once read into [`Point`] (`Int(42)`, `Str(42)` both become "42").
//! It prints exemplars, which [`parse_points`] skips.
//! Surprise: rotel's OTLP/JSON decoder silently drops 64-bit integers sent as JSON strings (the
//! spec's encoding): an `asInt` string leaves the point without a `Value:` line (value NaN
//! here), a histogram's `count` or `bucketCounts` as strings leave the metric with no data
//! (`DataType: Empty`, no point). Timestamps as strings, JSON numbers and protobuf are fine.

use std::{
    collections::BTreeMap,
    fs,
    io::{BufRead as _, BufReader, Read, Write as _},
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, ChildStderr, ChildStdout, Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::secs;

fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// A backend binary: `$var`, else where `cargo xtask test` installs it; panics (never skips)
/// when neither exists.
fn backend_bin(var: &str, default: PathBuf) -> PathBuf {
    let p = std::env::var_os(var).map(PathBuf::from).unwrap_or(default);
    assert!(
        p.is_file(),
        "{var}: {} missing: `cargo xtask test` installs it and sets {var}, or set {var} yourself",
        p.display()
    );
    p
}

/// rotel-agent (PyPI `rotel`, in target/tools/venv): ROTEL_BIN.
pub fn rotel_bin() -> PathBuf {
    backend_bin(
        "ROTEL_BIN",
        repo_root().join("target/tools/venv/bin/rotel-agent"),
    )
}

/// Prometheus (Debian's package): PROMETHEUS_BIN.
pub fn prometheus_bin() -> PathBuf {
    backend_bin("PROMETHEUS_BIN", PathBuf::from("/usr/bin/prometheus"))
}

/// A loopback port nobody listens on now.
fn free_ports<const N: usize>() -> [u16; N] {
    // Hold all listeners at once: N distinct ports.
    let ls: Vec<TcpListener> = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    std::array::from_fn(|i| ls[i].local_addr().unwrap().port())
}

fn accepts(port: u16) -> bool {
    TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200)).is_ok()
}

/// What a child printed, collected by reader threads.
#[derive(Default)]
struct Captured {
    stdout: String,
    stderr: String,
    last: Option<Instant>,
}

fn capture(
    out: Option<ChildStdout>,
    err: Option<ChildStderr>,
    into: &Arc<Mutex<Captured>>,
    tag: &'static str,
    echo: fn(&str) -> bool,
) -> Vec<thread::JoinHandle<()>> {
    let mut threads = Vec::new();
    let streams: [(Option<Box<dyn Read + Send>>, bool); 2] = [
        (out.map(|s| Box::new(s) as Box<dyn Read + Send>), true),
        (err.map(|s| Box::new(s) as Box<dyn Read + Send>), false),
    ];
    for (stream, is_stdout) in streams {
        let Some(stream) = stream else { continue };
        let c = into.clone();
        threads.push(thread::spawn(move || {
            let mut r = BufReader::new(stream);
            let mut line = Vec::new();
            while r.read_until(b'\n', &mut line).unwrap_or(0) > 0 {
                let text = String::from_utf8_lossy(&line).into_owned();
                line.clear();
                let mut c = c.lock().unwrap();
                if echo(&text) {
                    eprint!("[{tag}] {text}");
                }
                if is_stdout {
                    c.stdout.push_str(&text);
                } else {
                    c.stderr.push_str(&text);
                }
                c.last = Some(Instant::now());
            }
        }));
    }
    threads
}

// ------------------------------------------------------------------------------------------
// rotel

/// One data point as rotel printed it.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub metric: String,
    pub description: String,
    pub unit: String,
    /// "sum" | "gauge" | "histogram" (also "exponential_histogram", "summary": count and sum
    /// only).
    pub kind: String,
    /// Sums only.
    pub monotonic: Option<bool>,
    /// "cumulative" | "delta" (sums and histograms), as rotel printed it otherwise.
    pub temporality: Option<String>,
    /// Data point attributes; values without their type: `Str(x)`, `Int(x)`, `Double(x)`,
    /// `Bool(x)` become "x", other kinds stay as printed (`Slice(Int(1), Str(x))`).
    pub attributes: BTreeMap<String, String>,
    /// Resource attributes, the same way.
    pub resource: BTreeMap<String, String>,
    /// Instrumentation scope name.
    pub scope: String,
    /// Sum and gauge: the value; histograms: the sum. NaN when rotel printed none.
    pub value: f64,
    /// Histograms and summaries.
    pub count: Option<u64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    /// Explicit-bucket histograms: one more count than bounds.
    pub bucket_counts: Vec<u64>,
    pub bounds: Vec<f64>,
    pub start_time_unix_nano: Option<u64>,
    pub time_unix_nano: Option<u64>,
}

impl Point {
    /// A data point attribute.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

/// Remove ANSI escape sequences (rotel colours its log lines even into a pipe).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // CSI: ESC [ params final-byte(@..~)
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `key: Type(value)` of an attribute line (after `     -> `).
fn parse_attr(s: &str) -> Option<(String, String)> {
    const SCALAR: [&str; 4] = ["Str(", "Int(", "Double(", "Bool("];
    const OTHER: [&str; 3] = ["Slice(", "Map(", "Bytes("];
    // The key may hold ": " itself: take the first split whose right side is a typed value.
    for (i, _) in s.match_indices(": ") {
        let (key, v) = (&s[..i], &s[i + 2..]);
        if let Some(t) = SCALAR.iter().find(|t| v.starts_with(*t))
            && v.ends_with(')')
        {
            return Some((key.into(), v[t.len()..v.len() - 1].into()));
        }
        if v == "Empty" || (OTHER.iter().any(|t| v.starts_with(t)) && v.ends_with(')')) {
            return Some((key.into(), v.into()));
        }
    }
    None
}

/// Numbers as rotel prints them (Rust's Display: "3", "0.25", "NaN", "inf").
fn num(s: &str) -> f64 {
    s.trim().parse().unwrap_or(f64::NAN)
}

/// One span as rotel printed it (`--debug-log traces --debug-log-verbosity detailed`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Span {
    pub trace_id: String,
    /// Empty for a root span.
    pub parent_id: String,
    pub id: String,
    pub name: String,
    pub kind: String,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
    /// Span attributes, values without their type (as [`Point::attributes`]).
    pub attributes: BTreeMap<String, String>,
    pub resource: BTreeMap<String, String>,
}

/// Parse rotel's detailed span output.
pub fn parse_spans(text: &str) -> Vec<Span> {
    let mut out: Vec<Span> = Vec::new();
    let mut resource = BTreeMap::new();
    // Where attribute lines go: the resource's or the current span's.
    let mut in_resource = false;
    for raw in text.lines() {
        let line = strip_ansi(raw);
        let t = line.trim();
        let field = |name: &str| {
            t.strip_prefix(name)
                .and_then(|r| r.trim_start().strip_prefix(':'))
                .map(|v| v.trim().to_owned())
        };
        if t.starts_with("ResourceSpans #") {
            resource = BTreeMap::new();
            in_resource = false;
        } else if t == "Resource attributes:" {
            in_resource = true;
        } else if t.starts_with("Span #") {
            in_resource = false;
            out.push(Span {
                resource: resource.clone(),
                ..Default::default()
            });
        } else if let Some(a) = t.strip_prefix("-> ").and_then(parse_attr) {
            if in_resource {
                resource.insert(a.0, a.1);
            } else if let Some(s) = out.last_mut() {
                s.attributes.insert(a.0, a.1);
            }
        } else if let Some(s) = out.last_mut() {
            if let Some(v) = field("Trace ID") {
                s.trace_id = v;
            } else if let Some(v) = field("Parent ID") {
                s.parent_id = v;
            } else if let Some(v) = field("ID") {
                s.id = v;
            } else if let Some(v) = field("Name") {
                s.name = v;
            } else if let Some(v) = field("Kind") {
                s.kind = v;
            } else if let Some(v) = field("Start time") {
                s.start_unix_nano = v.parse().unwrap_or(0);
            } else if let Some(v) = field("End time") {
                s.end_unix_nano = v.parse().unwrap_or(0);
            }
        }
    }
    out
}

/// Parse rotel's detailed metric debug output (`--debug-log metrics --debug-log-verbosity
/// detailed`) into data points, in the order printed; other lines (its own log) are skipped.
pub fn parse_points(text: &str) -> Vec<Point> {
    #[derive(PartialEq)]
    enum In {
        Nothing,
        Resource,
        Descriptor,
        PointAttrs,
        Other,
    }
    let mut points = Vec::new();
    let mut resource = BTreeMap::new();
    let mut scope = String::new();
    let empty = Point {
        metric: String::new(),
        description: String::new(),
        unit: String::new(),
        kind: String::new(),
        monotonic: None,
        temporality: None,
        attributes: BTreeMap::new(),
        resource: BTreeMap::new(),
        scope: String::new(),
        value: f64::NAN,
        count: None,
        min: None,
        max: None,
        bucket_counts: Vec::new(),
        bounds: Vec::new(),
        start_time_unix_nano: None,
        time_unix_nano: None,
    };
    // The metric's descriptor, copied into each of its points.
    let mut metric = empty.clone();
    let mut point: Option<Point> = None;
    let mut inside = In::Nothing;
    for raw in text.lines() {
        let line = strip_ansi(raw);
        let line = line.trim_end();
        if let Some(rest) = line.strip_prefix("     -> ") {
            match inside {
                In::Resource => {
                    if let Some((k, v)) = parse_attr(rest) {
                        resource.insert(k, v);
                    }
                }
                In::PointAttrs => {
                    if let (Some(p), Some((k, v))) = (point.as_mut(), parse_attr(rest)) {
                        p.attributes.insert(k, v);
                    }
                }
                In::Descriptor => {
                    let (k, v) = rest.split_once(':').unwrap_or((rest, ""));
                    let v = v.strip_prefix(' ').unwrap_or(v);
                    match k {
                        "Name" => metric.metric = v.into(),
                        "Description" => metric.description = v.into(),
                        "Unit" => metric.unit = v.into(),
                        "DataType" => {
                            metric.kind = match v {
                                "Sum" => "sum".into(),
                                "Gauge" => "gauge".into(),
                                "Histogram" => "histogram".into(),
                                "ExponentialHistogram" => "exponential_histogram".into(),
                                "Summary" => "summary".into(),
                                other => other.to_lowercase(),
                            }
                        }
                        "IsMonotonic" => metric.monotonic = Some(v == "true"),
                        "AggregationTemporality" => {
                            metric.temporality = Some(
                                v.strip_prefix("AGGREGATION_TEMPORALITY_")
                                    .unwrap_or(v)
                                    .to_lowercase(),
                            )
                        }
                        _ => {}
                    }
                }
                In::Nothing | In::Other => {}
            }
            continue;
        }
        let mut flush = |point: &mut Option<Point>| {
            if let Some(p) = point.take() {
                points.push(p);
            }
        };
        if line.starts_with("ResourceMetrics #") {
            flush(&mut point);
            resource.clear();
            scope.clear();
            inside = In::Nothing;
        } else if line == "Resource attributes:" {
            inside = In::Resource;
        } else if line.starts_with("ScopeMetrics #") {
            flush(&mut point);
            scope.clear();
            inside = In::Nothing;
        } else if let Some(s) = line.strip_prefix("InstrumentationScope ") {
            // "InstrumentationScope NAME VERSION", or "... attributes:" (skipped).
            if line != "InstrumentationScope attributes:" {
                scope = s.split(' ').next().unwrap_or("").into();
                inside = In::Nothing;
            } else {
                inside = In::Other;
            }
        } else if line.starts_with("Metric #") {
            flush(&mut point);
            metric = empty.clone();
            inside = In::Nothing;
        } else if line == "Descriptor:" {
            inside = In::Descriptor;
        } else if [
            "NumberDataPoints #",
            "HistogramDataPoints #",
            "ExponentialHistogramDataPoints #",
            "SummaryDataPoints #",
        ]
        .iter()
        .any(|h| line.starts_with(h))
        {
            flush(&mut point);
            let mut p = metric.clone();
            p.resource = resource.clone();
            p.scope = scope.clone();
            point = Some(p);
            inside = In::Nothing;
        } else if line == "Data point attributes:" {
            inside = In::PointAttrs;
        } else if line == "Exemplars:" || line.starts_with("Exemplar #") {
            inside = In::Other;
        } else if let Some(p) = point.as_mut() {
            let field = |name: &str| line.strip_prefix(name);
            if let Some(v) = field("StartTimestamp: ") {
                p.start_time_unix_nano = v.parse().ok();
            } else if let Some(v) = field("Timestamp: ") {
                p.time_unix_nano = v.parse().ok();
            } else if let Some(v) = field("Value: ").or_else(|| field("Sum: ")) {
                p.value = num(v);
            } else if let Some(v) = field("Count: ") {
                p.count = v.parse().ok();
            } else if let Some(v) = field("Min: ") {
                p.min = Some(num(v));
            } else if let Some(v) = field("Max: ") {
                p.max = Some(num(v));
            } else if let Some(v) = field("ExplicitBounds #")
                && let Some((_, b)) = v.split_once(": ")
            {
                p.bounds.push(num(b));
            } else if let Some(v) = field("Buckets #")
                && let Some((_, c)) = v.split_once(", Count: ")
            {
                p.bucket_counts.push(c.parse().unwrap_or(0));
            }
        }
    }
    if let Some(p) = point {
        points.push(p);
    }
    points
}

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

// ------------------------------------------------------------------------------------------
// TLS: a private CA made with openssl, and socat as a TLS-terminating proxy in front of a
// plain-text collector port (mutual TLS: it accepts only clients with a certificate of that CA).

/// A private CA with a server certificate for 127.0.0.1 and a client certificate, in PEM
/// files of a directory of its own (removed on drop).
pub struct Pki {
    pub dir: PathBuf,
}

impl Pki {
    pub fn new(name: &str) -> Pki {
        let dir = repo_root()
            .join("target")
            .join(format!("pki-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let pki = Pki { dir };
        // Arguments split at spaces: the paths must have none.
        let ssl = |args: String| {
            let argv: Vec<&str> = ["openssl"]
                .into_iter()
                .chain(args.split_whitespace())
                .collect();
            crate::sh(&argv);
        };
        let f = |name: &str| pki.file(name);
        let key = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
        ssl(format!(
            "req -x509 {key} -days 2 -subj /CN=profiler-test-ca -keyout {} -out {}",
            f("ca.key"),
            f("ca.pem")
        ));
        for (who, ext) in [
            (
                "server",
                "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth",
            ),
            ("client", "extendedKeyUsage=clientAuth"),
        ] {
            let (k, csr, pem, extf) = (
                f(&format!("{who}.key")),
                f(&format!("{who}.csr")),
                f(&format!("{who}.pem")),
                f(&format!("{who}.ext")),
            );
            fs::write(&extf, format!("{ext}\n")).unwrap();
            ssl(format!(
                "req {key} -subj /CN=profiler-test-{who} -keyout {k} -out {csr}"
            ));
            ssl(format!(
                "x509 -req -in {csr} -CA {} -CAkey {} -CAcreateserial -days 2 -extfile {extf} \
                 -out {pem}",
                f("ca.pem"),
                f("ca.key")
            ));
        }
        pki
    }

    pub fn file(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// socat: TLS (server certificate of `pki`, client certificate required) on a free loopback
/// port, relayed to plain TCP on `to_port`.
pub struct TlsProxy {
    pub port: u16,
    child: Child,
}

impl TlsProxy {
    pub fn start(pki: &Pki, to_port: u16) -> TlsProxy {
        let [port] = free_ports();
        let listen = format!(
            "OPENSSL-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,cert={},key={},cafile={},verify=1",
            pki.file("server.pem"),
            pki.file("server.key"),
            pki.file("ca.pem")
        );
        let child = Command::new("socat")
            .args([&listen, &format!("TCP:127.0.0.1:{to_port}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("socat: {e} (`cargo xtask test` installs Debian's socat)"));
        let mut proxy = TlsProxy { port, child };
        let deadline = Instant::now() + secs(10);
        while !accepts(port) {
            assert!(
                proxy.child.try_wait().unwrap().is_none() && Instant::now() < deadline,
                "socat did not listen on 127.0.0.1:{port}"
            );
            thread::sleep(Duration::from_millis(20));
        }
        proxy
    }

    /// "https://127.0.0.1:PORT"
    pub fn endpoint(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }
}

impl Drop for TlsProxy {
    fn drop(&mut self) {
        // Its per-connection children end with their connections.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ------------------------------------------------------------------------------------------
// Prometheus

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

/// Prometheus (Debian's) scraping one target, with its own config and TSDB in a fresh temp
/// directory, on a free loopback port. Killed and removed on drop.
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
        let config = format!(
            "global:\n  scrape_interval: {every}ms\n  evaluation_interval: {every}ms\n\
             scrape_configs:\n  - job_name: profiler\n    scrape_interval: {every}ms\n    \
             scrape_timeout: {timeout}ms\n    metrics_path: /metrics\n    static_configs:\n      \
             - targets: ['{target}']\n"
        );
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

    /// What rotel-agent 0.0.1-alpha10 (PyPI rotel 0.0.1a15) printed, without NO_COLOR, for:
    /// the Python SDK 1.45.2 over gRPC (cumulative; a counter with attributes and an exemplar,
    /// an up-down counter, a gauge, an observable gauge, a histogram with bounds 0.001, 0.01,
    /// 0.1, 1), the same over HTTP/protobuf with delta temporality, and an OTLP/JSON request
    /// (a Double and a Slice attribute; an `asInt` as a string, which rotel drops).
    const SAMPLE: &str = concat!(
        "\x1b[2m2026-12-02T18:08:30.452356Z\x1b[0m \x1b[32m INFO\x1b[0m Starting Rotel. \
         \x1b[3mgrpc_endpoint\x1b[0m\x1b[2m=\x1b[0m\"127.0.0.1:14317\" \
         \x1b[3mhttp_endpoint\x1b[0m\x1b[2m=\x1b[0m\"127.0.0.1:14318\"\n",
        r##"ResourceMetrics #0
Resource SchemaURL: 
Resource attributes:
     -> telemetry.sdk.language: Str(python)
     -> telemetry.sdk.name: Str(opentelemetry)
     -> telemetry.sdk.version: Str(1.45.2)
     -> service.instance.id: Str(34b2723e-1cac-4f66-9ee9-87b41e83ce28)
     -> service.name: Str(pusher-grpc)
     -> host.name: Str(box)
     -> pusher.pid: Int(1234)
ScopeMetrics #0
ScopeMetrics SchemaURL: 
InstrumentationScope profiler-test 0.1.0
Metric #0
Descriptor:
     -> Name: exec.bytes.read
     -> Description: bytes read
     -> Unit: By
     -> DataType: Sum
     -> IsMonotonic: true
     -> AggregationTemporality: AGGREGATION_TEMPORALITY_CUMULATIVE
NumberDataPoints #0
Data point attributes:
     -> exec: Str(build-1)
     -> cgroup.id: Int(42)
     -> ok: Bool(true)
     -> weird key: Str(a, b=c "q")
StartTimestamp: 1796234911813073735
Timestamp: 1796234911817926687
Value: 1024
NumberDataPoints #1
Data point attributes:
     -> exec: Str(build-2)
     -> cgroup.id: Int(43)
     -> ok: Bool(false)
     -> weird key: Str()
StartTimestamp: 1796234911817175923
Timestamp: 1796234911817926687
Value: 7
Exemplars:
Exemplar #0
     -> Trace ID: 3a18bed8dc7a7e578f2825c114aaa095
     -> Span ID: a7a80b4c6ee4970b
     -> Timestamp: 1796234911817118578
     -> Value: 7
Metric #1
Descriptor:
     -> Name: exec.running
     -> Description: running execs
     -> Unit: {exec}
     -> DataType: Sum
     -> IsMonotonic: false
     -> AggregationTemporality: AGGREGATION_TEMPORALITY_CUMULATIVE
NumberDataPoints #0
StartTimestamp: 1796234911817365144
Timestamp: 1796234911817926687
Value: 2
Metric #2
Descriptor:
     -> Name: exec.memory.peak
     -> Description: peak memory
     -> Unit: By
     -> DataType: Gauge
NumberDataPoints #0
Data point attributes:
     -> exec: Str(build-1)
StartTimestamp: 0
Timestamp: 1796234911817926687
Value: 123456.5
Metric #3
Descriptor:
     -> Name: exec.io.wait
     -> Description: io wait
     -> Unit: s
     -> DataType: Histogram
     -> AggregationTemporality: AGGREGATION_TEMPORALITY_CUMULATIVE
HistogramDataPoints #0
Data point attributes:
     -> exec: Str(build-1)
StartTimestamp: 1796234911817707722
Timestamp: 1796234911817926687
Count: 6
Sum: 3.6025
Min: 0.0005
Max: 3
ExplicitBounds #0: 0.001
ExplicitBounds #1: 0.01
ExplicitBounds #2: 0.1
ExplicitBounds #3: 1
Buckets #0, Count: 1
Buckets #1, Count: 1
Buckets #2, Count: 2
Buckets #3, Count: 1
Buckets #4, Count: 1
Metric #4
Descriptor:
     -> Name: exec.cpu.ratio
     -> Description: 
     -> Unit: 1
     -> DataType: Gauge
NumberDataPoints #0
Data point attributes:
     -> exec: Str(build-1)
StartTimestamp: 0
Timestamp: 1796234911817926687
Value: 0.25
ResourceMetrics #0
Resource SchemaURL: 
Resource attributes:
     -> telemetry.sdk.language: Str(python)
     -> telemetry.sdk.name: Str(opentelemetry)
     -> telemetry.sdk.version: Str(1.45.2)
     -> service.instance.id: Str(0724cd27-4b65-4784-87d3-261f6990bea7)
     -> service.name: Str(pusher-http)
     -> host.name: Str(box)
     -> pusher.pid: Int(1234)
ScopeMetrics #0
ScopeMetrics SchemaURL: 
InstrumentationScope profiler-test 0.1.0
Metric #0
Descriptor:
     -> Name: exec.bytes.read
     -> Description: bytes read
     -> Unit: By
     -> DataType: Sum
     -> IsMonotonic: true
     -> AggregationTemporality: AGGREGATION_TEMPORALITY_DELTA
NumberDataPoints #0
Data point attributes:
     -> exec: Str(build-1)
     -> cgroup.id: Int(42)
     -> ok: Bool(true)
     -> weird key: Str(a, b=c "q")
StartTimestamp: 1796234912124453066
Timestamp: 1796234912129527576
Value: 1024
NumberDataPoints #1
Data point attributes:
     -> exec: Str(build-2)
     -> cgroup.id: Int(43)
     -> ok: Bool(false)
     -> weird key: Str()
StartTimestamp: 1796234912128852395
Timestamp: 1796234912129527576
Value: 7
Exemplars:
Exemplar #0
     -> Trace ID: 3c9c91e5efe395b4f9dacfbfd00c40ef
     -> Span ID: 2b9a144af3cb2a8b
     -> Timestamp: 1796234912128811644
     -> Value: 7
Metric #1
Descriptor:
     -> Name: exec.running
     -> Description: running execs
     -> Unit: {exec}
     -> DataType: Sum
     -> IsMonotonic: false
     -> AggregationTemporality: AGGREGATION_TEMPORALITY_CUMULATIVE
NumberDataPoints #0
StartTimestamp: 1796234912128997600
Timestamp: 1796234912129527576
Value: 2
Metric #2
Descriptor:
     -> Name: exec.memory.peak
     -> Description: peak memory
     -> Unit: By
     -> DataType: Gauge
NumberDataPoints #0
Data point attributes:
     -> exec: Str(build-1)
StartTimestamp: 0
Timestamp: 1796234912129527576
Value: 123456.5
Metric #3
Descriptor:
     -> Name: exec.io.wait
     -> Description: io wait
     -> Unit: s
     -> DataType: Histogram
     -> AggregationTemporality: AGGREGATION_TEMPORALITY_DELTA
HistogramDataPoints #0
Data point attributes:
     -> exec: Str(build-1)
StartTimestamp: 1796234912129244446
Timestamp: 1796234912129527576
Count: 6
Sum: 3.6025
Min: 0.0005
Max: 3
ExplicitBounds #0: 0.001
ExplicitBounds #1: 0.01
ExplicitBounds #2: 0.1
ExplicitBounds #3: 1
Buckets #0, Count: 1
Buckets #1, Count: 1
Buckets #2, Count: 2
Buckets #3, Count: 1
Buckets #4, Count: 1
Metric #4
Descriptor:
     -> Name: exec.cpu.ratio
     -> Description: 
     -> Unit: 1
     -> DataType: Gauge
NumberDataPoints #0
Data point attributes:
     -> exec: Str(build-1)
StartTimestamp: 0
Timestamp: 1796234912129527576
Value: 0.25
ResourceMetrics #0
Resource SchemaURL: 
Resource attributes:
     -> service.name: Str(json-pusher)
ScopeMetrics #0
ScopeMetrics SchemaURL: 
InstrumentationScope s 
Metric #0
Descriptor:
     -> Name: j.sum
     -> Description: 
     -> Unit: By
     -> DataType: Sum
     -> IsMonotonic: true
     -> AggregationTemporality: AGGREGATION_TEMPORALITY_CUMULATIVE
NumberDataPoints #0
Data point attributes:
     -> exec: Str(e1)
     -> d: Double(1.5)
     -> arr: Slice(Int(1), Str(x))
StartTimestamp: 0
Timestamp: 1700000000000000000
Metric #1
Descriptor:
     -> Name: j.gauge
     -> Description: 
     -> Unit: 
     -> DataType: Gauge
NumberDataPoints #0
StartTimestamp: 0
Timestamp: 1700000000000000000
Value: 1000000000000000000000
"##,
        "\x1b[2m2026-12-02T18:08:32.692901Z\x1b[0m \x1b[32m INFO\x1b[0m Shutdown signal received.\n",
    );

    fn find<'a>(points: &'a [Point], metric: &str, service: &str) -> Vec<&'a Point> {
        points
            .iter()
            .filter(|p| p.metric == metric && p.resource["service.name"] == service)
            .collect()
    }

    #[test]
    fn parses_sums_gauges_histograms() {
        let points = parse_points(SAMPLE);
        assert_eq!(points.len(), 14, "{points:#?}");

        let read = find(&points, "exec.bytes.read", "pusher-grpc");
        assert_eq!(read.len(), 2);
        let p = read[0];
        assert_eq!(
            (p.kind.as_str(), p.unit.as_str(), p.monotonic),
            ("sum", "By", Some(true))
        );
        assert_eq!(p.temporality.as_deref(), Some("cumulative"));
        assert_eq!(p.description, "bytes read");
        assert_eq!(p.scope, "profiler-test");
        assert_eq!(p.value, 1024.0);
        assert_eq!(p.attr("exec"), Some("build-1"));
        assert_eq!(p.attr("cgroup.id"), Some("42"));
        assert_eq!(p.attr("ok"), Some("true"));
        assert_eq!(p.attr("weird key"), Some(r#"a, b=c "q""#));
        assert_eq!(p.attributes.len(), 4);
        assert_eq!(p.resource["pusher.pid"], "1234");
        assert_eq!(p.resource["host.name"], "box");
        assert_eq!(p.start_time_unix_nano, Some(1796234911813073735));
        assert_eq!(p.time_unix_nano, Some(1796234911817926687));
        assert_eq!(p.count, None);
        // The second point is followed by an exemplar: neither its value nor its ids count.
        let p = read[1];
        assert_eq!(
            (p.value, p.attr("exec"), p.attr("weird key")),
            (7.0, Some("build-2"), Some(""))
        );
        assert_eq!(p.attributes.len(), 4);

        let running = find(&points, "exec.running", "pusher-grpc")[0];
        assert_eq!((running.monotonic, running.value), (Some(false), 2.0));
        assert!(running.attributes.is_empty());
        assert_eq!(running.unit, "{exec}");

        let peak = find(&points, "exec.memory.peak", "pusher-grpc")[0];
        assert_eq!((peak.kind.as_str(), peak.value), ("gauge", 123456.5));
        assert_eq!((peak.monotonic, peak.temporality.as_deref()), (None, None));
        assert_eq!(peak.start_time_unix_nano, Some(0));
        assert_eq!(
            find(&points, "exec.cpu.ratio", "pusher-grpc")[0].value,
            0.25
        );

        for (service, temporality) in [("pusher-grpc", "cumulative"), ("pusher-http", "delta")] {
            let h = find(&points, "exec.io.wait", service)[0];
            assert_eq!(h.kind, "histogram");
            assert_eq!(h.temporality.as_deref(), Some(temporality));
            assert_eq!((h.count, h.value), (Some(6), 3.6025));
            assert_eq!((h.min, h.max), (Some(0.0005), Some(3.0)));
            assert_eq!(h.bounds, [0.001, 0.01, 0.1, 1.0]);
            assert_eq!(h.bucket_counts, [1, 1, 2, 1, 1]);
            assert_eq!(h.attr("exec"), Some("build-1"));
            assert_eq!(h.monotonic, None);
        }
        let delta = find(&points, "exec.bytes.read", "pusher-http");
        assert_eq!(delta[0].temporality.as_deref(), Some("delta"));

        let json = find(&points, "j.sum", "json-pusher")[0];
        assert!(json.value.is_nan(), "rotel drops a string asInt");
        assert_eq!(json.attr("d"), Some("1.5"));
        assert_eq!(json.attr("arr"), Some("Slice(Int(1), Str(x))"));
        assert_eq!(json.scope, "s");
        assert_eq!(json.time_unix_nano, Some(1700000000000000000));
        assert_eq!(find(&points, "j.gauge", "json-pusher")[0].value, 1e21);
    }

    #[test]
    fn half_printed_output_parses() {
        for cut in (0..SAMPLE.len()).step_by(97) {
            if SAMPLE.is_char_boundary(cut) {
                parse_points(&SAMPLE[..cut]);
            }
        }
        assert_eq!(
            parse_attr("a: b: Str(c: d)"),
            Some(("a: b".into(), "c: d".into()))
        );
        assert_eq!(parse_attr("k: Empty"), Some(("k".into(), "Empty".into())));
        assert_eq!(strip_ansi("\x1b[2mx\x1b[0m y"), "x y");
    }

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

    /// What rotel printed for two spans of the Python SDK 1.45.2 over HTTP (with colours).
    const SPANS: &str =
        "\x1b[2m2026-12-03T13:45:25.277206Z\x1b[0m \x1b[32m INFO\x1b[0m Starting Rotel.
ResourceSpans #0
Resource SchemaURL: 
Resource attributes:
     -> service.name: Str(unknown_service:python)
ScopeSpans #0
ScopeSpans SchemaURL: 
InstrumentationScope x 
Span #0
    Trace ID       : 0b31f007db98934fe336a79ceb930031
    Parent ID      : 85e613af8c178975
    ID             : 3d39cc5afc20ada7
    Name           : child
    Kind           : SPAN_KIND_INTERNAL
Start time: 1796305527394716328
End time: 1796305527394726353
    Status code    : STATUS_CODE_UNSET
    Status message : 
Attributes:
     -> a.b: Str(v)
     -> n: Int(3)
ResourceSpans #0
Resource SchemaURL: 
Resource attributes:
     -> service.name: Str(unknown_service:python)
ScopeSpans #0
Span #0
    Trace ID       : 0b31f007db98934fe336a79ceb930031
    Parent ID      : 
    ID             : 85e613af8c178975
    Name           : parent
    Kind           : SPAN_KIND_INTERNAL
Start time: 1796305527394656838
End time: 1796305527397889202
";

    #[test]
    fn parses_spans() {
        let s = parse_spans(SPANS);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].trace_id, "0b31f007db98934fe336a79ceb930031");
        assert_eq!(s[0].parent_id, "85e613af8c178975");
        assert_eq!(s[0].id, "3d39cc5afc20ada7");
        assert_eq!(s[0].name, "child");
        assert_eq!(s[0].start_unix_nano, 1796305527394716328);
        assert_eq!(s[0].end_unix_nano, 1796305527394726353);
        assert_eq!(s[0].attributes["a.b"], "v");
        assert_eq!(s[0].attributes["n"], "3");
        assert_eq!(s[0].resource["service.name"], "unknown_service:python");
        assert_eq!(s[1].parent_id, "");
        assert_eq!(s[1].name, "parent");
        assert!(s[1].attributes.is_empty());
    }
}
