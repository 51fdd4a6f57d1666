//! OTLP push with opentelemetry-otlp: configuration from flags and the standard
//! environment, observable instruments that read the shared view, and an exporter wrapper
//! that tells the view which ended execs have been delivered.

use std::{
    collections::HashMap,
    env, fs,
    path::PathBuf,
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::{Context as _, Result, anyhow, bail};
use clap::Args;
use opentelemetry::{
    KeyValue,
    metrics::{Histogram, MeterProvider as _},
};
use opentelemetry_otlp::{
    MetricExporter, SpanExporter, WithExportConfig, WithHttpConfig, WithTonicConfig,
};
use opentelemetry_sdk::{
    Resource,
    error::OTelSdkResult,
    metrics::{
        Instrument, PeriodicReader, SdkMeterProvider, Stream, Temporality, data::ResourceMetrics,
        exporter::PushMetricExporter,
    },
    resource::EnvResourceDetector,
};

use super::{
    FINALS_PER_EXPORT, Shared, lock,
    metrics::{DEFS, ExecSeries, Kind, M, SERIES_PER_EXEC, histogram_values, latency_bounds_s},
    spans::{Spans, span_of},
};
use crate::report::ExecReport;

/// OTLP flags; each overrides its standard environment variable.
#[derive(Debug, Clone, Default, Args)]
pub struct OtlpFlags {
    /// OTLP endpoint (base URL, e.g. http://collector:4317 for gRPC, http://collector:4318
    /// for HTTP) [env: OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT].
    /// Metrics are pushed only when an endpoint is set.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// grpc or http/protobuf [env: OTEL_EXPORTER_OTLP_METRICS_PROTOCOL,
    /// OTEL_EXPORTER_OTLP_PROTOCOL; default http/protobuf].
    #[arg(long, value_name = "PROTOCOL")]
    pub otlp_protocol: Option<String>,
    /// Headers sent with each export, as key=value,key2=value2 [env:
    /// OTEL_EXPORTER_OTLP_METRICS_HEADERS, OTEL_EXPORTER_OTLP_HEADERS].
    #[arg(long, value_name = "HEADERS")]
    pub otlp_headers: Option<String>,
    /// Timeout of one export [env: OTEL_EXPORTER_OTLP_METRICS_TIMEOUT,
    /// OTEL_EXPORTER_OTLP_TIMEOUT in ms; default 10s].
    #[arg(long, value_name = "DURATION", value_parser = crate::commands::parse_duration)]
    pub otlp_timeout: Option<Duration>,
    /// Interval between exports [env: OTEL_METRIC_EXPORT_INTERVAL in ms; default 60s].
    #[arg(long, value_name = "DURATION", value_parser = crate::commands::parse_duration)]
    pub export_interval: Option<Duration>,
    /// cumulative or delta [env: OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE; default
    /// cumulative]. The disk latency histogram is always a delta: each exec's is sent once,
    /// when it ends.
    #[arg(long, value_name = "TEMPORALITY")]
    pub otlp_temporality: Option<String>,
    /// PEM file of the CA certificate(s) an https endpoint's certificate may chain to,
    /// besides the public roots [env: OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE,
    /// OTEL_EXPORTER_OTLP_CERTIFICATE].
    #[arg(long, value_name = "FILE")]
    pub otlp_certificate: Option<PathBuf>,
    /// PEM file of the client certificate for mutual TLS [env:
    /// OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE, OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE].
    #[arg(long, value_name = "FILE")]
    pub otlp_client_certificate: Option<PathBuf>,
    /// PEM file of the client's private key for mutual TLS [env:
    /// OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY, OTEL_EXPORTER_OTLP_CLIENT_KEY].
    #[arg(long, value_name = "FILE")]
    pub otlp_client_key: Option<PathBuf>,
    /// Also send one OTLP span per exec, a child of the trace context in its first program's
    /// environment (TRACEPARENT), to the traces endpoint [env:
    /// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else the base endpoint with /v1/traces]; batches
    /// go every OTEL_BSP_SCHEDULE_DELAY ms (default 5000).
    #[arg(long)]
    pub otlp_spans: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Grpc,
    HttpProtobuf,
}

/// Resolved OTLP settings.
#[derive(Clone, Debug, PartialEq)]
pub struct OtlpConfig {
    pub protocol: Protocol,
    /// Full URL the exporter posts to (HTTP: with /v1/metrics).
    pub endpoint: String,
    pub headers: Vec<(String, String)>,
    pub timeout: Duration,
    pub interval: Duration,
    pub delta: bool,
    pub tls: TlsFiles,
    /// Where spans go (HTTP: with /v1/traces), with --otlp-spans.
    pub spans_endpoint: Option<String>,
    /// How often a batch of spans goes.
    pub spans_delay: Duration,
}

/// PEM contents for an https endpoint, read (and checked) when the settings are resolved.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TlsFiles {
    pub ca: Option<Vec<u8>>,
    /// (certificate chain, private key)
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl TlsFiles {
    fn resolve(f: &OtlpFlags) -> Result<Self> {
        let file = |flag: &Option<PathBuf>, flag_name: &str, vars: &[&str]| {
            let (name, path) = match flag {
                Some(p) => (flag_name.to_owned(), p.clone()),
                None => match var(vars) {
                    Some((n, v)) => (n, PathBuf::from(v)),
                    None => return Ok(None),
                },
            };
            fs::read(&path)
                .map(|pem| Some((name.clone(), pem)))
                .map_err(|e| anyhow!("{name}: cannot read {}: {e}", path.display()))
        };
        let ca = file(
            &f.otlp_certificate,
            "--otlp-certificate",
            &[
                "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE",
                "OTEL_EXPORTER_OTLP_CERTIFICATE",
            ],
        )?;
        let cert = file(
            &f.otlp_client_certificate,
            "--otlp-client-certificate",
            &[
                "OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE",
                "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
            ],
        )?;
        let key = file(
            &f.otlp_client_key,
            "--otlp-client-key",
            &[
                "OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY",
                "OTEL_EXPORTER_OTLP_CLIENT_KEY",
            ],
        )?;
        if let Some((name, pem)) = &ca {
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| anyhow!("{name}: not a PEM certificate file ({e})"))?;
            if certs.is_empty() {
                bail!("{name}: no PEM certificate in the file");
            }
        }
        let identity = match (cert, key) {
            (None, None) => None,
            (Some((cn, cert)), Some((_, key))) => {
                reqwest_identity(&cert, &key).map_err(|e| {
                    anyhow!("{cn} and its key: not a PEM certificate and private key ({e})")
                })?;
                Some((cert, key))
            }
            (Some((n, _)), None) | (None, Some((n, _))) => bail!(
                "{n} is set without its pair: mutual TLS needs both a client certificate and \
                 its key"
            ),
        };
        Ok(Self {
            ca: ca.map(|(_, pem)| pem),
            identity,
        })
    }

    fn is_set(&self) -> bool {
        self.ca.is_some() || self.identity.is_some()
    }

    /// tonic's TLS settings: the public roots, the extra CA, the client identity.
    fn tonic(&self) -> opentelemetry_otlp::tonic_types::transport::ClientTlsConfig {
        use opentelemetry_otlp::tonic_types::transport::{Certificate, ClientTlsConfig, Identity};
        let mut c = ClientTlsConfig::new()
            .with_webpki_roots()
            // OTLP/gRPC is HTTP/2 whatever the TLS layer negotiates (a TLS-terminating proxy
            // may offer no ALPN).
            .assume_http2(true);
        if let Some(ca) = &self.ca {
            c = c.ca_certificate(Certificate::from_pem(ca));
        }
        if let Some((cert, key)) = &self.identity {
            c = c.identity(Identity::from_pem(cert, key));
        }
        c
    }

    /// A blocking HTTP client with these settings, made on a thread of its own (it must not
    /// be made inside an async runtime).
    fn http_client(&self, timeout: Duration) -> Result<reqwest::blocking::Client> {
        let tls = self.clone();
        std::thread::spawn(move || -> Result<_> {
            let mut b = reqwest::blocking::Client::builder().timeout(timeout);
            if let Some(ca) = &tls.ca {
                b = b.tls_certs_merge(reqwest::Certificate::from_pem_bundle(ca)?);
            }
            if let Some((cert, key)) = &tls.identity {
                b = b.identity(reqwest_identity(cert, key)?);
            }
            Ok(b.build()?)
        })
        .join()
        .map_err(|_| anyhow!("the HTTP client set-up panicked"))?
        .context("cannot set up the HTTP client")
    }
}

