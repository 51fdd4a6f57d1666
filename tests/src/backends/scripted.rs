//! A collector's HTTP front that answers from a script: the OTLP/HTTP exporter's retries are
//! tested against the answers that make it retry (429, 503 with Retry-After) and the one that
//! must not (400). It speaks plain HTTP/1.1 on a loopback port it binds itself; after the
//! script, it answers 200 with an empty body (an empty ExportMetricsServiceResponse, full
//! success).

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{TcpListener, TcpStream},
    sync::{Arc, Mutex},
    thread,
    time::Instant,
};

/// One answer: status and extra header lines.
#[derive(Clone, Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<String>,
}

impl Answer {
    pub fn status(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
        }
    }

    pub fn retry_after(status: u16, secs: u32) -> Self {
        Self {
            status,
            headers: vec![format!("Retry-After: {secs}")],
        }
    }
}

/// A request as it arrived: when, its path, its body, and the status it got.
#[derive(Clone, Debug)]
pub struct Received {
    pub at: Instant,
    pub path: String,
    pub body: Vec<u8>,
    pub status: u16,
}

pub struct ScriptedCollector {
    pub port: u16,
    received: Arc<Mutex<Vec<Received>>>,
}

impl ScriptedCollector {
    /// Serve `script`, one answer per request in order, then 200s.
    pub fn start(script: Vec<Answer>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(script.into_iter()));
        let r = received.clone();
        thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (r, script) = (r.clone(), script.clone());
                thread::spawn(move || serve(conn, &r, &script));
            }
        });
        Self { port, received }
    }

    /// The OTLP/HTTP endpoint (base URL; the exporter adds /v1/metrics).
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

type Script = Mutex<std::vec::IntoIter<Answer>>;

/// Requests of one connection (the exporter keeps it alive), until it closes.
fn serve(conn: TcpStream, received: &Mutex<Vec<Received>>, script: &Script) {
    let mut out = conn.try_clone().unwrap();
    let mut rd = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if rd.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        let mut len = 0usize;
        loop {
            let mut h = String::new();
            if rd.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                len = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; len];
        if rd.read_exact(&mut body).is_err() {
            return;
        }
        let answer = script
            .lock()
            .unwrap()
            .next()
            .unwrap_or_else(|| Answer::status(200));
        received.lock().unwrap().push(Received {
            at: Instant::now(),
            path,
            body,
            status: answer.status,
        });
        let mut resp = format!(
            "HTTP/1.1 {} Scripted\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n",
            answer.status
        );
        for h in &answer.headers {
            resp.push_str(h);
            resp.push_str("\r\n");
        }
        resp.push_str("\r\n");
        if out.write_all(resp.as_bytes()).is_err() {
            return;
        }
    }
}
