//! OpenTelemetry export when things go wrong, against real backends: a collector that is away
//! (execs ended meanwhile arrive afterwards), a backlog larger than one collection, SIGTERM's
//! final export, TLS with a private CA and a client certificate, bad settings, and the OTLP/HTTP
//! retries a collector asks for (tests/src/backends/scripted.rs).

use std::{fs, thread, time::Duration};

use profiler_tests::{backends::*, *};

/// Test 3: the collector is down for 20 s while execs come and go; once it is back, every
/// exec that ended meanwhile arrives with its final values, and the profiler warned once.
#[test]
fn execs_ended_during_an_outage_arrive_afterwards() {
    let cg = TestCgroup::new("otlp-outage");
    let scratch = scratch_dir("otlp-outage");
    let of = scratch.join("f");
    let mut rotel = Rotel::start();
    let p = attach_exporting(&cg, &rotel, &["--otlp-timeout", "1s"]);
    rotel.stop();
    let mut ids = Vec::new();
    let start = std::time::Instant::now();
    let mut i = 0;
    while start.elapsed() < Duration::from_secs(20) {
        let e = cg.child(&format!("o{i}"));
        ids.push(cgroup_id(&e));
        direct_write_in(&e, &of, "64k", 4);
        run_born_in(&e, &[&busy(), "5000"]);
        rmdir(&e);
        i += 1;
        thread::sleep(Duration::from_secs(1));
    }
    rotel.restart();
    let recs: Vec<(u64, serde_json::Value)> = ids
        .iter()
        .map(|id| (*id, p.wait_ended(*id, secs(30))))
        .collect();
    let want: Vec<(u64, f64)> = recs
        .iter()
        .map(|(id, rec)| (*id, u(&rec["cpu"]["on_cpu_ns"]) as f64 / 1e9))
        .collect();
    wait_all(&rotel, "container.cpu.time", &want);
    // The latency histogram is a delta, collected once: after each failed export it is
    // recorded again, so that exactly one delivered collection carries it. Rotel prints a
    // batch over time: wait until every exec's counts are in, then, one more export later,
    // check that none arrived twice.
    let delivered = |points: &[Point], id: u64| -> u64 {
        let idv = id.to_string();
        points
            .iter()
            .filter(|p| {
                p.metric == "profiler.exec.disk.latency"
                    && p.attr("profiler.exec.cgroup_id") == Some(idv.as_str())
                    && p.attr("disk.io.direction") == Some("write")
            })
            .map(|p| p.count.unwrap_or(0))
            .sum()
    };
    let deadline = std::time::Instant::now() + secs(30);
    loop {
        let points = rotel.points();
        let short: Vec<u64> = recs
            .iter()
            .filter(|(id, rec)| delivered(&points, *id) < latency_samples(rec, "write"))
            .map(|(id, _)| *id)
            .collect();
        if short.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "latency histograms of execs {short:?} never arrived whole"
        );
        thread::sleep(Duration::from_millis(500));
    }
    thread::sleep(secs(2));
    let points = rotel.points();
    let mut total = 0;
    for (id, rec) in &recs {
        total += latency_samples(rec, "write");
        assert_eq!(
            delivered(&points, *id),
            latency_samples(rec, "write"),
            "exec {id}: histogram counts delivered vs the record's; record {}",
            rec["disk"]
        );
    }
    // 4 requests per exec; the kernel skips a completion now and then (docs/figures.md, "Skipped BPF runs").
    assert!(
        total >= 4 * recs.len() as u64 - 2,
        "{total} latency samples in {} execs",
        recs.len()
    );
    let (code, _, stderr) = p.stop();
    assert_eq!(code, 0, "{stderr:?}");
    let warnings = stderr
        .iter()
        .filter(|l| l.contains("OTLP export") && l.contains("failed"))
        .count();
    assert_eq!(warnings, 1, "one warning per failure streak: {stderr:?}");
    assert!(
        stderr.iter().any(|l| l.contains("works again")),
        "{stderr:?}"
    );
    eprintln!(
        "MEASURED otlp outage: {} execs ended during 20 s without a collector, all delivered, \
         each latency histogram exactly once",
        ids.len()
    );
    let _ = fs::remove_dir_all(&scratch);
}