/// reqwest takes the certificate chain and the key in one PEM.
fn reqwest_identity(cert: &[u8], key: &[u8]) -> reqwest::Result<reqwest::Identity> {
    reqwest::Identity::from_pem(&[cert, b"\n", key].concat())
}

/// The OTLP exporter reports any failed HTTP request as "network error": this client keeps
/// the cause (connection refused, a certificate rejected, a timeout) for the warning.
#[derive(Debug)]
struct HttpWithCause {
    inner: reqwest::blocking::Client,
    cause: Cause,
}

/// Why the last request failed, if it did.
pub(crate) type Cause = Arc<Mutex<Option<String>>>;

/// ": <cause>" of the HTTP client's last failure, or nothing.
pub(crate) fn cause_of(cause: &Option<Cause>) -> String {
    cause
        .as_ref()
        .and_then(|c| lock(c).clone())
        .map(|c| format!(": {c}"))
        .unwrap_or_default()
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for HttpWithCause {
    async fn send_bytes(
        &self,
        request: http::Request<bytes::Bytes>,
    ) -> Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        let r = self.inner.send_bytes(request).await;
        *lock(&self.cause) = r.as_ref().err().map(|e| error_chain(e.as_ref()));
        r
    }
}

/// An error and its sources, each once: "a: b: c".
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        let t = s.to_string();
        if !out.contains(&t) {
            out = format!("{out}: {t}");
        }
        src = s.source();
    }
    out
}

