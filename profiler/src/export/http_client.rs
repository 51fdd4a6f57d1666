//! The OTLP HTTP client, wrapped so that a failed export's warning says why: the exporter
//! alone reports any failed request as "network error". Used by the metrics and the span
//! exporters.

use std::sync::{Arc, Mutex};

use super::lock;

/// The OTLP exporter reports any failed HTTP request as "network error": this client keeps
/// the cause (connection refused, a certificate rejected, a timeout) for the warning.
#[derive(Debug)]
pub(crate) struct HttpWithCause {
    pub(crate) inner: reqwest::blocking::Client,
    pub(crate) cause: Cause,
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
