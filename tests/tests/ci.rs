//! The CI step and trace of an exec, from the environment of its first program: the record
//! and the exported series carry them; nothing else of the environment is kept.

use profiler_tests::*;

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// GitHub Actions' variables, a W3C traceparent, a variable asked for with --ci-env and a
/// secret in a step's environment.
fn step_env() -> Vec<(&'static str, &'static str)> {
    vec![
        ("PATH", "/usr/bin:/bin"),
        ("GITHUB_ACTIONS", "true"),
        ("GITHUB_WORKFLOW", "CI"),
        ("GITHUB_RUN_ID", "4242"),
        ("GITHUB_JOB", "build"),
        ("RUNNER_NAME", "runner-7"),
        ("GITHUB_SERVER_URL", "https://github.example"),
        ("GITHUB_REPOSITORY", "acme/app"),
        ("GITHUB_TOKEN", "ghs_not_for_the_profiler"),
        ("TRACEPARENT", TRACEPARENT),
        ("TRACESTATE", "vendor=abc"),
        ("BUILD_STEP", "compile"),
    ]
}

/// Test 1: the record names the CI step and the trace; the metrics carry them as attributes.
#[test]
fn ci_step_and_trace_come_from_the_first_programs_environment() {
    let cg = TestCgroup::new("ci");
    let p = Attached::start(
        &cg,
        &["--ci-env", "BUILD_STEP", "--prometheus", "127.0.0.1:0"],
    );
    let prom = p.prometheus_addr();
    let e = cg.child("step");
    let id = cgroup_id(&e);
    run_in_env(&e, &["/bin/sleep", "0.3"], &step_env());
    rmdir(&e);
    let rec = p.wait_ended(id, secs(30));
    let ci = &rec["ci"];
    assert_eq!(ci["system"], "github_actions", "{rec}");
    let a = &ci["attributes"];
    assert_eq!(a["cicd.pipeline.name"], "CI");
    assert_eq!(a["cicd.pipeline.run.id"], "4242");
    assert_eq!(a["cicd.pipeline.task.name"], "build");
    assert_eq!(a["cicd.worker.name"], "runner-7");
    assert!(a.get("cicd.worker.id").is_none(), "{rec}");
    assert_eq!(
        a["cicd.pipeline.run.url.full"],
        "https://github.example/acme/app/actions/runs/4242"
    );
    assert_eq!(ci["trace"]["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(ci["trace"]["span_id"], "00f067aa0ba902b7");
    assert_eq!(ci["trace"]["tracestate"], "vendor=abc");
    assert_eq!(ci["env"]["BUILD_STEP"], "compile");
    assert_eq!(rec["command"], "/bin/sleep 0.3");
    let text = rec.to_string();
    assert!(
        !text.contains("ghs_not_for_the_profiler"),
        "a secret in the record: {text}"
    );

    // Steps of a millisecond: the kernel sends the environment when the program starts.
    for i in 0..20 {
        let short = cg.child(&format!("short-{i}"));
        let sid = cgroup_id(&short);
        run_in_env(&short, &["/bin/true"], &step_env());
        rmdir(&short);
        let srec = p.wait_ended(sid, secs(30));
        assert_eq!(
            srec["ci"]["attributes"]["cicd.pipeline.run.id"], "4242",
            "step {i}: {srec}"
        );
        assert_eq!(
            srec["ci"]["trace"]["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736",
            "step {i}: {srec}"
        );
        if i == 0 {
            eprintln!(
                "MEASURED CI context of a {} ns step: {}",
                u(&srec["wall_ns"]),
                srec["ci"]
            );
        }
    }
    // An environment longer than the kernel's record (32 KiB), the step's variables last: read
    // whole from /proc while the program runs.
    let filler = "x".repeat(40 * 1024);
    let mut long_env = vec![("FILLER", filler.as_str())];
    long_env.extend(step_env());
    let long = cg.child("long-env");
    let lid = cgroup_id(&long);
    run_in_env(&long, &["/bin/sleep", "0.3"], &long_env);
    rmdir(&long);
    let lrec = p.wait_ended(lid, secs(30));
    assert_eq!(
        lrec["ci"]["attributes"]["cicd.pipeline.run.id"], "4242",
        "{lrec}"
    );
    assert!(!lrec.to_string().contains("xxxxxxxx"), "{lrec}");

    let (status, body) = backends::http_get(&prom, "/metrics").unwrap();
    assert_eq!(status, 200);
    let line = body
        .lines()
        .find(|l| {
            l.starts_with("container_cpu_time_seconds_total")
                && l.contains(&format!("profiler_exec_cgroup_id=\"{id}\""))
        })
        .unwrap_or_else(|| panic!("no series of exec {id}: {body}"));
    for label in [
        "cicd_pipeline_name=\"CI\"",
        "cicd_pipeline_run_id=\"4242\"",
        "cicd_pipeline_task_name=\"build\"",
        "cicd_worker_name=\"runner-7\"",
        "cicd_pipeline_run_url_full=\"https://github.example/acme/app/actions/runs/4242\"",
        "profiler_exec_env_BUILD_STEP=\"compile\"",
        "profiler_exec_trace_id=\"4bf92f3577b34da6a3ce929d0e0e4736\"",
        "profiler_exec_parent_span_id=\"00f067aa0ba902b7\"",
    ] {
        assert!(line.contains(label), "{label} missing: {line}");
    }
    assert!(!body.contains("ghs_not_for_the_profiler"));
    let (code, _, _) = p.stop();
    assert_eq!(code, 0);
}

/// Test 2: with --otlp-spans, each exec is one span from its start to its end: a child of the
/// trace context its environment carried, else the root of a trace of its own; the figures
/// ride along as attributes. Over HTTP and over gRPC, to a real collector (rotel).
#[test]
fn each_exec_is_one_span_in_its_trace() {
    for grpc in [false, true] {
        let cg = TestCgroup::new(if grpc { "spans-grpc" } else { "spans-http" });
        let rotel = backends::Rotel::start_for_traces();
        let (endpoint, protocol) = if grpc {
            (rotel.grpc_endpoint(), "grpc")
        } else {
            (rotel.http_endpoint(), "http/protobuf")
        };
        let p = Attached::start_with(
            &[
                "--cgroup".into(),
                cg.arg(),
                "--otlp-endpoint".into(),
                endpoint,
                "--otlp-protocol".into(),
                protocol.into(),
                "--otlp-spans".into(),
                "--export-interval".into(),
                "1s".into(),
            ],
            &[("OTEL_BSP_SCHEDULE_DELAY", "200")],
        );
        let (child, root) = (cg.child("traced"), cg.child("untraced"));
        let ids = [cgroup_id(&child), cgroup_id(&root)];
        run_in_env(&child, &["/bin/sleep", "0.2"], &step_env());
        run_in_env(&root, &[&busy(), "100000"], &[]);
        rmdir(&child);
        rmdir(&root);
        let [c, r] = ids.map(|id| p.wait_ended(id, secs(30)));
        let span_of = |rec: &Value| {
            let id = rec["cgroup_id"].to_string();
            rotel.wait_for_span(secs(30), |s| {
                s.attributes.get("profiler.exec.cgroup_id") == Some(&id)
            })
        };
        let s = span_of(&c);
        assert_eq!(s.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736", "{s:?}");
        assert_eq!(s.parent_id, "00f067aa0ba902b7");
        assert_eq!(s.name, "/bin/sleep 0.2");
        assert_eq!(s.kind, "SPAN_KIND_INTERNAL");
        assert_eq!(
            s.start_unix_nano,
            u(&c["start_unix_ns"]),
            "starts with the exec"
        );
        assert_eq!(s.end_unix_nano, u(&c["end_unix_ns"]), "ends with it");
        assert_eq!(s.attributes["cicd.pipeline.run.id"], "4242");
        assert_eq!(s.attributes["profiler.exec.path"], "traced");
        assert!(
            s.attributes
                .values()
                .all(|v| !v.contains("ghs_not_for_the_profiler")),
            "a secret on the span: {s:?}"
        );
        assert_eq!(s.resource["service.name"], "profiler");
        let cpu: f64 = s.attributes["profiler.exec.cpu.time"].parse().unwrap();
        assert_eq!(cpu, f(&c["cpu"]["on_cpu_ns"]) / 1e9, "{s:?}");
        let s = span_of(&r);
        assert_eq!(s.parent_id, "", "no trace context: a root span");
        assert_eq!(s.trace_id.len(), 32);
        assert_ne!(s.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(s.name, format!("{} 100000", busy()));
        // Its record's figure (busy spins 100 ms of wall time: under contention it gets less
        // CPU than that, so the wall time is no bound).
        let cpu: f64 = s.attributes["profiler.exec.cpu.time"].parse().unwrap();
        assert!(cpu > 0.0, "{s:?}");
        assert_eq!(cpu, f(&r["cpu"]["on_cpu_ns"]) / 1e9, "{s:?}");
        let (code, _, _) = p.stop();
        assert_eq!(code, 0);
    }
}