fn var(names: &[&str]) -> Option<(String, String)> {
    names.iter().find_map(|n| {
        env::var(n)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .map(|v| (n.to_string(), v.trim().to_owned()))
    })
}

fn millis(name: &str, v: &str) -> Result<Duration> {
    v.parse::<u64>()
        .map(Duration::from_millis)
        .map_err(|_| anyhow!("{name}={v:?} is not a number of milliseconds"))
}

/// Parse `key=value,key2=value2` (values percent-decoded, as the OTLP spec says).
pub fn parse_headers(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| format!("header {part:?} has no '=' (use key=value,key2=value2)"))?;
        let k = k.trim();
        let v = percent_decode(v.trim()).ok_or_else(|| format!("header {k:?}: bad %-escape"))?;
        if k.is_empty()
            || !k
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.!#$&'*+^`|~".contains(&b))
        {
            return Err(format!("header name {k:?} is not a valid HTTP header name"));
        }
        if v.bytes().any(|b| b < 0x20 && b != b'\t' || b == 0x7f) {
            return Err(format!("header {k:?} has a control character in its value"));
        }
        out.push((k.to_ascii_lowercase(), v));
    }
    Ok(out)
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Check an endpoint URL: http or https, a host, an optional port.
fn check_endpoint(what: &str, url: &str) -> Result<()> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| anyhow!("{what} {url:?} must start with http:// or https://"))?;
    let authority = rest.split('/').next().unwrap_or("");
    let host = match authority.rsplit_once(':') {
        Some((h, port)) if !h.ends_with(']') || authority.starts_with('[') => {
            if !port.is_empty() && port.parse::<u16>().is_err() && !h.starts_with('[') {
                bail!("{what} {url:?} has a bad port {port:?}");
            }
            h
        }
        _ => authority,
    };
    if host.is_empty() || host.contains(|c: char| c.is_whitespace() || c == '@') {
        bail!("{what} {url:?} has no valid host");
    }
    Ok(())
}

