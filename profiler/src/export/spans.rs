//! One OTLP span per exec (`--otlp-spans`): from the exec's start to its end, a child of the
//! trace context its first program's environment carried (TRACEPARENT), with the exec's
//! attributes and figures, so that a tracing backend shows where a build's time and bytes
//! went. Spans are made when an exec's figures are final and sent in batches from a thread of
//! their own; a failed batch is kept (bounded) and sent again.

use std::{
    borrow::Cow,
    collections::VecDeque,
    str::FromStr as _,
    sync::mpsc,
    thread::JoinHandle,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use opentelemetry::{
    InstrumentationScope, KeyValue,
    trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState},
};
use opentelemetry_sdk::trace::{
    IdGenerator as _, RandomIdGenerator, SpanData, SpanEvents, SpanExporter, SpanLinks,
};

use super::{
    http_client::{Cause, cause_of},
    secs,
};
use crate::record::ExecRecord;

/// Most spans kept waiting for a collector that does not answer.
const MAX_PENDING: usize = 10_000;
/// Most spans in one export.
const BATCH: usize = 512;

fn time(unix_ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(unix_ns)
}

/// What the span is called: the container's name (`namespace/pod/container` for a pod's),
/// else its command (unless commands are kept off the export), else the exec's path.
fn span_name(r: &ExecRecord, by_command: bool) -> String {
    let c = r.container.as_ref();
    let given = |s: Option<&String>| s.filter(|s| !s.trim().is_empty()).cloned();
    let mut name = given(c.and_then(|c| c.display_name()).as_ref());
    if by_command {
        name = name
            .or_else(|| given(c.and_then(|c| c.command.as_ref())))
            .or_else(|| given(r.command.as_ref()));
    }
    let name = name.unwrap_or_else(|| r.exec.clone());
    if name.chars().count() > 128 {
        let mut s: String = name.chars().take(127).collect();
        s.push('…');
        s
    } else {
        name
    }
}

