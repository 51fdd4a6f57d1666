//! The container image (`cargo xtask image`, PROFILER_IMAGE_TAR) run as the always-on sidecar
//! with the recipe of the deployment docs, on a dockerd of the test's own: it profiles a
//! BuildKit build's RUN steps and a container, with exact direct-IO bytes and names, exports
//! over OTLP to rotel, flushes its final records on `docker stop` and leaves no BPF program
//! behind; without a privilege it needs it exits non-zero with one line naming it.

use std::{
    fs, thread,
    time::{Duration, Instant},
};

use profiler_tests::{backends::Rotel, runtimes::*, *};

const MIB: u64 = 1 << 20;

/// Names of the profiler's programs as bpftool shows them (truncated to 15 characters).
fn our_programs() -> Vec<String> {
    let text = sh(&["bpftool", "prog", "show", "--json"]);
    let progs: Value = serde_json::from_str(&text).unwrap();
    let ours = [
        "sched_switch",
        "block_io_start",
        "block_rq_comple",
        "sched_process_e",
    ];
    progs
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .filter(|n| ours.contains(n))
        .map(str::to_owned)
        .collect()
}

/// Written bytes of a direct-IO workload: the size written, plus at most 1% (metadata).
fn check_written(what: &str, rec: &Value, n: u64) {
    let w = u(&rec["disk"]["write_bytes"]);
    report(
        &format!("sidecar: {what} disk write bytes"),
        w as f64,
        n as f64,
    );
    assert!(
        w >= n && rel_err(w as f64, n as f64) <= 0.01,
        "{what}: {rec}"
    );
}

/// The sidecar's stdout (JSON records) and stderr, as `docker logs` gives them.
fn logs(d: &Dockerd, name: &str) -> (String, String) {
    let out = d.docker(&["logs", name]);
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn records(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON {l:?}: {e}")))
        .collect()
}

fn wait_record(d: &Dockerd, sidecar: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + secs(60);
    loop {
        let (out, err) = logs(d, sidecar);
        if let Some(r) = records(&out)
            .into_iter()
            .find(|r| r["state"] == "ended" && pred(r))
        {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "no record of {what} from the sidecar; it printed:\n{out}\n{err}"
        );
        thread::sleep(Duration::from_millis(200));
    }
}

/// The capabilities of docs/deploy.md's recipe for this Engine: CAP_BPF and CAP_PERFMON are
/// known to Docker Engine 23 and later; before, CAP_SYS_ADMIN stands in for them and for
/// CAP_NET_ADMIN.
fn caps(d: &Dockerd) -> Vec<&'static str> {
    let v = d.docker_ok(&["version", "-f", "{{.Server.Version}}"]);
    let major: u32 = v.trim().split('.').next().unwrap().parse().unwrap();
    if major >= 23 {
        vec![
            "--cap-add=BPF",
            "--cap-add=PERFMON",
            "--cap-add=NET_ADMIN",
            "--cap-add=SYS_PTRACE",
            "--cap-add=DAC_READ_SEARCH",
        ]
    } else {
        vec![
            "--cap-add=SYS_ADMIN",
            "--cap-add=SYS_PTRACE",
            "--cap-add=DAC_READ_SEARCH",
        ]
    }
}

/// The sidecar's `docker run` flags of docs/deploy.md, for the test's own dockerd.
fn recipe(d: &Dockerd, name: &str) -> Vec<String> {
    let data_root = d.docker_ok(&["info", "-f", "{{.DockerRootDir}}"]);
    let buildkit = format!("{}/buildkit", data_root.trim());
    fs::create_dir_all(&buildkit).unwrap();
    [
        "run",
        "-d",
        "--name",
        name,
        // Host PIDs (/proc of every exec's tasks), the host's cgroup namespace (cgroup paths
        // as the kernel reports them), the host's network (the OTLP endpoint on loopback).
        "--pid=host",
        "--cgroupns=host",
        "--network=host",
        "--cap-drop=ALL",
    ]
    .into_iter()
    .chain(caps(d))
    .chain([
        "-v",
        "/sys/fs/cgroup:/sys/fs/cgroup:ro",
        "-v",
        &format!("{}:/var/run/docker.sock", d.socket.display()),
        "-v",
        &format!("{buildkit}:{buildkit}:ro"),
    ])
    .map(str::to_owned)
    .collect()
}

struct Sidecar<'a> {
    d: &'a Dockerd,
    name: String,
}

impl Drop for Sidecar<'_> {
    fn drop(&mut self) {
        let _ = self.d.docker(&["rm", "-f", &self.name]);
    }
}

