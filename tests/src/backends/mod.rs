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
//!
//! Modules: [`rotel`] runs the collector, [`rotel_log`] reads what it prints, [`prometheus`]
//! runs Prometheus, [`tls`] makes a private CA and a TLS-terminating proxy, [`scripted`]
//! answers OTLP/HTTP requests from a script (the exporter's retries).

mod prometheus;
mod rotel;
mod rotel_log;
mod scripted;
mod tls;

pub use prometheus::*;
pub use rotel::*;
pub use rotel_log::*;
pub use scripted::*;
pub use tls::*;

use std::{
    io::{BufRead as _, BufReader, Read},
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{ChildStderr, ChildStdout},
    sync::{Arc, Mutex},
    thread,
    time::{Duration, Instant},
};

fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// A backend binary: `$var`, else where `cargo xtask test` installs it; panics (never skips)
/// when neither exists.
pub(crate) fn backend_bin(var: &str, default: PathBuf) -> PathBuf {
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
pub(crate) fn free_ports<const N: usize>() -> [u16; N] {
    // Hold all listeners at once: N distinct ports.
    let ls: Vec<TcpListener> = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    std::array::from_fn(|i| ls[i].local_addr().unwrap().port())
}

pub(crate) fn accepts(port: u16) -> bool {
    TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200)).is_ok()
}

/// What a child printed, collected by reader threads.
#[derive(Default)]
pub(crate) struct Captured {
    stdout: String,
    stderr: String,
    last: Option<Instant>,
}

pub(crate) fn capture(
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
