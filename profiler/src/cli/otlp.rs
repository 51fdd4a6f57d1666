//! The OTLP flags, and the settings made from them and from OpenTelemetry's standard
//! environment variables (flags win).

use std::{env, fs, path::PathBuf, time::Duration};

use anyhow::{Result, anyhow, bail};
use clap::Args;

use super::{MAX_DURATION, parse_period};
use crate::export::{OtlpConfig, Protocol, SpansConfig, TlsFiles, Transport, reqwest_identity};

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
    #[arg(long, value_name = "DURATION", value_parser = parse_period)]
    pub otlp_timeout: Option<Duration>,
    /// Interval between exports [env: OTEL_METRIC_EXPORT_INTERVAL in ms; default 60s].
    #[arg(long, value_name = "DURATION", value_parser = parse_period)]
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

fn var(names: &[&str]) -> Option<(String, String)> {
    names.iter().find_map(|n| {
        env::var(n)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .map(|v| (n.to_string(), v.trim().to_owned()))
    })
}

/// A variable's number of milliseconds, at most [`MAX_DURATION`] (as the flags).
fn millis(name: &str, v: &str) -> Result<Duration> {
    let d = v
        .parse::<u64>()
        .map(Duration::from_millis)
        .map_err(|_| anyhow!("{name}={v:?} is not a number of milliseconds"))?;
    if d > MAX_DURATION {
        bail!(
            "{name}={v}: longer than 24 hours ({} ms)",
            MAX_DURATION.as_millis()
        );
    }
    Ok(d)
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

/// Check an endpoint URL fully before anything is attached (the WHATWG URL parser that reqwest
/// sends with): http or https, a valid host (IPv6 in brackets), a port in range, no
/// credentials in the URL (they belong in headers).
pub(crate) fn check_endpoint(what: &str, url: &str) -> Result<()> {
    let u =
        reqwest::Url::parse(url).map_err(|e| anyhow!("{what} {url:?} is not a valid URL: {e}"))?;
    if !matches!(u.scheme(), "http" | "https") {
        bail!("{what} {url:?} must start with http:// or https://");
    }
    if u.host_str().is_none_or(str::is_empty) {
        bail!("{what} {url:?} has no valid host");
    }
    if !u.username().is_empty() || u.password().is_some() {
        bail!("{what} {url:?} has credentials in it: pass them as a header (--otlp-headers)");
    }
    Ok(())
}

/// The OTLP settings from the flags and the standard environment. None when no endpoint is
/// set anywhere (or OTEL_METRICS_EXPORTER=none). Each signal (metrics, traces) takes its own
/// OTEL_EXPORTER_OTLP_<SIGNAL>_* variables first, then the unscoped ones; flags win over both.
pub fn resolve(f: &OtlpFlags) -> Result<Option<OtlpConfig>> {
    if f.otlp_endpoint.is_none()
        && var(&["OTEL_METRICS_EXPORTER"]).is_some_and(|(_, v)| v == "none")
    {
        if f.otlp_spans {
            bail!(
                "--otlp-spans sends with the OTLP export, which OTEL_METRICS_EXPORTER=none turns \
                 off; unset it or pass --otlp-endpoint"
            );
        }
        return Ok(None);
    }
    let Some(metrics) = transport(f, "METRICS", "/v1/metrics")? else {
        if f.otlp_spans {
            bail!(
                "--otlp-spans needs an OTLP endpoint: pass --otlp-endpoint or set \
                 OTEL_EXPORTER_OTLP_ENDPOINT"
            );
        }
        return Ok(None);
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
    let spans = if f.otlp_spans {
        let Some(transport) = transport(f, "TRACES", "/v1/traces")? else {
            bail!(
                "--otlp-spans needs a traces endpoint: set OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or \
                 OTEL_EXPORTER_OTLP_ENDPOINT, or pass --otlp-endpoint"
            );
        };
        let delay = match var(&["OTEL_BSP_SCHEDULE_DELAY"]) {
            Some((n, v)) => millis(&n, &v)?,
            None => Duration::from_secs(5),
        };
        if delay.is_zero() {
            bail!("OTEL_BSP_SCHEDULE_DELAY must be above zero");
        }
        Some(SpansConfig { transport, delay })
    } else {
        None
    };
    Ok(Some(OtlpConfig {
        metrics,
        interval,
        delta,
        spans,
    }))
}

/// One signal's transport: protocol, endpoint (HTTP: with the signal's `path`, unless given
/// for the signal itself), headers, timeout, TLS. None without an endpoint.
fn transport(f: &OtlpFlags, signal: &str, path: &str) -> Result<Option<Transport>> {
    let scoped = |what: &str| format!("OTEL_EXPORTER_OTLP_{signal}_{what}");
    let unscoped = |what: &str| format!("OTEL_EXPORTER_OTLP_{what}");
    let vars = |what: &str| [scoped(what), unscoped(what)];
    let pick = |flag: &Option<String>, name: &str, what: &str| {
        flag.clone().map(|v| (name.to_owned(), v)).or_else(|| {
            let v = vars(what);
            var(&[v[0].as_str(), v[1].as_str()])
        })
    };
    let protocol = match pick(&f.otlp_protocol, "--otlp-protocol", "PROTOCOL") {
        None => Protocol::HttpProtobuf,
        Some((_, v)) if v == "grpc" => Protocol::Grpc,
        Some((_, v)) if v == "http/protobuf" => Protocol::HttpProtobuf,
        Some((name, v)) if v == "http/json" => {
            bail!("{name}={v}: OTLP over HTTP/JSON is not supported; use grpc or http/protobuf")
        }
        Some((name, v)) => bail!("{name}={v:?}: unknown OTLP protocol; use grpc or http/protobuf"),
    };
    // Base endpoints get the signal's path on HTTP; a signal's own endpoint is used as is.
    let with_path = |base: &str| match protocol {
        Protocol::Grpc => base.to_owned(),
        Protocol::HttpProtobuf => format!("{}{path}", base.trim_end_matches('/')),
    };
    let endpoint = if let Some(e) = &f.otlp_endpoint {
        check_endpoint("--otlp-endpoint", e)?;
        with_path(e)
    } else if let Some((n, e)) = var(&[scoped("ENDPOINT").as_str()]) {
        check_endpoint(&n, &e)?;
        e
    } else if let Some((n, e)) = var(&[unscoped("ENDPOINT").as_str()]) {
        check_endpoint(&n, &e)?;
        with_path(&e)
    } else {
        return Ok(None);
    };
    let headers = match pick(&f.otlp_headers, "--otlp-headers", "HEADERS") {
        Some((name, v)) => parse_headers(&v).map_err(|e| anyhow!("{name}: {e}"))?,
        None => Vec::new(),
    };
    let timeout = match f.otlp_timeout {
        Some(t) => t,
        None => {
            let v = vars("TIMEOUT");
            match var(&[v[0].as_str(), v[1].as_str()]) {
                Some((n, v)) => millis(&n, &v)?,
                None => Duration::from_secs(10),
            }
        }
    };
    let tls = tls_files(f, signal)?;
    if tls.is_set() && !endpoint.starts_with("https://") {
        log::info!(
            "note: the OTLP certificate settings are not used: the endpoint \
             {endpoint} is not https://"
        );
    }
    Ok(Some(Transport {
        protocol,
        endpoint,
        headers,
        timeout,
        tls,
    }))
}

/// The TLS files the flags and the environment name, read and checked now.
fn tls_files(f: &OtlpFlags, signal: &str) -> Result<TlsFiles> {
    let file = |flag: &Option<PathBuf>, flag_name: &str, what: &str| {
        let (scoped, unscoped) = (
            format!("OTEL_EXPORTER_OTLP_{signal}_{what}"),
            format!("OTEL_EXPORTER_OTLP_{what}"),
        );
        let (name, path) = match flag {
            Some(p) => (flag_name.to_owned(), p.clone()),
            None => match var(&[scoped.as_str(), unscoped.as_str()]) {
                Some((n, v)) => (n, PathBuf::from(v)),
                None => return Ok(None),
            },
        };
        fs::read(&path)
            .map(|pem| Some((name.clone(), pem)))
            .map_err(|e| anyhow!("{name}: cannot read {}: {e}", path.display()))
    };
    let ca = file(&f.otlp_certificate, "--otlp-certificate", "CERTIFICATE")?;
    let cert = file(
        &f.otlp_client_certificate,
        "--otlp-client-certificate",
        "CLIENT_CERTIFICATE",
    )?;
    let key = file(&f.otlp_client_key, "--otlp-client-key", "CLIENT_KEY")?;
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
    Ok(TlsFiles {
        ca: ca.map(|(_, pem)| pem),
        identity,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each signal takes its own variables first: the metrics' credentials never go to the
    /// traces endpoint. (The only test here that sets these variables.)
    #[test]
    fn endpoints_are_checked_whole() {
        for ok in [
            "http://collector:4318",
            "https://otel.example:443/base",
            "http://[::1]:4318",
            "http://127.0.0.1",
        ] {
            check_endpoint("--otlp-endpoint", ok).unwrap();
        }
        for bad in [
            "http://[::1]:99999",
            "http://[zz]",
            "http://host:port",
            "ftp://collector",
            "collector:4318",
            "http://",
            "http://user:secret@collector:4318",
            "http:// spaced:4318",
        ] {
            let e = check_endpoint("--otlp-endpoint", bad)
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(&format!("--otlp-endpoint {bad:?}")), "{e}");
        }
    }

    #[test]
    fn signals_take_their_own_settings() {
        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "api-key=m"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://tracer:4318/custom/traces",
            ),
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "2500"),
            ("OTEL_BSP_SCHEDULE_DELAY", "300"),
        ];
        for (k, v) in vars {
            // SAFETY: no other test reads or writes these variables.
            unsafe { env::set_var(k, v) };
        }
        let f = OtlpFlags {
            otlp_spans: true,
            ..Default::default()
        };
        let c = resolve(&f);
        let zero = {
            // SAFETY: as above.
            unsafe { env::set_var("OTEL_BSP_SCHEDULE_DELAY", "0") };
            resolve(&f)
        };
        for (k, _) in vars {
            // SAFETY: as above.
            unsafe { env::remove_var(k) };
        }
        let c = c.unwrap().unwrap();
        assert_eq!(c.metrics.endpoint, "http://collector:4318/v1/metrics");
        assert_eq!(c.metrics.headers, vec![("api-key".into(), "m".into())]);
        assert_eq!(c.metrics.timeout, Duration::from_secs(10));
        let s = c.spans.unwrap();
        assert_eq!(s.transport.endpoint, "http://tracer:4318/custom/traces");
        assert!(s.transport.headers.is_empty(), "{:?}", s.transport.headers);
        assert_eq!(s.transport.timeout, Duration::from_millis(2500));
        assert_eq!(s.delay, Duration::from_millis(300));
        assert!(zero.is_err(), "a zero schedule delay is refused");
    }
}
