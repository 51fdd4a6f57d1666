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
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use opentelemetry::{
    InstrumentationScope, KeyValue,
    trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState},
};
use opentelemetry_sdk::trace::{
    IdGenerator as _, RandomIdGenerator, SpanData, SpanEvents, SpanExporter as _, SpanLinks,
};

use super::otlp::{Cause, cause_of};
use crate::record::ExecReport;

/// Most spans kept waiting for a collector that does not answer.
const MAX_PENDING: usize = 10_000;
/// Most spans in one export.
const BATCH: usize = 512;

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

fn time(unix_ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(unix_ns)
}

/// What the span is called: the container's name, else its command, else the exec's path.
fn span_name(r: &ExecReport) -> String {
    let c = r.container.as_ref();
    let given = |s: Option<&String>| s.filter(|s| !s.trim().is_empty()).cloned();
    let name = given(c.and_then(|c| c.name.as_ref()))
        .or_else(|| given(c.and_then(|c| c.command.as_ref())))
        .or_else(|| given(r.command.as_ref()))
        .unwrap_or_else(|| r.exec.clone());
    if name.chars().count() > 128 {
        let mut s: String = name.chars().take(127).collect();
        s.push('…');
        s
    } else {
        name
    }
}

/// The span of an exec whose figures are final.
pub(crate) fn span_of(r: &ExecReport, attrs: &[(String, String)]) -> SpanData {
    let ids = RandomIdGenerator::default();
    let trace = r.ci.as_ref().and_then(|c| c.trace.as_ref());
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
    SpanData {
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
        name: Cow::Owned(span_name(r)),
        start_time: time(r.start_unix_ns),
        end_time: time(r.end_unix_ns.max(r.start_unix_ns)),
        attributes: kv,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: Status::Unset,
        instrumentation_scope: InstrumentationScope::builder("profiler")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
    }
}

/// The spans' exporter thread.
pub(crate) struct Spans {
    tx: Option<mpsc::Sender<SpanData>>,
    thread: Option<JoinHandle<()>>,
    pub(crate) endpoint: String,
}

impl Spans {
    /// Send the spans every `delay` (OTEL_BSP_SCHEDULE_DELAY), and at shutdown.
    pub(crate) fn start(
        exporter: opentelemetry_otlp::SpanExporter,
        cause: Option<Cause>,
        endpoint: String,
        delay: Duration,
    ) -> Self {
        let (tx, rx) = mpsc::channel::<SpanData>();
        let ep = endpoint.clone();
        let thread = std::thread::Builder::new()
            .name("profiler-spans".into())
            .spawn(move || run(exporter, cause, ep, rx, delay))
            .ok();
        Self {
            tx: Some(tx),
            thread,
            endpoint,
        }
    }

    pub(crate) fn send(&self, span: SpanData) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(span);
        }
    }

    /// Send what is left (bounded by the exporter's timeout), then stop.
    pub(crate) fn shutdown(mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(
    exporter: opentelemetry_otlp::SpanExporter,
    cause: Option<Cause>,
    endpoint: String,
    rx: mpsc::Receiver<SpanData>,
    delay: Duration,
) {
    let mut pending: VecDeque<SpanData> = VecDeque::new();
    let mut dropped = 0u64;
    let mut failing = false;
    let mut open = true;
    while open {
        let deadline = std::time::Instant::now() + delay;
        // Gather until the delay is over or a batch is full.
        while pending.len() < BATCH {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(s) => {
                    if pending.len() >= MAX_PENDING {
                        pending.pop_front();
                        dropped += 1;
                        if dropped.is_power_of_two() {
                            eprintln!(
                                "profiler: warning: OTLP span backlog full: {dropped} spans dropped so far"
                            );
                        }
                    }
                    pending.push_back(s);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => break,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        // Everything pending, a batch at a time; a batch that fails waits for the next round
        // (at shutdown: one more try, then it is lost, with a warning).
        while !pending.is_empty() {
            let n = pending.len().min(BATCH);
            let batch: Vec<SpanData> = pending.iter().take(n).cloned().collect();
            match futures_executor::block_on(exporter.export(batch)) {
                Ok(()) => {
                    pending.drain(..n);
                    if failing {
                        failing = false;
                        eprintln!("profiler: OTLP span export to {endpoint} works again");
                    }
                }
                Err(e) => {
                    if !failing {
                        failing = true;
                        eprintln!(
                            "profiler: warning: OTLP span export to {endpoint} failed ({e}{}); \
                             the spans are kept and sent again",
                            cause_of(&cause)
                        );
                    }
                    break;
                }
            }
        }
    }
    if !pending.is_empty() {
        eprintln!(
            "profiler: warning: {} exec spans could not be delivered to {endpoint}",
            pending.len()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ci::{CiContext, TraceContext};

    #[test]
    fn a_span_is_a_child_of_the_execs_trace_context() {
        let r = ExecReport {
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
        let s = span_of(&r, &[("profiler.exec.path".into(), "step-1".into())]);
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
    fn without_a_trace_context_a_span_starts_a_trace() {
        let r = ExecReport {
            exec: "job".into(),
            ..Default::default()
        };
        let s = span_of(&r, &[]);
        assert_eq!(s.parent_span_id, SpanId::INVALID);
        assert!(!s.parent_span_is_remote);
        assert_ne!(s.span_context.trace_id(), TraceId::INVALID);
        assert_eq!(s.name, "job");
    }
}
