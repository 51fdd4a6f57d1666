//! rotel's detailed debug log (`--debug-log metrics|traces --debug-log-verbosity detailed`)
//! read back into data points and spans.

use std::collections::BTreeMap;

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
