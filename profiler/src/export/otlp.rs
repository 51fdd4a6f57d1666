//! OTLP push with opentelemetry-otlp: configuration from flags and the standard
//! environment, observable instruments that read the shared view, and an exporter wrapper
//! that tells the view which ended execs have been delivered.

use std::{
    collections::HashMap,
    env,
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, anyhow};
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
    FINALS_PER_EXPORT, LIVE_PER_EXPORT, Shared,
    http_client::{Cause, HttpWithCause, cause_of},
    lock,
    metrics::{
        DEFS, EXECS_RUNNING, ExecSeries, Kind, M, histogram_values, latency_bounds_s, point_kv,
    },
    spans::{Schedule, Spans, span_of},
};
use crate::{
    host::{host_name, kernel_release, os_description},
    record::ExecRecord,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Grpc,
    HttpProtobuf,
}

/// How one signal (metrics, traces) is sent.
#[derive(Clone, Debug, PartialEq)]
pub struct Transport {
    pub protocol: Protocol,
    /// Full URL the exporter posts to (HTTP: with /v1/metrics or /v1/traces).
    pub endpoint: String,
    pub headers: Vec<(String, String)>,
    pub timeout: Duration,
    pub tls: TlsFiles,
}

/// One span per exec (`--otlp-spans`).
#[derive(Clone, Debug, PartialEq)]
pub struct SpansConfig {
    pub transport: Transport,
    /// How often a batch of spans goes.
    pub delay: Duration,
}

/// Resolved OTLP settings.
#[derive(Clone, Debug, PartialEq)]
pub struct OtlpConfig {
    pub metrics: Transport,
    pub interval: Duration,
    pub delta: bool,
    pub spans: Option<SpansConfig>,
}