/// On SIGTERM the profiler makes a last export: an exec that ended long before the next
/// interval still arrives, and the profiler exits 0.
#[test]
fn sigterm_makes_a_final_export() {
    let cg = TestCgroup::new("otlp-term");
    let rotel = Rotel::start();
    let p = Attached::start(
        &cg,
        &[
            "--otlp-endpoint",
            &rotel.http_endpoint(),
            "--export-interval",
            "10m",
        ],
    );
    let e = cg.child("last");
    let id = cgroup_id(&e);
    run_born_in(&e, &[&busy(), "20000"]);
    rmdir(&e);
    let rec = p.wait_ended(id, secs(30));
    let (code, _, stderr) = p.stop_with(libc::SIGTERM);
    assert_eq!(code, 0, "{stderr:?}");
    let cpu_s = u(&rec["cpu"]["on_cpu_ns"]) as f64 / 1e9;
    wait_all(&rotel, "container.cpu.time", &[(id, cpu_s)]);
}

/// Test 3b: 1100 execs end while the collector is down, more series than the OpenTelemetry
/// SDK keeps per metric by default (2000; container.cpu.time has two per exec). Two profilers
/// watch them, each with its own collector: once the collectors are back, the first delivers
/// the backlog over its next exports, the second is stopped at once and delivers it in its
/// last ones. Every exec arrives at both with its own final values, none folded into the
/// SDK's overflow series.
#[test]
fn a_backlog_larger_than_one_collection_arrives_whole() {
    let cg = TestCgroup::new("otlp-backlog");
    let mut rotels = [Rotel::start(), Rotel::start()];
    let periodic = attach_exporting(&cg, &rotels[0], &["--otlp-timeout", "1s"]);
    let stopped = attach_exporting(&cg, &rotels[1], &["--otlp-timeout", "5s"]);
    rotels.iter_mut().for_each(Rotel::stop);
    let ids: Vec<u64> = (0..1100)
        .map(|i| {
            let e = cg.child(&format!("b{i}"));
            let id = cgroup_id(&e);
            run_born_in(&e, &["true"]);
            rmdir(&e);
            id
        })
        .collect();
    let cpu_s = |rec: &serde_json::Value| u(&rec["cpu"]["on_cpu_ns"]) as f64 / 1e9;
    let want: Vec<(u64, f64)> = ids
        .iter()
        .map(|id| (*id, cpu_s(&periodic.wait_ended(*id, secs(30)))))
        .collect();
    stopped.wait_ended(*ids.last().unwrap(), secs(30));
    rotels.iter_mut().for_each(Rotel::restart);
    let (code, recs, stderr) = stopped.stop();
    assert_eq!(code, 0, "{stderr:?}");
    let want_stopped: Vec<(u64, f64)> = recs
        .iter()
        .filter_map(|r| Some((r["cgroup_id"].as_u64()?, cpu_s(r))))
        .filter(|(id, _)| ids.contains(id))
        .collect();
    assert_eq!(want_stopped.len(), ids.len());
    wait_all(&rotels[1], "container.cpu.time", &want_stopped);
    wait_all(&rotels[0], "container.cpu.time", &want);
    for rotel in &rotels {
        let overflow = rotel
            .points()
            .iter()
            .filter(|p| p.attr("otel.metric.overflow").is_some())
            .count();
        assert_eq!(overflow, 0, "points in the SDK's overflow series");
    }
    let (code, _, stderr) = periodic.stop();
    assert_eq!(code, 0, "{stderr:?}");
    eprintln!(
        "MEASURED otlp backlog: {} execs ended without a collector; each arrived with its own \
         container.cpu.time over the next exports and, from a profiler stopped at once, in its \
         last ones; no overflow series",
        ids.len()
    );
}

