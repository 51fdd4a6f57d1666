//! `profiler check`: one line per feature (`ok`, `degraded` or `missing`), exit 0 exactly when
//! `attach` can run. The expected cgroup verdict is worked out here from /proc/self/mountinfo,
//! independently of the profiler: hybrid on this host, pure cgroup v2 in the VMs. Root needed
//! (the privilege cases drop capabilities from a root process).

use std::{
    fs,
    io::{BufRead as _, BufReader},
    os::unix::process::CommandExt as _,
    process::{Command, Output, Stdio},
    sync::mpsc,
    thread,
    time::Instant,
};

use profiler_tests::*;

const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// One line of the table.
#[derive(Debug)]
struct Row {
    feature: String,
    status: String,
    detail: String,
}

/// The table's rows; every line must be aligned and carry a status word and a detail.
fn rows(stdout: &str) -> Vec<Row> {
    let first = stdout.lines().next().expect("check printed nothing");
    // The status column starts after the first run of two spaces or more.
    let gap = first.find("  ").expect("no column gap");
    let col = gap + first[gap..].find(|c: char| c != ' ').unwrap();
    stdout
        .lines()
        .map(|l| {
            assert!(l.len() > col + 10, "short line {l:?}");
            let (feature, rest) = l.split_at(col);
            let (status, detail) = rest.split_at(10);
            let row = Row {
                feature: feature.trim().to_owned(),
                status: status.trim().to_owned(),
                detail: detail.to_owned(),
            };
            assert!(
                ["ok", "degraded", "missing"].contains(&row.status.as_str()),
                "bad status in {l:?}"
            );
            assert!(
                !row.feature.is_empty() && !row.detail.trim().is_empty(),
                "{l:?}"
            );
            assert!(!row.detail.starts_with(' '), "misaligned {l:?}");
            row
        })
        .collect()
}

fn row<'a>(rows: &'a [Row], feature: &str) -> &'a Row {
    rows.iter()
        .find(|r| r.feature == feature)
        .unwrap_or_else(|| panic!("no {feature} line in {rows:#?}"))
}

/// Run `profiler check ARGS`; the exit code, the rows and how long it took.
fn check(cmd: &mut Command) -> (i32, Vec<Row>, f64) {
    let t = Instant::now();
    let out: Output = cmd.output().unwrap();
    let took = t.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stderr.trim().is_empty(),
        "check writes only its table: {stderr}"
    );
    (out.status.code().unwrap_or(-1), rows(&stdout), took)
}

fn profiler(args: &[&str]) -> Command {
    let mut c = Command::new(profiler_bin());
    c.args(args);
    c
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Run the command as root with only the capabilities `keep` (the bounding set cut down to
/// them, and no inheritable or ambient ones): what `setpriv --bounding-set=-all,+...` does,
/// without needing setpriv in the VM.
fn with_caps<'a>(cmd: &'a mut Command, keep: &'static [u32]) -> &'a mut Command {
    // SAFETY: only prctl and capget/capset between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let err = std::io::Error::last_os_error;
            for cap in 0..64u32 {
                if !keep.contains(&cap)
                    && libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) != 0
                    && err().raw_os_error() != Some(libc::EINVAL)
                {
                    return Err(err());
                }
            }
            let clear = libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong;
            if libc::prctl(libc::PR_CAP_AMBIENT, clear, 0, 0, 0) != 0 {
                return Err(err());
            }
            let mut hdr = CapHeader {
                version: 0x2008_0522,
                pid: 0,
            };
            let mut data = [CapData::default(); 2];
            if libc::syscall(libc::SYS_capget, &mut hdr, data.as_mut_ptr()) != 0 {
                return Err(err());
            }
            data[0].inheritable = 0;
            data[1].inheritable = 0;
            if libc::syscall(libc::SYS_capset, &mut hdr, data.as_ptr()) != 0 {
                return Err(err());
            }
            Ok(())
        })
    }
}

/// The verdict this host's cgroup layout should get, worked out from mountinfo: "degraded"
/// (hybrid: controllers on v1, or the v2 root lacks one) or "ok" (pure v2 with them all).
fn expected_cgroup_status() -> (&'static str, bool) {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let hybrid = info.lines().any(|l| {
        l.split_once(" - ").is_some_and(|(_, post)| {
            let f: Vec<&str> = post.split_whitespace().collect();
            f.first() == Some(&"cgroup")
                && f.get(2).is_some_and(|o| {
                    o.split(',')
                        .any(|c| ["cpu", "blkio", "memory", "pids"].contains(&c))
                })
        })
    });
    let controllers = fs::read_to_string(v2_mount().join("cgroup.controllers")).unwrap();
    let all = ["cpu", "io", "memory", "pids"]
        .iter()
        .all(|c| controllers.split_whitespace().any(|x| x == *c));
    (if !hybrid && all { "ok" } else { "degraded" }, hybrid)
}

fn knobs() -> (String, String) {
    let r = |f| fs::read_to_string(f).unwrap_or_default();
    (
        r("/proc/sys/kernel/task_delayacct"),
        r("/proc/sys/kernel/bpf_stats_enabled"),
    )
}

