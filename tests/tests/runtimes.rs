//! Real container runtimes as the execs under test: dockerd's containers and its BuildKit's
//! RUN steps, podman, containerd (ctr), runc and crun. Each test starts its own daemon (state under
//! target/ and /run), imports an image made from a local root filesystem (no registry), and
//! runs containers with networking off (own namespace, loopback only). Ground truth: the
//! sizes the workloads write with O_DIRECT, the CPU time of each container's cgroup as the
//! kernel's cgroup accounting shows it from inside at the workload's end (`cpustat`), the
//! parent cgroup's cpu.stat over a whole build, the number of processes a step ran, and the
//! bytes `netpeer` moved.

use std::fs;

use profiler_tests::{runtimes::*, *};

const MIB: u64 = 1 << 20;

/// A container's phases: the runtime's setup, the command's run, the teardown, which sum to
/// its wall time; the command ran at least `min_run_ns` (what it spun for, by its own clock).
/// (The main process's CPU time is no bound: before its execve it was the runtime's init.)
fn check_phases(what: &str, rec: &Value, min_run_ns: u64) {
    let ph = &rec["phases"];
    let part = |k: &str| {
        ph[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{what}: no phases.{k}: {rec}"))
    };
    let (setup, run, teardown) = (part("setup_ns"), part("run_ns"), part("teardown_ns"));
    assert_eq!(setup + run + teardown, u(&rec["wall_ns"]), "{what}: {rec}");
    assert!(setup > 0 && run > 0 && run >= min_run_ns, "{what}: {ph}");
    eprintln!("MEASURED {what} phases: setup {setup} ns, run {run} ns, teardown {teardown} ns");
}

/// A container workload: spin, write 16 MiB with O_DIRECT, print the cgroup's CPU time.
const WORK: &str = "busy 300000 && dd if=/dev/zero of=/io bs=1M count=16 oflag=direct status=none && rm /io && cpustat";

/// Test 1: docker containers are execs of `--runtime docker`, named from the Engine API,
/// with exact bytes and CPU; a container that lives a few milliseconds is named too; a cgroup
/// that docker does not know is still reported, with a note; the names reach the exported
/// metrics.
#[test]
fn docker_containers_are_execs_named_by_docker() {
    let d = Dockerd::start();
    d.docker_ok(&["import", base_image_tar().to_str().unwrap(), "pbase:1"]);
    let p = Attached::start_with(
        &[
            "--runtime".into(),
            "docker".into(),
            "--runtime-endpoint".into(),
            d.socket.display().to_string(),
            "--prometheus".into(),
            "127.0.0.1:0".into(),
        ],
        &[],
    );
    let prom = p.prometheus_addr();
    let pid = std::process::id();
    let name = format!("pt-work-{pid}");
    let out = d.docker_ok(&[
        "run",
        "--name",
        &name,
        "--network",
        "none",
        "pbase:1",
        "sh",
        "-c",
        WORK,
    ]);
    let truth = cpu_ns_lines(&out)[0];
    let id = d.docker_ok(&["inspect", "-f", "{{.Id}}", &name]);
    let id = id.trim();
    let rec = p.wait_ended_where(&name, secs(30), |r| container(r, "name") == Some(&name));
    assert_eq!(rec["exec"], id, "the exec is the container's cgroup: {rec}");
    assert_eq!(container(&rec, "runtime"), Some("docker"));
    assert_eq!(container(&rec, "id"), Some(id));
    assert_eq!(container(&rec, "image"), Some("pbase:1"));
    assert_eq!(
        container(&rec, "command"),
        Some(format!("sh -c {WORK}").as_str())
    );
    assert_eq!(rec["command"], format!("sh -c {WORK}"), "first program");
    assert_eq!(rec["network"]["namespace"], "own", "{}", rec["network"]);
    check_written("docker container", &rec, 16 * MIB);
    check_cpu("docker container", &rec, truth);
    check_phases("docker container", &rec, 300_000_000);

    // A container of a few milliseconds, removed at once: named all the same.
    let short = format!("pt-short-{pid}");
    d.docker_ok(&[
        "run",
        "--rm",
        "--name",
        &short,
        "--network",
        "none",
        "pbase:1",
        "true",
    ]);
    let rec = p.wait_ended_where(&short, secs(30), |r| container(r, "name") == Some(&short));
    assert_eq!(container(&rec, "command"), Some("true"));
    assert!(u(&rec["cpu"]["on_cpu_ns"]) > 0, "{rec}");
    assert_eq!(rec["exit"]["code"], 0, "{rec}");
    check_phases("docker short container", &rec, 0);

    // A failing container: its outcome is its process 1's, as docker reports it.
    let failing = format!("pt-fail-{pid}");
    let out = d.docker(&[
        "run",
        "--rm",
        "--name",
        &failing,
        "--network",
        "none",
        "pbase:1",
        "sh",
        "-c",
        "exit 7",
    ]);
    assert_eq!(out.status.code(), Some(7), "docker's own exit status");
    let rec = p.wait_ended_where(&failing, secs(30), |r| {
        container(r, "name") == Some(&failing)
    });
    assert_eq!(rec["exit"]["code"], 7, "{rec}");
    let pid1 = u(&rec["exit"]["pid"]);
    let sh = rec["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| u(&q["pid"]) == pid1)
        .unwrap_or_else(|| panic!("the main process is listed: {rec}"));
    assert_eq!(sh["args"], "sh -c exit 7", "{rec}");

    // A build's RUN steps are execs of `--runtime docker` too (dockerd's BuildKit puts them
    // in docker/buildkit/, which the profiler watches as a nest of execs), named as BuildKit's.
    let step = "busy 2000 && echo built";
    let cmd = d.build_step(step);
    let rec = p.wait_ended_where(step, secs(60), |r| container(r, "command") == Some(&cmd));
    assert_eq!(container(&rec, "runtime"), Some("buildkit"), "{rec}");
    let path = rec["exec"].as_str().unwrap();
    assert!(path.starts_with("buildkit/"), "the step's own exec: {rec}");
    assert!(u(&rec["cpu"]["on_cpu_ns"]) >= 2_000_000, "{rec}");
    assert_eq!(rec["exit"]["code"], 0, "{rec}");

    // A cgroup that looks like a container but that docker does not know.
    let ghost = v2_mount().join("docker").join("0".repeat(64));
    fs::create_dir(&ghost).unwrap();
    let _cleanup = Removed(ghost.clone());
    let gid = cgroup_id(&ghost);
    run_in(&ghost, &["sleep", "0.05"]);
    rmdir(&ghost);
    let rec = p.wait_ended(gid, secs(30));
    assert!(rec.get("container").is_none(), "{rec}");
    assert!(
        rec["notes"].as_array().unwrap().iter().any(|n| n
            .as_str()
            .unwrap()
            .contains("container metadata unavailable: docker")),
        "{rec}"
    );
    assert!(u(&rec["cpu"]["on_cpu_ns"]) > 0, "{rec}");

    // The exported series carry the names (Prometheus text: dots become underscores).
    let (status, body) = backends::http_get(&prom, "/metrics").unwrap();
    assert_eq!(status, 200);
    let line = body
        .lines()
        .find(|l| l.starts_with("container_cpu_time_seconds_total") && l.contains(&name))
        .unwrap_or_else(|| panic!("no series of {name}: {body}"));
    for label in [
        format!("container_name=\"{name}\""),
        "container_image_name=\"pbase:1\"".to_owned(),
        "container_runtime_name=\"docker\"".to_owned(),
        format!("container_id=\"{id}\""),
        "process_command_line=\"sh -c busy 300000".to_owned(),
    ] {
        assert!(line.contains(&label), "{label} missing: {line}");
    }
    let exits = body
        .lines()
        .find(|l| l.starts_with("profiler_exec_exits_total") && l.contains(&failing))
        .unwrap_or_else(|| panic!("no exits series of {failing}: {body}"));
    assert!(
        exits.contains("process_exit_code=\"7\"") && exits.ends_with(" 1"),
        "{exits}"
    );
    let (code, _, _) = p.stop();
    assert_eq!(code, 0);
}

/// The text printed for each step of a `--progress plain` build: step number -> (its header,
/// its output lines).
fn steps_of(build: &str) -> Vec<(String, String)> {
    let mut headers: Vec<(String, String)> = Vec::new();
    for line in build.lines() {
        let Some((num, rest)) = line.split_once(' ') else {
            continue;
        };
        if !num.starts_with('#') {
            continue;
        }
        if rest.starts_with('[') {
            headers.push((num.to_owned(), rest.to_owned()));
        }
    }
    headers
        .into_iter()
        .map(|(num, header)| {
            let out: String = build
                .lines()
                .filter(|l| l.starts_with(&format!("{num} ")))
                .map(|l| format!("{l}\n"))
                .collect();
            (header, out)
        })
        .collect()
}

/// Test 2: each RUN step of a `docker build` is an exec of `--runtime buildkit`, in its own
/// network namespace, named by its command, with exact figures: 32 MiB of direct writes, a
/// CPU-bound step against its cgroup's CPU time, a 2 ms step, 50 short processes, a loopback
/// transfer; all steps together against the BuildKit parent's cpu.stat; one exec per step.
#[test]
fn buildkit_steps_are_execs_with_exact_figures() {
    let d = Dockerd::start();
    d.docker_ok(&["import", base_image_tar().to_str().unwrap(), "pbase:1"]);
    let host = d.host();
    // DOCKER_HOST, as a user's shell would have it.
    let p = Attached::start_with(
        &["--runtime".into(), "buildkit".into()],
        &[("DOCKER_HOST", &host)],
    );
    let parent = v2_mount().join("docker/buildkit");
    let usage0 = cpu_usage_usec(&parent);
    let ctx = Scratch::new("build");
    let ctx = &ctx.0;
    let steps = [
        "dd if=/dev/zero of=/io bs=1M count=32 oflag=direct status=none && rm /io && cpustat",
        "busy 400000 && cpustat",
        "busy 2000 && cpustat",
        "for i in $(seq 50); do /bin/true; done",
        "netpeer serve 127.0.0.1:7000 > /tmp/ready & until grep -q ready /tmp/ready; do sleep 0.01; done; netpeer send 127.0.0.1:7000 4194304 1048576 && cat /tmp/ready",
    ];
    let mut dockerfile = String::from("FROM pbase:1\n");
    for s in steps {
        dockerfile.push_str(&format!("RUN {s}\n"));
    }
    fs::write(ctx.join("Dockerfile"), &dockerfile).unwrap();
    let build = d.docker_ok(&[
        "build",
        "--network",
        "none",
        "--no-cache",
        "--progress",
        "plain",
        "-t",
        "pt-build:1",
        ctx.to_str().unwrap(),
    ]);
    let printed = steps_of(&build);
    let output_of = |step: &str| -> String {
        printed
            .iter()
            .find(|(h, _)| h.contains(&format!("RUN {step}")))
            .map(|(_, o)| o.clone())
            .unwrap_or_else(|| panic!("no output of step {step:?} in {build}"))
    };
    let mut recs = Vec::new();
    for s in steps {
        let cmd = format!("/bin/sh -c {s}");
        let rec = p.wait_ended_where(s, secs(60), |r| container(r, "command") == Some(&cmd));
        assert_eq!(container(&rec, "runtime"), Some("buildkit"));
        let path = rec["exec"].as_str().unwrap();
        assert_eq!(container(&rec, "id"), Some(path), "{rec}");
        assert_eq!(rec["command"], cmd, "first program: {rec}");
        assert_eq!(rec["network"]["namespace"], "own", "{}", rec["network"]);
        recs.push(rec);
    }
    let [io, cpu, short, procs, net] = &recs[..] else {
        unreachable!()
    };
    check_written("buildkit IO step", io, 32 * MIB);
    check_cpu(
        "buildkit IO step",
        io,
        cpu_ns_lines(&output_of(steps[0]))[0],
    );
    check_cpu(
        "buildkit CPU step",
        cpu,
        cpu_ns_lines(&output_of(steps[1]))[0],
    );
    check_phases("buildkit 2 ms step", short, 2_000_000);
    // A step of 2 ms: its spin, at least, and its cgroup's CPU time.
    assert!(u(&short["cpu"]["on_cpu_ns"]) >= 2_000_000, "{short}");
    check_cpu(
        "buildkit 2 ms step",
        short,
        cpu_ns_lines(&output_of(steps[2]))[0],
    );
    let trues = procs["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["comm"] == "true")
        .count();
    assert_eq!(trues, 50, "the step ran /bin/true 50 times: {procs}");
    assert!(u(&procs["tasks"]["processes_started"]) >= 50, "{procs}");
    // Both ends in one exec: what both sockets sent and received against their TCP_INFO
    // (payload with retransmissions, plus headers; see Tcp: a loaded host may retransmit on
    // loopback too). The server's FIN and the last ACKs follow the counts.
    let sides: Vec<Tcp> = output_of(steps[4])
        .lines()
        .filter(|l| l.contains("bytes_sent="))
        .map(tcp_info)
        .collect();
    let [a, b] = sides[..] else {
        panic!("client's and server's TCP_INFO: {sides:?}")
    };
    let sum = |f: fn(&Tcp) -> std::ops::RangeInclusive<u64>| {
        let (x, y) = (f(&a), f(&b));
        x.start() + y.start()..=x.end() + y.end()
    };
    let (sent, received) = (sum(|t| t.tx(2)), sum(|t| t.rx(0, 2)));
    let retrans = a.bytes_retrans + b.bytes_retrans;
    let received = *received.start()..=received.end() + retrans;
    assert!(*sent.start() >= 5 * MIB, "{sides:?}");
    let sock = &net["network"]["sockets"];
    let (tx, rx) = (u(&sock["tx_bytes"]), u(&sock["rx_bytes"]));
    report(
        "buildkit loopback step sockets tx_bytes vs TCP_INFO",
        tx as f64,
        *sent.start() as f64,
    );
    report(
        "buildkit loopback step sockets rx_bytes vs TCP_INFO",
        rx as f64,
        *received.start() as f64,
    );
    assert!(
        sent.contains(&tx),
        "tx {tx} not in {sent:?}: {sides:?} {sock}"
    );
    assert!(
        received.contains(&rx),
        "rx {rx} not in {received:?}: {sides:?} {sock}"
    );
    for k in ["tx_bytes", "rx_bytes"] {
        assert_eq!(sock[k], sock["loopback"][k], "all over loopback: {sock}");
    }
    // All steps against their parent's accounting, read after every step's record.
    let usage1 = cpu_usage_usec(&parent);
    let total: u64 = recs.iter().map(|r| u(&r["cpu"]["on_cpu_ns"])).sum();
    let parent_ns = (usage1 - usage0) * 1000;
    let e = report(
        "buildkit steps' on-CPU vs the parent's cpu.stat",
        total as f64,
        parent_ns as f64,
    );
    assert!(
        e <= 0.01 || total.abs_diff(parent_ns) <= 2_000_000 * recs.len() as u64,
        "steps {total} ns vs parent {parent_ns} ns"
    );
    // A failing step: its record says how it ended, as the build reports it.
    let failing = "echo failing-step && exit 3";
    fs::write(
        ctx.join("Dockerfile"),
        format!("FROM pbase:1\nRUN {failing}\n"),
    )
    .unwrap();
    let out = d.docker(&[
        "build",
        "--network",
        "none",
        "--no-cache",
        "--progress",
        "plain",
        ctx.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && text.contains("exit code: 3"),
        "the build reports the step's exit code 3: {text}"
    );
    let cmd = format!("/bin/sh -c {failing}");
    let rec = p.wait_ended_where(failing, secs(60), |r| container(r, "command") == Some(&cmd));
    assert_eq!(rec["exit"]["code"], 3, "{rec}");
    let (code, all, _) = p.stop();
    assert_eq!(code, 0);
    // Each step once, and nothing else: one exec per RUN.
    let mut ended: Vec<&str> = all
        .iter()
        .filter(|r| r["state"] == "ended" && container(r, "runtime") == Some("buildkit"))
        .filter_map(|r| r["exec"].as_str())
        .collect();
    // Not deduplicated: a step reported twice is a failure.
    ended.sort_unstable();
    assert_eq!(
        ended.len(),
        steps.len() + 1,
        "one exec per RUN step, the failing one included: {ended:?}"
    );
}

/// Test 3: podman containers are execs of `--runtime podman`, named from its storage.
#[test]
fn podman_containers_are_execs_named_by_podman() {
    let pm = Podman::new();
    pm.ok(&[
        "import",
        base_image_tar().to_str().unwrap(),
        "localhost/pbase:1",
    ]);
    let p = Attached::start_with(
        &[
            "--runtime".into(),
            "podman".into(),
            "--runtime-root".into(),
            pm.root.display().to_string(),
        ],
        &[],
    );
    let name = format!("pt-pod-{}", std::process::id());
    // podman's default nofile and nproc limits exceed this host's hard limits.
    let out = pm.ok(&[
        "run",
        "--rm",
        "--name",
        &name,
        "--network",
        "none",
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=4096:4096",
        "localhost/pbase:1",
        "sh",
        "-c",
        WORK,
    ]);
    let rec = p.wait_ended_where(&name, secs(30), |r| container(r, "name") == Some(&name));
    assert_eq!(container(&rec, "runtime"), Some("podman"));
    assert_eq!(container(&rec, "image"), Some("localhost/pbase:1"));
    assert_eq!(
        container(&rec, "command"),
        Some(format!("sh -c {WORK}").as_str())
    );
    let id = container(&rec, "id").unwrap();
    assert_eq!(rec["exec"], format!("libpod-{id}"), "{rec}");
    assert_eq!(rec["command"], format!("sh -c {WORK}"));
    assert_eq!(rec["network"]["namespace"], "own", "{}", rec["network"]);
    check_written("podman container", &rec, 16 * MIB);
    check_cpu("podman container", &rec, cpu_ns_lines(&out)[0]);
    check_phases("podman container", &rec, 300_000_000);
    assert_eq!(rec["exit"]["code"], 0, "{rec}");
    let (code, _, _) = p.stop();
    assert_eq!(code, 0);
}

/// Test 4: containerd's containers (ctr) are execs of `--runtime containerd`, named from their
/// bundles; plain runc containers in a watched cgroup are named from runc's state.
#[test]
fn containerd_and_runc_containers_are_named_from_their_bundles() {
    let c = Containerd::start();
    let rootfs = Scratch::new("rootfs");
    let rootfs = &rootfs.0;
    sh(&[
        "tar",
        "-C",
        rootfs.to_str().unwrap(),
        "-xf",
        base_image_tar().to_str().unwrap(),
    ]);
    let p = Attached::start_with(
        &[
            "--runtime".into(),
            "containerd".into(),
            "--runtime-endpoint".into(),
            c.socket.display().to_string(),
            "--runtime-root".into(),
            c.state.display().to_string(),
        ],
        &[("CONTAINERD_NAMESPACE", &c.namespace)],
    );
    let id = format!("pt-ctr-{}", std::process::id());
    // ctr's containers see no cgroup filesystem: the truth is their parent's cpu.stat, which
    // holds this container alone.
    let parent = v2_mount().join(&c.namespace);
    let usage0 = cpu_usage_usec(&parent);
    let work = "busy 200000";
    // No image config: the environment is the spec's default, without PATH.
    let mut run = vec!["run", "--env", "PATH=/bin", "--rootfs"];
    run.extend(no_pivot());
    run.extend([rootfs.to_str().unwrap(), &id, "/bin/sh", "-c", work]);
    c.ctr(&run);
    let rec = p.wait_ended_where(&id, secs(30), |r| container(r, "id") == Some(&id));
    assert_eq!(container(&rec, "runtime"), Some("containerd"));
    assert_eq!(
        container(&rec, "command"),
        Some(format!("/bin/sh -c {work}").as_str())
    );
    assert_eq!(rec["exec"], id.as_str());
    assert_eq!(rec["network"]["namespace"], "own", "{}", rec["network"]);
    check_cpu(
        "containerd container",
        &rec,
        (cpu_usage_usec(&parent) - usage0) * 1000,
    );
    check_phases("containerd container", &rec, 200_000_000);
    assert_eq!(rec["exit"]["code"], 0, "{rec}");
    let (code, _, _) = p.stop();
    assert_eq!(code, 0);

    // runc alone, in a cgroup of the test's: the exec's metadata is found without --runtime.
    oci_container_alone("runc");
}

/// A container of `runtime` (runc, crun) alone in a cgroup of the test's: found without
/// --runtime, named from the runtime's state, its CPU time its cgroup's.
fn oci_container_alone(runtime: &'static str) {
    let work = "busy 200000";
    let name = format!("profiler-test-{runtime}-{}", std::process::id());
    let _v1 = RuntimeCgroups::watch(&[name.as_str()]);
    let cg = TestCgroup::new(runtime);
    let p = Attached::start(&cg, &[]);
    let cid = format!("pt-{runtime}-{}", std::process::id());
    let mut bundle = OciBundle::new(runtime, "c1", &cg.path.join(&cid), &["sh", "-c", work]);
    bundle.run(&cid);
    let rec = p.wait_ended_where(&cid, secs(30), |r| r["exec"] == cid.as_str());
    assert_eq!(container(&rec, "runtime"), Some(runtime), "{rec}");
    assert_eq!(container(&rec, "id"), Some(cid.as_str()));
    assert_eq!(
        container(&rec, "command"),
        Some(format!("sh -c {work}").as_str())
    );
    check_cpu(
        &format!("{runtime} container"),
        &rec,
        cpu_usage_usec(&cg.path) * 1000,
    );
    check_phases(&format!("{runtime} container"), &rec, 200_000_000);
    assert_eq!(rec["exit"]["code"], 0, "{rec}");
    let (code, _, _) = p.stop();
    assert_eq!(code, 0);
}

/// Test 5: crun, the OCI runtime of many distributions' podman, alone in a cgroup of the
/// test's: named from crun's state as runc's containers are from runc's. crun refuses a hybrid
/// host (v1 hierarchies beside a v2 one that holds a controller): there the test checks that
/// refusal and says so, and the VM guests (pure v2; `cargo xtask vmtest`) run the container.
#[test]
fn crun_containers_are_named_from_its_state() {
    if v2_mount() != std::path::Path::new("/sys/fs/cgroup") {
        let cg = TestCgroup::new("crun-hybrid");
        let cid = format!("pt-crun-h-{}", std::process::id());
        let mut bundle = OciBundle::new("crun", "h", &cg.path.join(&cid), &["true"]);
        let e = bundle.try_run(&cid).expect_err("crun ran on a hybrid host");
        assert!(e.contains("hybrid mode not supported"), "{e}");
        eprintln!(
            "NOT RUN HERE: crun refuses this hybrid cgroup host ({}); the VM guests run crun",
            e.trim()
        );
        return;
    }
    oci_container_alone("crun");
}