/// https with a private CA and mutual TLS, over gRPC and HTTP: socat terminates TLS in front
/// of rotel and accepts only clients with a certificate of that CA. The values arrive as in the
/// JSON record. Without the CA the export fails with a certificate warning and nothing arrives.
#[test]
fn otlp_over_tls_with_a_private_ca_and_client_certificate() {
    let pki = Pki::new("otlp");
    let rotel = Rotel::start();
    let (grpc_port, http_port) = rotel.ports();
    let scratch = scratch_dir("otlp-tls");
    for (proto, port, trusted) in [
        ("grpc", grpc_port, true),
        ("http/protobuf", http_port, true),
        ("grpc", grpc_port, false),
        ("http/protobuf", http_port, false),
    ] {
        let proxy = TlsProxy::start(&pki, port);
        let cg = TestCgroup::new(&format!(
            "otlp-tls-{}-{}",
            if proto == "grpc" { "grpc" } else { "http" },
            if trusted { "ca" } else { "noca" }
        ));
        let ca = pki.file("ca.pem");
        let mut args = vec![
            "--otlp-endpoint".to_owned(),
            proxy.endpoint(),
            "--otlp-protocol".into(),
            proto.into(),
            "--export-interval".into(),
            "1s".into(),
            "--otlp-client-certificate".into(),
            pki.file("client.pem"),
            "--otlp-client-key".into(),
            pki.file("client.key"),
        ];
        if trusted {
            args.extend(["--otlp-certificate".into(), ca]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let p = Attached::start(&cg, &args);
        let e = cg.child("job");
        let id = cgroup_id(&e);
        let out = scratch.join("f");
        direct_write_in(&e, &out, "1M", 4);
        rmdir(&e);
        let rec = p.wait_ended(id, secs(30));
        let wb = u(&rec["disk"]["write_bytes"]);
        if trusted {
            wait_point(
                &rotel,
                "container.disk.io",
                id,
                &[("disk.io.direction", "write")],
                wb as f64,
            );
            let (code, _, stderr) = p.stop();
            assert_eq!(code, 0, "{stderr:?}");
            assert!(
                !stderr.iter().any(|l| l.contains("failed")),
                "{proto} over TLS: {stderr:?}"
            );
            eprintln!("MEASURED {proto} over mutual TLS: exec's {wb} B written arrived");
        } else {
            // A few intervals: each export fails the server's certificate.
            thread::sleep(secs(3));
            let (_, _, stderr) = p.stop();
            let idv = id.to_string();
            assert!(
                !rotel
                    .points()
                    .iter()
                    .any(|p| p.attr("profiler.exec.cgroup_id") == Some(idv.as_str())),
                "{proto}: delivered without trusting the CA"
            );
            let warning = stderr
                .iter()
                .find(|l| l.contains("OTLP export to") && l.contains("failed"))
                .unwrap_or_else(|| panic!("{proto}: no warning: {stderr:?}"));
            assert!(
                warning.to_lowercase().contains("certificate"),
                "{proto}: the warning names the certificate: {warning}"
            );
            eprintln!("MEASURED {proto} without the CA: {warning}");
        }
    }
    let _ = fs::remove_dir_all(&scratch);
}

/// Test 5: bad export settings fail before attaching, with one line.
#[test]
fn bad_export_settings_fail_before_attaching() {
    let cg = TestCgroup::new("otlp-bad");
    for (args, env, want) in [
        (
            vec!["--otlp-endpoint", "ftp://x:1"],
            None,
            "must start with http:// or https://",
        ),
        (
            vec![
                "--otlp-endpoint",
                "http://127.0.0.1:4317",
                "--otlp-headers",
                "novalue",
            ],
            None,
            "has no '='",
        ),
        (
            vec![
                "--otlp-endpoint",
                "http://127.0.0.1:4317",
                "--otlp-protocol",
                "thrift",
            ],
            None,
            "unknown OTLP protocol",
        ),
        (
            vec![],
            Some(("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4317")),
            "must start with http",
        ),
        (
            vec![],
            Some(("OTEL_EXPORTER_OTLP_PROTOCOL", "udp")),
            "unknown OTLP protocol",
        ),
        (
            vec![
                "--otlp-endpoint",
                "https://127.0.0.1:4318",
                "--otlp-certificate",
                "/nonexistent/ca.pem",
            ],
            None,
            "--otlp-certificate: cannot read /nonexistent/ca.pem",
        ),
        (
            vec![
                "--otlp-endpoint",
                "https://127.0.0.1:4318",
                "--otlp-certificate",
                "/proc/version",
            ],
            None,
            "no PEM certificate",
        ),
        (
            vec![],
            Some(("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "/proc/version")),
            "without its pair",
        ),
    ] {
        let mut c = std::process::Command::new(profiler_bin());
        c.args(["attach", "--cgroup", &cg.arg()]).args(&args);
        c.env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
        if let Some((k, v)) = env {
            c.env(k, v);
            if k != "OTEL_EXPORTER_OTLP_ENDPOINT" {
                c.env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
            }
        }
        let out = c.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.contains(want) && !err.contains("attached"),
            "{args:?}: {err}"
        );
    }
}

/// Test: over OTLP/HTTP, an export the collector answers with 503 and Retry-After is sent
/// again, the same bytes, no sooner than it said; one answered 429 is sent again after the
/// back-off (100 ms or more); one answered 400 is not sent again (its figures go in the next
/// interval's export) and the profiler warns; all against a collector front that answers from
/// a script.
#[test]
fn otlp_http_retries_only_what_the_collector_says_may_succeed() {
    for (name, answer) in [
        ("503", backends::Answer::retry_after(503, 1)),
        ("429", backends::Answer::status(429)),
        ("400", backends::Answer::status(400)),
    ] {
        let cg = TestCgroup::new(&format!("retry-{name}"));
        let collector = backends::ScriptedCollector::start(vec![answer]);
        let endpoint = collector.endpoint();
        let p = Attached::start(
            &cg,
            &[
                "--otlp-endpoint",
                &endpoint,
                "--otlp-protocol",
                "http/protobuf",
                "--export-interval",
                "2s",
            ],
        );
        let e = cg.child("job");
        let mut hog = spawn_in(&e, &[&busy(), "600000000"]);
        let deadline = std::time::Instant::now() + secs(30);
        while collector.received().len() < 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "{name}: no second request"
            );
            thread::sleep(Duration::from_millis(50));
        }
        hog.kill().unwrap();
        hog.wait().unwrap();
        let (_, _, err) = p.stop();
        let r = collector.received();
        assert!(r.iter().all(|q| q.path == "/v1/metrics"), "{name}: {r:?}");
        let gap = r[1].at - r[0].at;
        eprintln!("MEASURED OTLP/HTTP {name}: the next request {gap:?} after the first");
        match name {
            "503" => {
                assert!(r[1].body == r[0].body, "{name}: the same export sent again");
                assert!(
                    gap >= Duration::from_secs(1),
                    "{name}: Retry-After 1 s, {gap:?}"
                );
            }
            "429" => {
                assert!(r[1].body == r[0].body, "{name}: the same export sent again");
                assert!(
                    gap >= Duration::from_millis(100) && gap < Duration::from_millis(1900),
                    "{name}: a back-off of 100 ms or more, before the next interval: {gap:?}"
                );
            }
            _ => {
                assert!(
                    r[1].body != r[0].body,
                    "{name}: not sent again: the next export"
                );
                assert!(
                    gap >= Duration::from_millis(1500),
                    "{name}: the next interval, {gap:?}"
                );
                assert!(
                    err.iter()
                        .any(|l| l.contains("warning") && l.contains("400")),
                    "{name}: the failure is said: {err:?}"
                );
            }
        }
    }
}