impl OtlpConfig {
    /// From the flags and the standard environment. None when no endpoint is set anywhere
    /// (or OTEL_METRICS_EXPORTER=none).
    pub fn resolve(f: &OtlpFlags) -> Result<Option<Self>> {
        if f.otlp_endpoint.is_none()
            && var(&["OTEL_METRICS_EXPORTER"]).is_some_and(|(_, v)| v == "none")
        {
            return Ok(None);
        }
        let protocol = match f
            .otlp_protocol
            .clone()
            .map(|v| ("--otlp-protocol".to_owned(), v))
            .or_else(|| {
                var(&[
                    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
                    "OTEL_EXPORTER_OTLP_PROTOCOL",
                ])
            }) {
            None => Protocol::HttpProtobuf,
            Some((_, v)) if v == "grpc" => Protocol::Grpc,
            Some((_, v)) if v == "http/protobuf" => Protocol::HttpProtobuf,
            Some((name, v)) if v == "http/json" => {
                bail!("{name}={v}: OTLP over HTTP/JSON is not supported; use grpc or http/protobuf")
            }
            Some((name, v)) => {
                bail!("{name}={v:?}: unknown OTLP protocol; use grpc or http/protobuf")
            }
        };
        // Base endpoints get the signal path on HTTP; the metrics-specific one is used as is.
        let path = |base: &str| match protocol {
            Protocol::Grpc => base.to_owned(),
            Protocol::HttpProtobuf => format!("{}/v1/metrics", base.trim_end_matches('/')),
        };
        let endpoint = if let Some(e) = &f.otlp_endpoint {
            check_endpoint("--otlp-endpoint", e)?;
            path(e)
        } else if let Some((n, e)) = var(&["OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"]) {
            check_endpoint(&n, &e)?;
            e
        } else if let Some((n, e)) = var(&["OTEL_EXPORTER_OTLP_ENDPOINT"]) {
            check_endpoint(&n, &e)?;
            path(&e)
        } else if f.otlp_spans {
            bail!(
                "--otlp-spans needs an OTLP endpoint: pass --otlp-endpoint or set \
                 OTEL_EXPORTER_OTLP_ENDPOINT"
            );
        } else {
            return Ok(None);
        };
        let traces_path = |base: &str| match protocol {
            Protocol::Grpc => base.to_owned(),
            Protocol::HttpProtobuf => format!("{}/v1/traces", base.trim_end_matches('/')),
        };
        let spans_endpoint = match (f.otlp_spans, &f.otlp_endpoint) {
            (false, _) => None,
            (true, Some(e)) => Some(traces_path(e)),
            (true, None) => Some(
                if let Some((n, e)) = var(&["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]) {
                    check_endpoint(&n, &e)?;
                    e
                } else if let Some((_, e)) = var(&["OTEL_EXPORTER_OTLP_ENDPOINT"]) {
                    traces_path(&e)
                } else {
                    bail!(
                        "--otlp-spans needs a traces endpoint: set \
                         OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, or \
                         pass --otlp-endpoint"
                    );
                },
            ),
        };
        let spans_delay = match var(&["OTEL_BSP_SCHEDULE_DELAY"]) {
            Some((n, v)) => millis(&n, &v)?,
            None => Duration::from_secs(5),
        };
        let headers = match f
            .otlp_headers
            .clone()
            .map(|v| ("--otlp-headers".to_owned(), v))
            .or_else(|| {
                var(&[
                    "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
                    "OTEL_EXPORTER_OTLP_HEADERS",
                ])
            }) {
            Some((name, v)) => parse_headers(&v).map_err(|e| anyhow!("{name}: {e}"))?,
            None => Vec::new(),
        };
        let timeout = match f.otlp_timeout {
            Some(t) => t,
            None => match var(&[
                "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
                "OTEL_EXPORTER_OTLP_TIMEOUT",
            ]) {
                Some((n, v)) => millis(&n, &v)?,
                None => Duration::from_secs(10),
            },
        };
        let interval = match f.export_interval {
            Some(t) => t,
            None => match var(&["OTEL_METRIC_EXPORT_INTERVAL"]) {
                Some((n, v)) => millis(&n, &v)?,
                None => Duration::from_secs(60),
            },
        };
        if interval.is_zero() {
            bail!("the export interval must be above zero");
        }
        let delta = match f
            .otlp_temporality
            .clone()
            .map(|v| ("--otlp-temporality".to_owned(), v))
            .or_else(|| var(&["OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE"]))
        {
            None => false,
            Some((_, v))
                if v.eq_ignore_ascii_case("cumulative") || v.eq_ignore_ascii_case("lowmemory") =>
            {
                false
            }
            Some((_, v)) if v.eq_ignore_ascii_case("delta") => true,
            Some((n, v)) => bail!("{n}={v:?}: unknown temporality; use cumulative or delta"),
        };
        let tls = TlsFiles::resolve(f)?;
        if tls.is_set() && !endpoint.starts_with("https://") {
            eprintln!(
                "profiler: note: the OTLP certificate settings are not used: the endpoint \
                 {endpoint} is not https://"
            );
        }
        Ok(Some(Self {
            protocol,
            endpoint,
            headers,
            timeout,
            interval,
            delta,
            tls,
            spans_endpoint,
            spans_delay,
        }))
    }

    /// gRPC settings of an exporter builder: endpoint, timeout, headers, TLS.
    fn tonic<B: WithExportConfig + WithTonicConfig>(&self, b: B, endpoint: &str) -> Result<B> {
        let mut hm = http::HeaderMap::new();
        for (k, v) in &self.headers {
            let key = http::HeaderName::from_bytes(k.as_bytes())
                .map_err(|e| anyhow!("header {k:?}: {e}"))?;
            let val = http::HeaderValue::from_str(v).map_err(|e| anyhow!("header {k:?}: {e}"))?;
            hm.insert(key, val);
        }
        let md = opentelemetry_otlp::tonic_types::metadata::MetadataMap::from_headers(hm);
        let mut b = b
            .with_endpoint(endpoint)
            .with_timeout(self.timeout)
            .with_metadata(md);
        if endpoint.starts_with("https://") {
            b = b.with_tls_config(self.tls.tonic());
        }
        Ok(b)
    }

    /// HTTP/protobuf settings of an exporter builder, and the slot where its client keeps the
    /// cause of a failure.
    fn http<B: WithExportConfig + WithHttpConfig>(
        &self,
        b: B,
        endpoint: &str,
    ) -> Result<(B, Cause)> {
        let slot = Arc::new(Mutex::new(None));
        let b = b
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(endpoint)
            .with_timeout(self.timeout)
            .with_headers(self.headers.iter().cloned().collect::<HashMap<_, _>>())
            .with_http_client(HttpWithCause {
                inner: self.tls.http_client(self.timeout)?,
                cause: slot.clone(),
            });
        Ok((b, slot))
    }

    /// The metrics exporter, and for HTTP the slot where its client keeps the cause of a
    /// failure.
    fn build_exporter(&self) -> Result<(MetricExporter, Option<Cause>)> {
        // Counters and gauges are observed, so "LowMemory" keeps them cumulative; it makes
        // the one synchronous instrument, the latency histogram, a delta.
        let temporality = if self.delta {
            Temporality::Delta
        } else {
            Temporality::LowMemory
        };
        let (e, cause) = match self.protocol {
            Protocol::Grpc => {
                let b = MetricExporter::builder()
                    .with_tonic()
                    .with_temporality(temporality);
                (self.tonic(b, &self.endpoint)?.build(), None)
            }
            Protocol::HttpProtobuf => {
                let b = MetricExporter::builder()
                    .with_http()
                    .with_temporality(temporality);
                let (b, cause) = self.http(b, &self.endpoint)?;
                (b.build(), Some(cause))
            }
        };
        let e =
            e.map_err(|e| anyhow!("cannot set up the OTLP exporter for {}: {e}", self.endpoint))?;
        Ok((e, cause))
    }

    /// The span exporter (one span per exec), for `--otlp-spans`.
    fn build_span_exporter(&self, endpoint: &str) -> Result<(SpanExporter, Option<Cause>)> {
        let (e, cause) = match self.protocol {
            Protocol::Grpc => (
                self.tonic(SpanExporter::builder().with_tonic(), endpoint)?
                    .build(),
                None,
            ),
            Protocol::HttpProtobuf => {
                let (b, cause) = self.http(SpanExporter::builder().with_http(), endpoint)?;
                (b.build(), Some(cause))
            }
        };
        let e =
            e.map_err(|e| anyhow!("cannot set up the OTLP span exporter for {endpoint}: {e}"))?;
        Ok((e, cause))
    }
}

/// The resource: who sends. OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override.
fn resource() -> Resource {
    let uname = nix::sys::utsname::uname().ok();
    let s = |f: fn(&nix::sys::utsname::UtsName) -> &std::ffi::OsStr| {
        uname
            .as_ref()
            .map(|u| f(u).to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let arch = match env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        a => a,
    };
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut b = Resource::builder_empty()
        .with_service_name("profiler")
        .with_attributes([
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            KeyValue::new("host.name", host),
            KeyValue::new("host.arch", arch),
            KeyValue::new("os.type", "linux"),
            KeyValue::new("os.version", s(|u| u.release())),
            KeyValue::new(
                "os.description",
                format!(
                    "{} {} {}",
                    s(|u| u.sysname()),
                    s(|u| u.release()),
                    s(|u| u.version())
                ),
            ),
        ])
        .with_detector(Box::new(EnvResourceDetector::new()));
    if let Some((_, name)) = var(&["OTEL_SERVICE_NAME"]) {
        b = b.with_service_name(name);
    }
    b.build()
}

/// Delegates to the OTLP exporter and tells the shared view how each attempt went.
struct Acking {
    inner: MetricExporter,
    /// Set once the meter exists (after the exporter).
    latency: Arc<OnceLock<LatencyHistogram>>,
    /// Why the HTTP client's last request failed (the exporter's own error does not say).
    http_cause: Option<Cause>,
    shared: Arc<Mutex<Shared>>,
    failing: AtomicBool,
    endpoint: String,
}

impl PushMetricExporter for Acking {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let r = self.inner.export(metrics).await;
        let record = lock(&self.shared).exported(r.is_ok());
        if let Some(h) = self.latency.get() {
            record.iter().for_each(|s| h.record(s));
        }
        match &r {
            Ok(()) if self.failing.swap(false, Ordering::Relaxed) => {
                eprintln!("profiler: OTLP export to {} works again", self.endpoint)
            }
            Err(e) if !self.failing.swap(true, Ordering::Relaxed) => {
                let cause = cause_of(&self.http_cause);
                eprintln!(
                    "profiler: warning: OTLP export to {} failed ({e}{cause}); measuring goes \
                     on, and ended execs' final records are kept and sent again at each interval",
                    self.endpoint
                )
            }
            _ => {}
        }
        r
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

pub(crate) struct Otlp {
    config: OtlpConfig,
    shared: Arc<Mutex<Shared>>,
    provider: SdkMeterProvider,
    /// Runs the gRPC client's connection tasks, apart from the profiler's own loop.
    runtime: Option<tokio::runtime::Runtime>,
    latency: LatencyHistogram,
    spans: Option<Spans>,
}

/// The disk latency histogram instrument, a delta: each ended exec's is recorded for the
/// collection that first shows the exec, and again after an export of it failed.
#[derive(Clone)]
struct LatencyHistogram {
    histogram: Histogram<f64>,
    bounds: Vec<f64>,
}

impl LatencyHistogram {
    fn record(&self, s: &ExecSeries) {
        for h in &s.hists {
            let mut kv: Vec<KeyValue> = s
                .attrs
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
                .collect();
            kv.extend(h.attrs.iter().map(|(k, v)| KeyValue::new(*k, v.clone())));
            for (v, n) in histogram_values(&self.bounds, &h.counts, h.sum_s) {
                for _ in 0..n {
                    self.histogram.record(v, &kv);
                }
            }
        }
    }
}

impl Otlp {
    pub(crate) fn start(
        config: OtlpConfig,
        shared: Arc<Mutex<Shared>>,
        max_execs: usize,
    ) -> Result<Self> {
        // Built on a thread of its own: the HTTP client blocks and must not be made (or
        // dropped) inside the async runtime; the gRPC client needs a runtime of its own.
        std::thread::spawn(move || Self::build(config, shared, max_execs))
            .join()
            .map_err(|_| anyhow!("the OTLP exporter set-up panicked"))?
    }

    fn build(config: OtlpConfig, shared: Arc<Mutex<Shared>>, max_execs: usize) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("profiler-otlp")
            .enable_all()
            .build()
            .context("cannot start the OTLP runtime")?;
        let guard = runtime.enter();
        let (inner, http_cause) = config.build_exporter()?;
        let latency_slot = Arc::new(OnceLock::new());
        let exporter = Acking {
            inner,
            latency: latency_slot.clone(),
            http_cause,
            shared: shared.clone(),
            failing: AtomicBool::new(false),
            endpoint: config.endpoint.clone(),
        };
        let reader = PeriodicReader::builder(exporter)
            .with_interval(config.interval)
            .build();
        // Beyond its series limit (2000 by default) the SDK folds series into one overflow
        // series: size it for every exec that one collection can show.
        let limit = (max_execs + FINALS_PER_EXPORT) * SERIES_PER_EXEC;
        let provider = SdkMeterProvider::builder()
            .with_resource(resource())
            .with_reader(reader)
            .with_view(move |_: &Instrument| {
                Stream::builder().with_cardinality_limit(limit).build().ok()
            })
            .build();
        let meter = provider.meter("profiler");
        for (i, d) in DEFS.iter().enumerate() {
            let sh = shared.clone();
            // One callback per instrument: the points of metric `i` of every exec shown.
            let each = move |f: &mut dyn FnMut(f64, &[KeyValue])| {
                let series = lock(&sh).for_otlp();
                for s in series {
                    let base: Vec<KeyValue> = s
                        .attrs
                        .iter()
                        .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
                        .collect();
                    for p in s.points.iter().filter(|p| p.metric as usize == i) {
                        let mut kv = base.clone();
                        kv.extend(p.attrs.iter().map(|(k, v)| KeyValue::new(*k, v.clone())));
                        f(p.value, &kv);
                    }
                }
            };
            match (d.kind, d.integer) {
                (Kind::Counter, true) => {
                    meter
                        .u64_observable_counter(d.name)
                        .with_unit(d.unit)
                        .with_description(d.description)
                        .with_callback(move |o| each(&mut |v, kv| o.observe(v as u64, kv)))
                        .build();
                }
                (Kind::Counter, false) => {
                    meter
                        .f64_observable_counter(d.name)
                        .with_unit(d.unit)
                        .with_description(d.description)
                        .with_callback(move |o| each(&mut |v, kv| o.observe(v, kv)))
                        .build();
                }
                (Kind::Gauge, true) => {
                    meter
                        .u64_observable_gauge(d.name)
                        .with_unit(d.unit)
                        .with_description(d.description)
                        .with_callback(move |o| each(&mut |v, kv| o.observe(v as u64, kv)))
                        .build();
                }
                (Kind::Gauge, false) => {
                    meter
                        .f64_observable_gauge(d.name)
                        .with_unit(d.unit)
                        .with_description(d.description)
                        .with_callback(move |o| each(&mut |v, kv| o.observe(v, kv)))
                        .build();
                }
                (Kind::Histogram, _) => {}
            }
        }
        // Always observed, so that no collection is empty: the SDK skips the export of an
        // empty one, and the shared view learns of deliveries from exports.
        let sh = shared.clone();
        meter
            .u64_observable_gauge("profiler.execs.running")
            .with_unit("{exec}")
            .with_description("Execs the profiler follows now")
            .with_callback(move |o| o.observe(lock(&sh).live.len() as u64, &[]))
            .build();
        let d = &DEFS[M::DiskLatency as usize];
        let bounds = latency_bounds_s();
        let latency = LatencyHistogram {
            histogram: meter
                .f64_histogram(d.name)
                .with_unit(d.unit)
                .with_description(d.description)
                .with_boundaries(bounds.clone())
                .build(),
            bounds,
        };
        let _ = latency_slot.set(latency.clone());
        let spans = match &config.spans_endpoint {
            Some(ep) => {
                let (mut e, cause) = config.build_span_exporter(ep)?;
                opentelemetry_sdk::trace::SpanExporter::set_resource(&mut e, &resource());
                Some(Spans::start(e, cause, ep.clone(), config.spans_delay))
            }
            None => None,
        };
        drop(guard);
        Ok(Self {
            config,
            shared,
            provider,
            runtime: Some(runtime),
            latency,
            spans,
        })
    }

    /// The span of an exec whose figures are final, with its attributes.
    pub(crate) fn span(&self, r: &ExecReport, attrs: &[(String, String)]) {
        if let Some(s) = &self.spans {
            s.send(span_of(r, attrs));
        }
    }

    pub(crate) fn describe(&self) -> String {
        let mut d = format!(
            "pushing OTLP metrics ({}) to {} every {:?}",
            match self.config.protocol {
                Protocol::Grpc => "grpc",
                Protocol::HttpProtobuf => "http/protobuf",
            },
            self.config.endpoint,
            self.config.interval
        );
        if let Some(s) = &self.spans {
            d.push_str(&format!(", one span per exec to {}", s.endpoint));
        }
        d
    }

    /// A last collection and export, bounded by the export timeout.
    pub(crate) fn shutdown(mut self) {
        if let Some(s) = self.spans.take() {
            s.shutdown();
        }
        let record = lock(&self.shared).next_histograms();
        record.iter().for_each(|s| self.latency.record(s));
        let provider = self.provider.clone();
        let timeout = self.config.timeout + Duration::from_secs(1);
        let runtime = self.runtime.take();
        let shared = self.shared.clone();
        let _ = std::thread::spawn(move || {
            // A backlog goes out one window per export: flush while it shrinks, for as long as
            // one export may take; the last window goes with the shutdown.
            let deadline = std::time::Instant::now() + timeout;
            loop {
                let left = lock(&shared).finals.len();
                if left <= FINALS_PER_EXPORT || std::time::Instant::now() >= deadline {
                    break;
                }
                if provider.force_flush().is_err() || lock(&shared).finals.len() >= left {
                    break;
                }
            }
            if let Err(e) = provider.shutdown_with_timeout(timeout) {
                eprintln!("profiler: warning: final OTLP export: {e}");
            }
            if let Some(rt) = runtime {
                rt.shutdown_timeout(Duration::from_secs(1));
            }
        })
        .join();
    }
}