#[test]
fn image_runs_as_the_sidecar_with_exact_figures_and_stops_cleanly() {
    require_root();
    let tar = std::env::var("PROFILER_IMAGE_TAR").expect(
        "PROFILER_IMAGE_TAR is not set: run this test through `cargo xtask test`, which runs \
         `cargo xtask image` first",
    );
    let image = std::env::var("PROFILER_IMAGE_REF").unwrap();
    assert!(
        our_programs().is_empty(),
        "profiler programs are loaded before the test: {:?}",
        our_programs()
    );
    let d = Dockerd::start();
    d.docker_ok(&["load", "-i", &tar]);
    d.docker_ok(&["import", base_image_tar().to_str().unwrap(), "pbase:1"]);
    let rotel = Rotel::start();
    let pid = std::process::id();
    let name = format!("pt-sidecar-{pid}");
    let mut args = recipe(&d, &name);
    args.extend(
        [
            image.as_str(),
            "attach",
            "--runtime",
            "docker",
            "--exec-depth",
            "2",
            "--output",
            "json",
            "--otlp-endpoint",
            &rotel.http_endpoint(),
            "--export-interval",
            "1s",
        ]
        .map(str::to_owned),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    d.docker_ok(&args);
    let sidecar = Sidecar {
        d: &d,
        name: name.clone(),
    };
    let deadline = Instant::now() + secs(60);
    loop {
        let (out, err) = logs(&d, &name);
        if err.contains("profiler: attached to") {
            break;
        }
        let running = d.docker_ok(&["inspect", "-f", "{{.State.Running}}", &name]);
        assert!(
            running.trim() == "true" && Instant::now() < deadline,
            "the sidecar did not attach:\n{out}\n{err}"
        );
        thread::sleep(Duration::from_millis(200));
    }

    // A container writing 16 MiB with O_DIRECT.
    let work = format!("pt-sidecar-work-{pid}");
    d.docker_ok(&[
        "run",
        "--name",
        &work,
        "--network",
        "none",
        "pbase:1",
        "sh",
        "-c",
        "dd if=/dev/zero of=/io bs=1M count=16 oflag=direct status=none && rm /io",
    ]);
    let rec = wait_record(&d, &name, "the container", |r| {
        r["container"]["name"] == work.as_str()
    });
    let id = d.docker_ok(&["inspect", "-f", "{{.Id}}", &work]);
    assert_eq!(rec["container"]["id"], id.trim(), "{rec}");
    assert_eq!(rec["container"]["runtime"], "docker", "{rec}");
    check_written("container", &rec, 16 * MIB);

    // A BuildKit build: its RUN step is an exec two levels down, named by its command.
    let step = "dd if=/dev/zero of=/io bs=1M count=8 oflag=direct status=none && rm /io";
    let cmd = d.build_step(step);
    let rec = wait_record(&d, &name, "the RUN step", |r| {
        r["container"]["command"] == cmd.as_str()
    });
    assert_eq!(rec["container"]["runtime"], "buildkit", "{rec}");
    check_written("RUN step", &rec, 8 * MIB);

    // The collector has the container's series under its name.
    rotel.wait_for(secs(30), |p| {
        p.metric == "container.disk.io" && p.attr("container.name") == Some(work.as_str())
    });
    assert!(
        !our_programs().is_empty(),
        "the sidecar's programs are loaded"
    );

    // docker stop: SIGTERM, the final records (running execs too: the sidecar's own), exit 0.
    d.docker_ok(&["stop", "-t", "30", &name]);
    let code = d.docker_ok(&["inspect", "-f", "{{.State.ExitCode}}", &name]);
    let (out, err) = logs(&d, &name);
    assert_eq!(code.trim(), "0", "exit code; it printed:\n{out}\n{err}");
    assert!(
        records(&out).iter().any(|r| r["state"] == "running"),
        "no final record of a running exec on stop:\n{out}"
    );
    let deadline = Instant::now() + secs(10);
    while !our_programs().is_empty() {
        assert!(
            Instant::now() < deadline,
            "BPF programs left after the sidecar stopped: {:?}",
            our_programs()
        );
        thread::sleep(Duration::from_millis(100));
    }
    drop(sidecar);
}

#[test]
fn image_without_a_needed_privilege_or_mount_says_which() {
    require_root();
    let tar = std::env::var("PROFILER_IMAGE_TAR").expect("PROFILER_IMAGE_TAR is not set");
    let image = std::env::var("PROFILER_IMAGE_REF").unwrap();
    let d = Dockerd::start();
    d.docker_ok(&["load", "-i", &tar]);
    let run = |extra: &[&str], args: &[&str]| {
        let mut all = vec![
            "run",
            "--rm",
            "--pid=host",
            "--cgroupns=host",
            "--network=none",
        ];
        all.extend_from_slice(extra);
        all.push(&image);
        all.extend_from_slice(args);
        let out = d.docker(&all);
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let caps = [&["--cap-drop=ALL"][..], &caps(&d)].concat();
    // The host's cgroup v2 mount, bind-mounted at the same place.
    let cgroup_root = v2_mount().display().to_string();
    // No BPF capability: refused before anything is loaded, naming it.
    let (code, err) = run(
        &["--cap-drop=ALL", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:ro"],
        &["attach", "--cgroup", &cgroup_root],
    );
    assert_ne!(code, 0, "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    assert!(
        lines[0].starts_with("profiler: error: ") && lines[0].contains("CAP_BPF"),
        "{err}"
    );
    // No BTF (the kernel's type information, which the programs are laid out by).
    let (code, err) = run(
        &[
            &caps[..],
            &[
                "-v",
                "/sys/fs/cgroup:/sys/fs/cgroup:ro",
                "--tmpfs",
                "/sys/kernel/btf",
            ],
        ]
        .concat(),
        &["attach", "--cgroup", &cgroup_root],
    );
    assert_ne!(code, 0, "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("/sys/kernel/btf/vmlinux"), "{err}");
    // No docker socket for --runtime docker.
    let (code, err) = run(
        &[&caps[..], &["-v", "/sys/fs/cgroup:/sys/fs/cgroup:ro"]].concat(),
        &["attach", "--runtime", "docker"],
    );
    assert_ne!(code, 0, "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("docker.sock"), "{err}");
    // Run alone, the image says what the host allows (`check`): here, that CAP_BPF is missing.
    let out = d.docker(&["run", "--rm", "--cap-drop=ALL", &image]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "check: {text}");
    assert!(text.contains("CAP_BPF"), "check's output: {text}");
}