/// PEM contents for an https endpoint, read (and checked) when the settings are resolved.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TlsFiles {
    pub ca: Option<Vec<u8>>,
    /// (certificate chain, private key)
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl TlsFiles {
    pub fn is_set(&self) -> bool {
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
pub fn reqwest_identity(cert: &[u8], key: &[u8]) -> reqwest::Result<reqwest::Identity> {
    reqwest::Identity::from_pem(&[cert, b"\n", key].concat())
}

impl Transport {
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
    fn build_metric_exporter(&self, delta: bool) -> Result<(MetricExporter, Option<Cause>)> {
        // Counters and gauges are observed, so "LowMemory" keeps them cumulative; it makes
        // the one synchronous instrument, the latency histogram, a delta.
        let temporality = if delta {
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
    fn build_span_exporter(&self) -> Result<(SpanExporter, Option<Cause>)> {
        let endpoint = &self.endpoint;
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
    let arch = match env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        a => a,
    };
    let mut b = Resource::builder_empty()
        .with_service_name("profiler")
        .with_attributes([
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            KeyValue::new("host.name", host_name()),
            KeyValue::new("host.arch", arch),
            KeyValue::new("os.type", "linux"),
            KeyValue::new("os.version", kernel_release()),
            KeyValue::new("os.description", os_description()),
        ])
        .with_detector(Box::new(EnvResourceDetector::new()));
    if let Ok(name) = env::var("OTEL_SERVICE_NAME")
        && !name.trim().is_empty()
    {
        b = b.with_service_name(name.trim().to_owned());
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
                log::info!("OTLP export to {} works again", self.endpoint)
            }
            Err(e) if !self.failing.swap(true, Ordering::Relaxed) => {
                let cause = cause_of(&self.http_cause);
                log::warn!(
                    "OTLP export to {} failed ({e}{cause}); measuring goes \
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
    clock: Option<Clock>,
}

/// Starts each interval's round of collections: the running execs in groups of
/// LIVE_PER_EXPORT, one collection and export each, so that no collection holds them all.
/// With delta temporality one collection shows them all: the SDK computes a delta from the
/// series of the previous collection only.
struct Clock {
    stop: mpsc::Sender<()>,
    thread: thread::JoinHandle<()>,
}

impl Clock {
    fn start(
        provider: SdkMeterProvider,
        shared: Arc<Mutex<Shared>>,
        c: &OtlpConfig,
    ) -> Result<Self> {
        let (stop, stopped) = mpsc::channel::<()>();
        let (interval, grouped) = (c.interval, !c.delta);
        let thread = thread::Builder::new()
            .name("profiler-otlp-clock".into())
            .spawn(move || {
                let mut next = Instant::now() + interval;
                while let Err(mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(next.saturating_duration_since(Instant::now()))
                {
                    // A round longer than the interval starts the next one at once.
                    next = (next + interval).max(Instant::now());
                    let groups = match grouped {
                        true => lock(&shared).live_groups(LIVE_PER_EXPORT),
                        false => Vec::new(),
                    };
                    if groups.len() <= 1 {
                        let _ = provider.force_flush();
                        continue;
                    }
                    for ids in groups {
                        lock(&shared).showing = Some(ids);
                        // A failed export (the collector is down) ends the round: the next
                        // interval tries again, one export per interval as without groups.
                        let failed = provider.force_flush().is_err();
                        if failed || !matches!(stopped.try_recv(), Err(mpsc::TryRecvError::Empty)) {
                            break;
                        }
                    }
                    lock(&shared).showing = None;
                }
            })
            .context("cannot start the OTLP export clock")?;
        Ok(Self { stop, thread })
    }

    /// Stop after the collection under way. The channel is closed, not sent on: a message
    /// could be taken by the check between two collections of a round and the clock would
    /// then wait for another, and the exit for the clock, for ever.
    fn stop(self) {
        drop(self.stop);
        let _ = self.thread.join();
    }
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
        let mut kv = Vec::new();
        for h in &s.hists {
            point_kv(&mut kv, &s.kv, &h.attrs);
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
        let (inner, http_cause) = config.metrics.build_metric_exporter(config.delta)?;
        let latency_slot = Arc::new(OnceLock::new());
        let exporter = Acking {
            inner,
            latency: latency_slot.clone(),
            http_cause,
            shared: shared.clone(),
            failing: AtomicBool::new(false),
            endpoint: config.metrics.endpoint.clone(),
        };
        // The reader exports when the clock (below) asks it to, never on its own.
        let reader = PeriodicReader::builder(exporter)
            .with_interval(Duration::from_secs(100 * 365 * 86400))
            .build();
        // Beyond its series limit (2000 by default) the SDK folds series into one overflow
        // series: size each metric's for every exec that one collection can show. (The SDK
        // sizes its table of series to the limit up front.)
        let execs = max_execs + FINALS_PER_EXPORT;
        let provider = SdkMeterProvider::builder()
            .with_resource(resource())
            .with_reader(reader)
            .with_view(move |i: &Instrument| {
                let per_exec = DEFS
                    .iter()
                    .find(|d| d.name == i.name())
                    .map_or(1, |d| d.series_per_exec);
                Stream::builder()
                    .with_cardinality_limit(execs * per_exec)
                    .build()
                    .ok()
            })
            .build();
        let meter = provider.meter("profiler");
        for (i, d) in DEFS.iter().enumerate() {
            let sh = shared.clone();
            // One callback per instrument: the points of metric `i` of every exec shown.
            let each = move |f: &mut dyn FnMut(f64, &[KeyValue])| {
                let series = lock(&sh).for_otlp();
                let mut kv = Vec::new();
                for s in series {
                    for p in s.points.iter().filter(|p| p.metric as usize == i) {
                        point_kv(&mut kv, &s.kv, &p.attrs);
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
            .u64_observable_gauge(EXECS_RUNNING.name)
            .with_unit(EXECS_RUNNING.unit)
            .with_description(EXECS_RUNNING.description)
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
        let spans = match &config.spans {
            Some(sc) => {
                let (mut e, cause) = sc.transport.build_span_exporter()?;
                opentelemetry_sdk::trace::SpanExporter::set_resource(&mut e, &resource());
                let schedule = Schedule {
                    delay: sc.delay,
                    shutdown: sc.transport.timeout + Duration::from_secs(1),
                };
                Some(Spans::start(
                    e,
                    cause,
                    sc.transport.endpoint.clone(),
                    schedule,
                )?)
            }
            None => None,
        };
        drop(guard);
        let clock = Clock::start(provider.clone(), shared.clone(), &config)?;
        Ok(Self {
            config,
            shared,
            provider,
            runtime: Some(runtime),
            latency,
            spans,
            clock: Some(clock),
        })
    }

    /// The span of an exec whose figures are final, with its attributes.
    pub(crate) fn span(&self, r: &ExecRecord, attrs: &[(String, String)], by_command: bool) {
        if let Some(s) = &self.spans
            && let Some(span) = span_of(r, attrs, by_command)
        {
            s.send(span);
        }
    }

    pub(crate) fn describe(&self) -> String {
        let mut d = format!(
            "pushing OTLP metrics ({}) to {} every {:?}",
            match self.config.metrics.protocol {
                Protocol::Grpc => "grpc",
                Protocol::HttpProtobuf => "http/protobuf",
            },
            self.config.metrics.endpoint,
            self.config.interval
        );
        if let Some(s) = &self.spans {
            d.push_str(&format!(", one span per exec to {}", s.endpoint));
        }
        d
    }

    /// A last collection and export, bounded by the export timeout.
    pub(crate) fn shutdown(mut self) {
        if let Some(c) = self.clock.take() {
            c.stop();
        }
        if let Some(s) = self.spans.take() {
            s.shutdown();
        }
        let record = lock(&self.shared).next_histograms();
        record.iter().for_each(|s| self.latency.record(s));
        let provider = self.provider.clone();
        let timeout = self.config.metrics.timeout + Duration::from_secs(1);
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
                log::warn!("final OTLP export: {e}");
            }
            if let Some(rt) = runtime {
                rt.shutdown_timeout(Duration::from_secs(1));
            }
        })
        .join();
    }
}