/// The span of an exec whose figures are final; none when its trace context says the trace
/// is not sampled (its parent is not recorded either). `by_command`: the span may be named
/// by the exec's command.
pub(crate) fn span_of(
    r: &ExecRecord,
    attrs: &[(String, String)],
    by_command: bool,
) -> Option<SpanData> {
    let ids = RandomIdGenerator::default();
    let trace = r.ci.as_ref().and_then(|c| c.trace.as_ref());
    if trace.is_some_and(|t| !t.sampled) {
        return None;
    }
    let parent = trace.and_then(|t| {
        Some((
            TraceId::from_hex(&t.trace_id).ok()?,
            SpanId::from_hex(&t.span_id).ok()?,
            t.tracestate
                .as_deref()
                .and_then(|s| TraceState::from_str(s).ok())
                .unwrap_or_default(),
        ))
    });
    let remote = parent.is_some();
    let (trace_id, parent_span_id, state) = match parent {
        Some((t, s, state)) => (t, s, state),
        None => (ids.new_trace_id(), SpanId::INVALID, TraceState::default()),
    };
    let mut kv: Vec<KeyValue> = attrs
        .iter()
        .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
        .collect();
    let c = &r.cpu;
    let d = &r.disk;
    kv.extend([
        KeyValue::new("profiler.exec.state", r.state.as_str()),
        KeyValue::new("profiler.exec.cpu.time", secs(c.on_cpu_ns)),
        KeyValue::new("profiler.exec.cpu.user_time", secs(c.user_ns)),
        KeyValue::new("profiler.exec.cpu.system_time", secs(c.system_ns)),
        KeyValue::new("profiler.exec.cpu.run_queue_delay", secs(c.runq_delay_ns)),
        KeyValue::new("profiler.exec.cpu.io_wait", secs(c.iowait_ns)),
        KeyValue::new(
            "profiler.exec.cpu.memory_stall",
            secs(c.swapin_ns + c.reclaim_ns + c.thrashing_ns),
        ),
        KeyValue::new("profiler.exec.disk.read_bytes", d.read_bytes as i64),
        KeyValue::new("profiler.exec.disk.write_bytes", d.write_bytes as i64),
        KeyValue::new("profiler.exec.disk.read_requests", d.read_requests as i64),
        KeyValue::new("profiler.exec.disk.write_requests", d.write_requests as i64),
        KeyValue::new("profiler.exec.io.read_bytes", r.io.read_bytes as i64),
        KeyValue::new("profiler.exec.io.write_bytes", r.io.write_bytes as i64),
        KeyValue::new("profiler.exec.processes", r.tasks.processes_started as i64),
    ]);
    if let Some(ph) = &r.phases {
        for (k, v) in [
            ("profiler.exec.phase.setup", ph.setup_ns),
            ("profiler.exec.phase.run", Some(ph.run_ns)),
            ("profiler.exec.phase.teardown", ph.teardown_ns),
        ] {
            if let Some(v) = v {
                kv.push(KeyValue::new(k, secs(v)));
            }
        }
    }
    // The outcome, by OpenTelemetry's process.* names; a failure is the span's error.
    let mut status = Status::Unset;
    if let Some(e) = &r.exit {
        kv.push(KeyValue::new("process.pid", e.pid as i64));
        if let Some(code) = e.status.code {
            kv.push(KeyValue::new("process.exit.code", code as i64));
        }
        if let Some(sig) = &e.status.signal {
            kv.push(KeyValue::new("profiler.exec.exit.signal", sig.clone()));
        }
        if e.status.oom_killed {
            kv.push(KeyValue::new("profiler.exec.exit.oom_killed", true));
        }
        if !e.status.success() {
            status = Status::error(e.status.summary());
        }
    }
    if let Some(s) = r.network.as_ref().and_then(|n| n.sockets.as_ref()) {
        kv.push(KeyValue::new(
            "profiler.exec.network.rx_bytes",
            s.all.rx_bytes as i64,
        ));
        kv.push(KeyValue::new(
            "profiler.exec.network.tx_bytes",
            s.all.tx_bytes as i64,
        ));
    }
    Some(SpanData {
        span_context: SpanContext::new(
            trace_id,
            ids.new_span_id(),
            TraceFlags::SAMPLED,
            false,
            state,
        ),
        parent_span_id,
        parent_span_is_remote: remote,
        span_kind: SpanKind::Internal,
        name: Cow::Owned(span_name(r, by_command)),
        start_time: time(r.start_unix_ns),
        end_time: time(r.end_unix_ns.max(r.start_unix_ns)),
        attributes: kv,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status,
        instrumentation_scope: InstrumentationScope::builder("profiler")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
    })
}

/// The spans' exporter thread.
pub(crate) struct Spans {
    tx: Option<mpsc::Sender<SpanData>>,
    thread: Option<JoinHandle<()>>,
    pub(crate) endpoint: String,
}

/// How the thread sends.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Schedule {
    /// Between two rounds of exports (OTEL_BSP_SCHEDULE_DELAY); also the wait after a failure.
    pub delay: Duration,
    /// At exit, how long the last spans may take.
    pub shutdown: Duration,
}

impl Spans {
    pub(crate) fn start<E: SpanExporter + 'static>(
        exporter: E,
        cause: Option<Cause>,
        endpoint: String,
        schedule: Schedule,
    ) -> anyhow::Result<Self> {
        let (tx, rx) = mpsc::channel::<SpanData>();
        let ep = endpoint.clone();
        let thread = std::thread::Builder::new()
            .name("profiler-spans".into())
            .spawn(move || run(&exporter, &cause, &ep, &rx, schedule))
            .map_err(|e| anyhow::anyhow!("cannot start the span exporter thread: {e}"))?;
        Ok(Self {
            tx: Some(tx),
            thread: Some(thread),
            endpoint,
        })
    }

    pub(crate) fn send(&self, span: SpanData) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(span);
        }
    }

    /// Send what is left (within the schedule's shutdown budget), then stop.
    pub(crate) fn shutdown(mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Spans waiting to be sent: bounded, the oldest dropped first.
#[derive(Default)]
struct Pending {
    spans: VecDeque<SpanData>,
    dropped: u64,
}

impl Pending {
    fn push(&mut self, s: SpanData) {
        if self.spans.len() >= MAX_PENDING {
            self.spans.pop_front();
            self.dropped += 1;
            if self.dropped.is_power_of_two() {
                log::warn!(
                    "OTLP span backlog full: {} spans dropped so far",
                    self.dropped
                );
            }
        }
        self.spans.push_back(s);
    }
}

/// Whether the collector took the last batch (for saying so once when that changes).
struct Link<'a> {
    endpoint: &'a str,
    cause: &'a Option<Cause>,
    failing: bool,
}