/// As root: exit 0, a line per feature, nothing missing, the cgroup layout judged as
/// mountinfo shows it, quickly, and the kernel's knobs left as they were.
#[test]
fn check_on_this_host() {
    require_root();
    let before = knobs();
    let (code, rows, took) = check(&mut profiler(&["check"]));
    eprintln!("MEASURED check took {took:.3} s");
    assert_eq!(code, 0, "{rows:#?}");
    for f in [
        "kernel",
        "btf",
        "tracepoints",
        "program types",
        "kernel layout",
        "cgroup v2",
        "pressure",
        "CAP_BPF",
        "CAP_PERFMON",
        "CAP_NET_ADMIN",
        "CAP_SYS_ADMIN",
        "CAP_SYS_PTRACE",
        "CAP_DAC_READ_SEARCH",
        "delay accounting",
        "bpf_stats",
        "runtimes",
    ] {
        row(&rows, f);
    }
    assert!(
        rows.iter().all(|r| r.status != "missing"),
        "root can attach here: {rows:#?}"
    );
    for f in ["kernel", "btf", "CAP_BPF", "CAP_PERFMON"] {
        assert_eq!(row(&rows, f).status, "ok", "{:?}", row(&rows, f));
    }
    let (want, hybrid) = expected_cgroup_status();
    let cg = row(&rows, "cgroup v2");
    assert_eq!(cg.status, want, "{cg:?}");
    let mount = v2_mount().display().to_string();
    assert!(cg.detail.contains(&mount), "{cg:?}");
    assert_eq!(cg.detail.starts_with("hybrid"), hybrid, "{cg:?}");
    assert!(took < secs(2).as_secs_f64(), "check took {took} s");
    assert_eq!(knobs(), before, "check only reads the kernel's knobs");
}

/// Without capabilities (root, empty bounding set): exit 1, CAP_BPF and CAP_PERFMON named as
/// missing; attach refuses too, naming them.
#[test]
fn check_without_capabilities_says_what_is_missing() {
    require_root();
    let (code, rows, _) = check(with_caps(&mut profiler(&["check"]), &[]));
    assert_eq!(code, 1, "{rows:#?}");
    for c in ["CAP_BPF", "CAP_PERFMON"] {
        let r = row(&rows, c);
        assert_eq!(r.status, "missing", "{r:?}");
        assert!(r.detail.contains("not held"), "{r:?}");
    }
    assert_eq!(row(&rows, "CAP_NET_ADMIN").status, "degraded");
    // The rest is checked all the same.
    assert_eq!(row(&rows, "kernel").status, "ok");

    let cg = TestCgroup::new("checknocaps");
    let out = with_caps(&mut profiler(&["attach", "--cgroup", &cg.arg()]), &[])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("CAP_BPF and CAP_PERFMON"), "{err}");
}

/// With CAP_BPF and CAP_PERFMON alone: check exits 0 (degraded lines for the rest), and
/// attach does attach.
#[test]
fn check_with_bpf_and_perfmon_alone_lets_attach_run() {
    require_root();
    const KEEP: &[u32] = &[CAP_BPF, CAP_PERFMON];
    let (code, rows, _) = check(with_caps(&mut profiler(&["check"]), KEEP));
    assert_eq!(code, 0, "{rows:#?}");
    for c in ["CAP_NET_ADMIN", "CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH"] {
        assert_eq!(row(&rows, c).status, "degraded", "{:?}", row(&rows, c));
    }
    // Not needed: what it would turn on is said by the delay accounting and bpf_stats lines.
    assert_eq!(row(&rows, "CAP_SYS_ADMIN").status, "ok");
    // --bpf-stats needs CAP_SYS_ADMIN: attach cannot run then.
    let (code, rows, _) = check(with_caps(&mut profiler(&["check", "--bpf-stats"]), KEEP));
    assert_eq!(code, 1, "{rows:#?}");
    assert_eq!(row(&rows, "bpf_stats").status, "missing");

    let cg = TestCgroup::new("checkcaps");
    let mut child = with_caps(
        profiler(&["attach", "--cgroup", &cg.arg()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
        KEEP,
    )
    .spawn()
    .unwrap();
    let err = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = thread::spawn(move || {
        let mut all = Vec::new();
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            if l.contains("profiler: attached to") {
                let _ = tx.send(());
            }
            all.push(l);
        }
        all
    });
    let attached = rx.recv_timeout(secs(60)).is_ok();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    let lines = reader.join().unwrap();
    assert!(attached, "attach did not attach: {lines:#?}");
    assert_eq!(status.code(), Some(0), "{lines:#?}");
}

/// A watched cgroup that does not exist is missing, named; one that exists is ok, with the
/// controllers its execs get; a runtime that does not answer is missing.
#[test]
fn check_names_the_watched_cgroup_and_runtime() {
    require_root();
    let (code, rows, _) = check(&mut profiler(&["check", "--cgroup", "/nonexistent-xyz"]));
    assert_eq!(code, 1);
    let r = row(&rows, "watched cgroup");
    assert_eq!(r.status, "missing", "{r:?}");
    assert!(r.detail.contains("/nonexistent-xyz"), "{r:?}");

    let cg = TestCgroup::new("checkcg");
    let (code, rows, _) = check(&mut profiler(&["check", "--cgroup", &cg.arg()]));
    assert_eq!(code, 0, "{rows:#?}");
    let r = row(&rows, "watched cgroup");
    assert_eq!(r.status, "ok");
    assert!(r.detail.contains(&cg.arg()), "{r:?}");
    // TestCgroup hands its execs every controller it has.
    assert_eq!(row(&rows, "exec controllers").status, "ok");

    let (code, rows, _) = check(&mut profiler(&[
        "check",
        "--runtime",
        "containerd",
        "--runtime-endpoint",
        "/nonexistent-xyz.sock",
    ]));
    assert_eq!(code, 1);
    let r = row(&rows, "runtime containerd");
    assert_eq!(r.status, "missing", "{r:?}");
    assert!(r.detail.contains("/nonexistent-xyz.sock"), "{r:?}");
}
