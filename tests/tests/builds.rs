//! Image builds of podman and buildah: each RUN step of `podman build`
//! and `buildah bud` is an exec (buildah puts it at the cgroup root, `buildah-buildah<N>`,
//! beside everything else), named by its command from buildah's bundle, with exact figures;
//! nothing else at the root is watched. Ground truth: the sizes the steps write with
//! O_DIRECT, the CPU time the step's cgroup shows from inside at its end (`cpustat`), the
//! processes a step ran.

use std::{fs, path::Path};

use profiler_tests::{runtimes::*, *};

const MIB: u64 = 1 << 20;

/// The steps of the builds: 32 MiB of direct writes, a CPU-bound step, a 2 ms step, 50
/// short processes.
const STEPS: [&str; 4] = [
    "dd if=/dev/zero of=/io bs=1M count=32 oflag=direct status=none && rm /io && cpustat",
    "busy 400000 && cpustat",
    "busy 2000 && cpustat",
    "for i in $(seq 50); do /bin/true; done",
];

/// What each RUN step printed, by its command: podman and buildah print `STEP n/m: RUN cmd`
/// before a step's output.
fn output_of(build: &str, step: &str) -> String {
    let head = format!("RUN {step}");
    let mut lines = build.lines().skip_while(|l| !l.ends_with(&head));
    assert!(lines.next().is_some(), "no step {step:?} in {build}");
    lines
        .take_while(|l| !l.starts_with("STEP ") && !l.starts_with("COMMIT"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Each step's ended record, found by its first program's argv; every exec of the run a
/// buildah step at the root, one per RUN.
fn check_steps(what: &str, p: Attached, build: &str, oci: &str) {
    let mut recs = Vec::new();
    for s in STEPS {
        let cmd = format!("/bin/sh -c {s}");
        let rec = p.wait_ended_where(s, secs(60), |r| r["command"] == cmd.as_str());
        let path = rec["exec"].as_str().unwrap();
        let name = path.trim_start_matches('/');
        assert!(
            name.starts_with("buildah-buildah") && !name.contains('/'),
            "{what}: a step at the root: {rec}"
        );
        // Named from buildah's bundle while the step runs; a step of a few ms may be gone
        // before it is read, then its first program names it (and a note says why).
        match container(&rec, "runtime") {
            Some(rt) => {
                assert_eq!(rt, "buildah", "{rec}");
                assert_eq!(container(&rec, "id"), Some(name), "{rec}");
                assert_eq!(container(&rec, "command"), Some(cmd.as_str()), "{rec}");
            }
            None => assert!(
                s.starts_with("busy 2000"),
                "{what}: a step of {s:?} is long enough to be named: {rec}"
            ),
        }
        // The step identity: the command, its long numbers normalized (`busy <n>`).
        let step = rec["step"].as_str().unwrap();
        assert!(
            step.starts_with("/bin/sh -c ") && !step.contains("400000"),
            "{rec}"
        );
        assert_eq!(rec["exit"]["code"], 0, "{rec}");
        recs.push(rec);
    }
    let [io, cpu, short, procs] = &recs[..] else {
        unreachable!()
    };
    check_written(&format!("{what} IO step"), io, 32 * MIB);
    check_cpu(
        &format!("{what} IO step"),
        io,
        cpu_ns_lines(&output_of(build, STEPS[0]))[0],
    );
    check_cpu(
        &format!("{what} CPU step"),
        cpu,
        cpu_ns_lines(&output_of(build, STEPS[1]))[0],
    );
    assert!(u(&short["cpu"]["on_cpu_ns"]) >= 2_000_000, "{short}");
    check_cpu(
        &format!("{what} 2 ms step"),
        short,
        cpu_ns_lines(&output_of(build, STEPS[2]))[0],
    );
    let trues = procs["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["comm"] == "true")
        .count();
    assert_eq!(
        trues, 50,
        "{what}: the step ran /bin/true 50 times: {procs}"
    );
    let (code, all, _) = p.stop();
    assert_eq!(code, 0);
    let ended: Vec<&str> = all
        .iter()
        .filter(|r| r["state"] == "ended")
        .filter_map(|r| r["exec"].as_str())
        .collect();
    assert!(
        ended
            .iter()
            .all(|e| e.trim_start_matches('/').starts_with("buildah-buildah")),
        "{what}: only buildah's steps are execs, nothing else at the root: {ended:?}"
    );
    let mut unique = ended.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), ended.len(), "each step once: {ended:?}");
    assert_eq!(
        ended.len(),
        STEPS.len(),
        "one exec per RUN ({oci}): {ended:?}"
    );
    eprintln!(
        "MEASURED {what}: {} RUN steps, {} execs ({oci})",
        STEPS.len(),
        ended.len()
    );
}

fn dockerfile(ctx: &Path) {
    let mut text = String::from("FROM localhost/pbase:1\n");
    for s in STEPS {
        text.push_str(&format!("RUN {s}\n"));
    }
    fs::write(ctx.join("Dockerfile"), text).unwrap();
}

/// An image of the tests' workloads in `pm`'s storage, and the profiler attached to
/// `--runtime RUNTIME` with that storage.
fn attach(pm: &Podman, runtime: &str) -> Attached {
    pm.ok(&[
        "import",
        base_image_tar().to_str().unwrap(),
        "localhost/pbase:1",
    ]);
    Attached::start_with(
        &[
            "--runtime".into(),
            runtime.into(),
            "--runtime-root".into(),
            pm.root.display().to_string(),
        ],
        &[],
    )
}

/// podman's default nofile and nproc limits exceed this host's hard limits.
const ULIMITS: [&str; 4] = [
    "--ulimit",
    "nofile=1024:1024",
    "--ulimit",
    "nproc=4096:4096",
];

/// Test 1: `podman build` under `--runtime podman` (which covers its builds): each RUN step
/// (run by runc) an exec, named by its command, exact; a cgroup made at the root meanwhile is
/// not watched.
#[test]
fn podman_build_steps_are_execs_of_runtime_podman() {
    let pm = Podman::new();
    pm.ok(&[
        "import",
        base_image_tar().to_str().unwrap(),
        "localhost/pbase:1",
    ]);
    let p = attach(&pm, "podman");
    // Beside the steps at the root: not an exec.
    let other = TestCgroup::new("builds-other");
    run_in(&other.child("x"), &["/bin/true"]);
    let ctx = Scratch::new("podman-build");
    dockerfile(&ctx.0);
    let mut args = vec!["build", "--no-cache", "--network", "none"];
    args.extend(ULIMITS);
    args.extend(["-t", "pt-build:1", ctx.0.to_str().unwrap()]);
    let build = pm.ok(&args);
    check_steps("podman build", p, &build, "runc");
}

/// Test 2: `buildah bud` under `--runtime buildah`: the same, and nothing but its steps.
#[test]
fn buildah_bud_steps_are_execs_of_runtime_buildah() {
    let pm = Podman::new();
    pm.ok(&[
        "import",
        base_image_tar().to_str().unwrap(),
        "localhost/pbase:1",
    ]);
    let p = attach(&pm, "buildah");
    let ctx = Scratch::new("buildah-bud");
    dockerfile(&ctx.0);
    let out = pm
        .buildah()
        .args([
            "bud",
            "--no-cache",
            "--network",
            "none",
            "--runtime",
            "runc",
        ])
        .args(ULIMITS)
        .args(["-t", "pt-bud:1", ctx.0.to_str().unwrap()])
        .output()
        .unwrap();
    let build = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "buildah bud: {build}");
    check_steps("buildah bud", p, &build, "runc");
}

/// buildah missing: one line before attaching.
#[test]
fn runtime_buildah_without_buildah_says_so() {
    let (code, err) = fails_env(
        &[
            "attach",
            "--runtime",
            "buildah",
            "--runtime-root",
            "/nonexistent/profiler-test-storage",
        ],
        &[("PATH", "/nonexistent")],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("buildah is not installed here"), "{err}");
}