impl Link<'_> {
    /// Send one batch of the oldest pending spans; false when the collector did not take it
    /// (the spans stay).
    fn send_batch<E: SpanExporter>(&mut self, exporter: &E, p: &mut Pending) -> bool {
        let n = p.spans.len().min(BATCH);
        let batch: Vec<SpanData> = p.spans.iter().take(n).cloned().collect();
        match futures_executor::block_on(exporter.export(batch)) {
            Ok(()) => {
                p.spans.drain(..n);
                if self.failing {
                    self.failing = false;
                    log::info!("OTLP span export to {} works again", self.endpoint);
                }
                true
            }
            Err(e) => {
                if !self.failing {
                    self.failing = true;
                    log::warn!(
                        "OTLP span export to {} failed ({e}{}); the spans are \
                         kept (at most {MAX_PENDING}) and sent again",
                        self.endpoint,
                        cause_of(self.cause)
                    );
                }
                false
            }
        }
    }
}

/// Take every span as it comes (the queue stays bounded even while the collector is down),
/// and send them all every `delay`; a failure waits for the next round.
fn run<E: SpanExporter>(
    exporter: &E,
    cause: &Option<Cause>,
    endpoint: &str,
    rx: &mpsc::Receiver<SpanData>,
    schedule: Schedule,
) {
    let mut p = Pending::default();
    let mut link = Link {
        endpoint,
        cause,
        failing: false,
    };
    let mut next = Instant::now() + schedule.delay;
    loop {
        match rx.recv_timeout(next.saturating_duration_since(Instant::now())) {
            Ok(s) => {
                p.push(s);
                continue;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        while !p.spans.is_empty() && link.send_batch(exporter, &mut p) {}
        next = Instant::now() + schedule.delay;
    }
    // At exit: what is left, until a batch fails or the budget is spent.
    let deadline = Instant::now() + schedule.shutdown;
    while !p.spans.is_empty() && Instant::now() < deadline && link.send_batch(exporter, &mut p) {}
    if !p.spans.is_empty() {
        log::warn!(
            "{} exec spans could not be delivered to {endpoint}",
            p.spans.len()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ci::{CiContext, TraceContext};

    #[test]
    fn docs_figures_md_lists_every_span_attribute() {
        let r = crate::docs_check::full_record();
        let span = span_of(&r, &[], true).expect("a sampled trace");
        let listed = crate::docs_check::code_spans(crate::docs_check::section("Span attributes"));
        for kv in &span.attributes {
            assert!(
                listed.contains(&kv.key.as_str()),
                "docs/figures.md, \"Span attributes\" does not list {}",
                kv.key
            );
        }
    }

    #[test]
    fn a_span_is_a_child_of_the_execs_trace_context() {
        let r = ExecRecord {
            exec: "step-1".into(),
            state: crate::record::ExecState::Ended,
            start_unix_ns: 1_700_000_000_000_000_000,
            end_unix_ns: 1_700_000_002_000_000_000,
            command: Some("make -j2".into()),
            ci: Some(CiContext {
                trace: Some(TraceContext {
                    trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
                    span_id: "00f067aa0ba902b7".into(),
                    sampled: true,
                    tracestate: Some("vendor=abc".into()),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let s = span_of(&r, &[("profiler.exec.path".into(), "step-1".into())], true).unwrap();
        assert_eq!(
            s.span_context.trace_id(),
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap()
        );
        assert_eq!(
            s.parent_span_id,
            SpanId::from_hex("00f067aa0ba902b7").unwrap()
        );
        assert!(s.parent_span_is_remote);
        assert_ne!(s.span_context.span_id(), s.parent_span_id);
        assert_eq!(s.name, "make -j2");
        let without = span_of(&r, &[], false).unwrap();
        assert_eq!(
            without.name, "step-1",
            "a command kept off the export names no span"
        );
        assert_eq!(
            s.end_time.duration_since(s.start_time).unwrap(),
            Duration::from_secs(2)
        );
        assert_eq!(s.span_context.trace_state().header(), "vendor=abc");
        assert!(
            s.attributes
                .iter()
                .any(|kv| kv.key.as_str() == "profiler.exec.path")
        );
    }

    #[test]
    fn a_pods_container_names_its_span_namespace_pod_container() {
        use crate::runtime::{ContainerInfo, K8s};
        let r = ExecRecord {
            exec: "k8s.io/4f1c".into(),
            command: Some("/app".into()),
            container: Some(ContainerInfo {
                runtime: "containerd",
                name: Some("app".into()),
                k8s: Some(K8s {
                    pod_name: "web-0".into(),
                    namespace: "shop".into(),
                    pod_uid: None,
                    container_name: Some("app".into()),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(span_name(&r, true), "shop/web-0/app");
    }

    #[test]
    fn without_a_trace_context_a_span_starts_a_trace() {
        let r = ExecRecord {
            exec: "job".into(),
            ..Default::default()
        };
        let s = span_of(&r, &[], true).unwrap();
        assert_eq!(s.parent_span_id, SpanId::INVALID);
        assert!(!s.parent_span_is_remote);
        assert_ne!(s.span_context.trace_id(), TraceId::INVALID);
        assert_eq!(s.name, "job");
    }

    /// A collector that takes a batch or not, as told, and counts what it took.
    #[derive(Debug, Default)]
    struct Fake {
        up: std::sync::atomic::AtomicBool,
        taken: std::sync::Mutex<usize>,
        attempts: std::sync::atomic::AtomicUsize,
    }

    impl SpanExporter for Fake {
        async fn export(&self, batch: Vec<SpanData>) -> opentelemetry_sdk::error::OTelSdkResult {
            use std::sync::atomic::Ordering::SeqCst;
            self.attempts.fetch_add(1, SeqCst);
            if self.up.load(SeqCst) {
                *self.taken.lock().unwrap() += batch.len();
                Ok(())
            } else {
                Err(opentelemetry_sdk::error::OTelSdkError::InternalFailure(
                    "down".into(),
                ))
            }
        }
    }

    fn span() -> SpanData {
        span_of(&ExecRecord::default(), &[], true).unwrap()
    }

    #[test]
    fn an_unsampled_trace_gets_no_span() {
        let r = ExecRecord {
            ci: Some(CiContext {
                trace: Some(TraceContext {
                    trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
                    span_id: "00f067aa0ba902b7".into(),
                    sampled: false,
                    tracestate: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(span_of(&r, &[], true).is_none());
    }

    #[test]
    fn a_collector_that_is_down_keeps_spans_bounded_and_the_exit_bounded() {
        use std::sync::{Arc, atomic::Ordering::SeqCst};
        let fake = Arc::new(Fake::default());
        let (tx, rx) = mpsc::channel();
        let f = fake.clone();
        let schedule = Schedule {
            delay: Duration::from_millis(20),
            shutdown: Duration::from_millis(200),
        };
        let t = std::thread::spawn(move || run(&*f, &None, "test", &rx, schedule));
        for _ in 0..MAX_PENDING + 100 {
            tx.send(span()).unwrap();
        }
        std::thread::sleep(Duration::from_millis(200));
        // Attempts every delay, not in a loop; nothing taken.
        let attempts = fake.attempts.load(SeqCst);
        assert!((1..=20).contains(&attempts), "{attempts} attempts");
        fake.up.store(true, SeqCst);
        std::thread::sleep(Duration::from_millis(200));
        // Once up: what the bound kept, all of it.
        assert_eq!(*fake.taken.lock().unwrap(), MAX_PENDING);
        fake.up.store(false, SeqCst);
        tx.send(span()).unwrap();
        let started = Instant::now();
        drop(tx);
        t.join().unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "exit waited {:?}",
            started.elapsed()
        );
    }
}
