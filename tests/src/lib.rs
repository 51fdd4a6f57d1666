//! Helpers of the privileged end-to-end tests: test cgroups that clean up after themselves,
//! the profiler running in the background, workloads placed in cgroups, ground-truth readers.
//!
//! These tests need root and BPF. They never skip: without root they fail and say why.

use std::{
    fs,
    io::Write as _,
    os::unix::{fs::MetadataExt as _, process::CommandExt as _},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

pub use serde_json::Value;

mod attached;
pub mod backends;
pub mod browser;
pub mod fleet;
mod netns;
pub mod runtimes;

pub use self::{
    attached::Attached,
    netns::{Netns, Server, veth},
};

/// The profiler binary under test (built by `cargo xtask test`, or named by PROFILER_BIN).
pub fn profiler_bin() -> PathBuf {
    if let Ok(p) = std::env::var("PROFILER_BIN") {
        return PathBuf::from(p);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let p = root.join("target/debug/profiler");
    assert!(
        p.exists(),
        "{} missing: build it first (cargo build -p profiler) or set PROFILER_BIN",
        p.display()
    );
    p
}

/// A test timeout, stretched by PROFILER_TEST_TIME_SCALE (the VM tests run under emulation).
pub fn secs(n: u64) -> Duration {
    let scale: f64 = std::env::var("PROFILER_TEST_TIME_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0);
    Duration::from_secs_f64(n as f64 * scale.max(1.0))
}

/// A tolerance of `ns` nanoseconds of the guest's own time, stretched as [`secs`] is: under
/// emulation a vCPU waits its turn on the host while the guest's clock runs (a tick or a
/// child's first steps take longer in the guest's clock).
pub fn stretched_ns(ns: u64) -> u64 {
    (ns as f64 * secs(1).as_secs_f64()) as u64
}

/// Run `cmd` as user and group `nobody` with no capabilities (setuid from root clears them).
pub fn as_nobody(cmd: &mut Command) -> &mut Command {
    // SAFETY: only setgroups/setgid/setuid between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(65534) != 0
                || libc::setuid(65534) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// Fail (never skip) when not root.
pub fn require_root() {
    // SAFETY: trivial libc call.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "these tests load eBPF programs and create cgroups: run them as root (cargo xtask test does)"
    );
}

/// The cgroup v2 mount point, from /proc/self/mountinfo.
pub fn v2_mount() -> PathBuf {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    for line in info.lines() {
        if let Some((pre, post)) = line.split_once(" - ")
            && post.starts_with("cgroup2 ")
        {
            return PathBuf::from(pre.split_whitespace().nth(4).unwrap());
        }
    }
    panic!("no cgroup v2 mount");
}

/// A cgroup subtree owned by one test: removed (processes killed) on drop, also on failure.
pub struct TestCgroup {
    pub path: PathBuf,
}

impl TestCgroup {
    /// `<v2 mount>/profiler-test-<name>-<pid>`.
    pub fn new(name: &str) -> Self {
        require_root();
        let path = v2_mount().join(format!("profiler-test-{name}-{}", std::process::id()));
        if path.exists() {
            remove_tree(&path);
        }
        fs::create_dir(&path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
        // Hand the execs every controller this cgroup has (io and memory on pure v2 hosts).
        let available = fs::read_to_string(path.join("cgroup.controllers")).unwrap_or_default();
        for c in available.split_whitespace() {
            let _ = fs::write(path.join("cgroup.subtree_control"), format!("+{c}"));
        }
        // Where the runner says which the execs must have (the VM guests), a missing one is a
        // failure, not a quiet fall into the hybrid host's branch of a test.
        if let Ok(want) = std::env::var("PROFILER_TEST_CONTROLLERS") {
            let got = fs::read_to_string(path.join("cgroup.subtree_control")).unwrap_or_default();
            for c in want.split_whitespace() {
                assert!(
                    got.split_whitespace().any(|g| g == c),
                    "the execs of {} lack the {c} controller (PROFILER_TEST_CONTROLLERS={want}): \
                     subtree_control has {got:?}",
                    path.display()
                );
            }
        }
        Self { path }
    }

    /// Path relative to the v2 mount, as passed to `--cgroup`.
    pub fn arg(&self) -> String {
        self.path.display().to_string()
    }

    /// Create a child cgroup (an exec) and return its path.
    pub fn child(&self, name: &str) -> PathBuf {
        let p = self.path.join(name);
        fs::create_dir_all(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
        p
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        remove_tree(&self.path);
    }
}

/// Kill every process below `dir` and remove the cgroups, deepest first.
pub fn remove_tree(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut dirs = Vec::new();
    collect_dirs(dir, &mut dirs);
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for d in &dirs {
        let _ = fs::write(d.join("cgroup.kill"), "1");
        for pid in fs::read_to_string(d.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
        {
            if let Ok(pid) = pid.trim().parse::<i32>() {
                // SAFETY: killing processes our own test placed in its own cgroup.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
    for d in &dirs {
        while fs::remove_dir(d).is_err() && d.exists() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
    }
}

fn collect_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    if !dir.is_dir() {
        return;
    }
    out.push(dir.to_path_buf());
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                collect_dirs(&e.path(), out);
            }
        }
    }
}

/// The cgroup id (kernfs inode) of a cgroup directory.
pub fn cgroup_id(dir: &Path) -> u64 {
    fs::metadata(dir).unwrap().ino()
}

/// Start `argv` inside the cgroup `dir` (the child moves itself in before it execs).
pub fn spawn_in(dir: &Path, argv: &[&str]) -> Child {
    spawn_in_with(dir, argv, Stdio::null())
}

fn spawn_in_with(dir: &Path, argv: &[&str], stdout: Stdio) -> Child {
    let procs = fs::OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.procs"))
        .unwrap();
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..]).stdin(Stdio::null()).stdout(stdout);
    // SAFETY: only a write(2) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let mut f = &procs;
            f.write_all(b"0")
        });
    }
    cmd.spawn()
        .unwrap_or_else(|e| panic!("spawn {argv:?}: {e}"))
}

/// `argv` as a command that moves itself into the cgroup `dir` before its execve, with an
/// empty environment and no stdin: the caller adds what the workload needs.
pub fn command_in(dir: &Path, argv: &[&str]) -> Command {
    let procs = fs::OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.procs"))
        .unwrap();
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..]).env_clear().stdin(Stdio::null());
    // SAFETY: only a write(2) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let mut f = &procs;
            f.write_all(b"0")
        });
    }
    cmd
}

/// Run `argv` inside the cgroup `dir` to completion with exactly the environment `env`
/// (nothing inherited); panics unless it succeeds.
pub fn run_in_env(dir: &Path, argv: &[&str], env: &[(&str, &str)]) {
    let st = command_in(dir, argv)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("spawn {argv:?}: {e}"));
    assert!(st.success(), "{argv:?} failed: {st}");
}

/// Like [`spawn_in`], with stdout piped.
pub fn spawn_in_piped(dir: &Path, argv: &[&str]) -> Child {
    spawn_in_with(dir, argv, Stdio::piped())
}

/// Start `argv` directly inside the cgroup `dir` (clone3 CLONE_INTO_CGROUP: born there, never
/// moved), wait for it, and return its pid.
pub fn run_born_in(dir: &Path, argv: &[&str]) -> u32 {
    let args: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
    let child = profiler::spawn::spawn_in_cgroup(dir, &args)
        .unwrap_or_else(|e| panic!("spawn {argv:?}: {e}"));
    let (code, status) = profiler::spawn::wait_exit_code(child.pid).unwrap();
    assert_eq!(code, 0, "{argv:?} {status}");
    child.pid as u32
}

/// Reap child `pid`: its wait status and resource usage.
pub fn wait4(pid: i32) -> (i32, libc::rusage) {
    let mut status = 0;
    // SAFETY: rusage is plain data; waiting for our own child.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::wait4(pid, &mut status, 0, &mut ru), pid);
        (status, ru)
    }
}

/// `dd` of `count` blocks of `bs` zeros to `file` with O_DIRECT, born in the cgroup `dir`
/// (see [`run_born_in`]); returns its pid.
pub fn direct_write_in(dir: &Path, file: &Path, bs: &str, count: u32) -> u32 {
    let of = format!("of={}", file.display());
    let (bs, count) = (format!("bs={bs}"), format!("count={count}"));
    run_born_in(
        dir,
        &[
            "dd",
            "if=/dev/zero",
            &of,
            &bs,
            &count,
            "oflag=direct",
            "status=none",
        ],
    )
}

/// Run `argv` inside `dir` to completion and return its standard output; panics unless it
/// succeeds.
pub fn output_in(dir: &Path, argv: &[&str]) -> String {
    let out = spawn_in_with(dir, argv, Stdio::piped())
        .wait_with_output()
        .unwrap();
    assert!(out.status.success(), "{argv:?} failed: {}", out.status);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What a socket's kernel counters (TCP_INFO) say it moved, as `netpeer` prints them.
#[derive(Debug, Clone, Copy)]
pub struct Tcp {
    /// Payload bytes sent, retransmissions included.
    pub bytes_sent: u64,
    pub segs_out: u64,
    pub bytes_retrans: u64,
    /// Payload bytes received in order (no duplicates).
    pub bytes_received: u64,
    pub segs_in: u64,
}

impl Tcp {
    /// The IP bytes the socket's packets carried out: the payload plus at most 80 bytes of IP
    /// and TCP headers a segment (fewer: a GSO packet of many segments carries one set);
    /// `after` segments for what follows the count (a FIN, last ACKs).
    pub fn tx(&self, after: u64) -> std::ops::RangeInclusive<u64> {
        self.bytes_sent..=self.bytes_sent + 80 * (self.segs_out + after)
    }

    /// The IP bytes that reached the socket, likewise; `dup` bytes of the peer's
    /// retransmissions may arrive twice.
    pub fn rx(&self, dup: u64, after: u64) -> std::ops::RangeInclusive<u64> {
        self.bytes_received..=self.bytes_received + dup + 80 * (self.segs_in + after)
    }
}

/// The TCP_INFO line `netpeer` printed of its socket (`send`: last line; `serve`: one a
/// connection).
pub fn tcp_info(netpeer_line: &str) -> Tcp {
    let field = |k: &str| -> u64 {
        netpeer_line
            .split_whitespace()
            .find_map(|w| w.strip_prefix(k)?.strip_prefix('=')?.parse().ok())
            .unwrap_or_else(|| panic!("no {k} in netpeer's output {netpeer_line:?}"))
    };
    Tcp {
        bytes_sent: field("bytes_sent"),
        segs_out: field("segs_out"),
        bytes_retrans: field("bytes_retrans"),
        bytes_received: field("bytes_received"),
        segs_in: field("segs_in"),
    }
}

/// Run `argv` inside `dir` to completion; panics unless it succeeds.
pub fn run_in(dir: &Path, argv: &[&str]) {
    let status = spawn_in(dir, argv).wait().unwrap();
    assert!(status.success(), "{argv:?} failed: {status}");
}

/// cpu.stat usage_usec of a cgroup.
pub fn cpu_usage_usec(dir: &Path) -> u64 {
    cpu_stat_usec(dir, "usage_usec")
}

/// A field of a cgroup's cpu.stat (usage_usec, user_usec, system_usec).
pub fn cpu_stat_usec(dir: &Path, field: &str) -> u64 {
    let s = fs::read_to_string(dir.join("cpu.stat")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {field} in {}/cpu.stat", dir.display()))
        .trim()
        .parse()
        .unwrap()
}

/// (on-CPU ns, run delay ns) of a task from /proc/PID/schedstat.
pub fn schedstat(pid: u32) -> (u64, u64) {
    let s = fs::read_to_string(format!("/proc/{pid}/schedstat")).unwrap();
    let v: Vec<u64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();
    (v[0], v[1])
}

/// Kill `child` and return its final (on-CPU ns, run delay ns): read once it has exited but
/// before it is reaped (waitid WEXITED|WNOWAIT), when its figures have stopped growing but its
/// /proc entry is still there (a zombie's schedstat is kept; checked here). Then reap it.
/// A figure read before the kill would miss what accrues until the task runs and dies: under
/// emulation that was 175 ms of run-queue wait.
pub fn kill_for_final_schedstat(child: &mut Child) -> (u64, u64) {
    let pid = child.id();
    child.kill().unwrap();
    loop {
        // SAFETY: waitid fills the zeroed siginfo it is given.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if r == 0 {
            break;
        }
        let e = std::io::Error::last_os_error();
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::Interrupted,
            "waitid {pid}: {e}"
        );
    }
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let state = stat.rsplit_once(") ").map(|(_, rest)| &rest[..1]);
    assert_eq!(state, Some("Z"), "{pid} exited, not reaped: {stat}");
    let last = schedstat(pid);
    child.wait().unwrap();
    last
}

/// Voluntary context switches of this process's reaped children (getrusage RUSAGE_CHILDREN).
pub fn children_voluntary_switches() -> u64 {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(
        unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) },
        0
    );
    ru.ru_nvcsw as u64
}

/// /proc/PID/schedstat (on-CPU, run delay) of an exited child, once its last switch is done:
/// the dying task runs on after its parent can see it exit.
pub fn settled_schedstat(pid: i32) -> (u64, u64) {
    let read = || schedstat(pid as u32);
    let mut last = read();
    for _ in 0..1000 {
        thread::sleep(Duration::from_millis(1));
        let now = read();
        if now == last {
            return now;
        }
        last = now;
    }
    panic!("the schedstat of exited pid {pid} still changes after 1 s: {last:?}");
}

/// Whether child `pid` has exited, leaving it to be reaped.
pub fn exited(pid: i32) -> bool {
    // SAFETY: siginfo is plain data; waitid with WNOWAIT leaves the child as it is.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        ) == 0
            && info.si_pid() != 0
    }
}

/// A scratch directory on a real block device (not tmpfs, not 9p), for IO tests:
/// PROFILER_SCRATCH (the VM tests' virtio disk), else target/io-scratch.
pub fn scratch_dir(name: &str) -> PathBuf {
    let root = match std::env::var("PROFILER_SCRATCH") {
        Ok(p) => PathBuf::from(p),
        Err(_) => Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap()
            .join("target/io-scratch"),
    };
    let d = root.join(format!("{name}-{}", std::process::id()));
    fs::create_dir_all(&d).unwrap();
    d
}

/// Run the profiler expecting failure, with extra environment variables: the exit code and
/// stderr, which must be one line starting with "profiler: error: " (and no panic).
pub fn fails_env(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let out = Command::new(profiler_bin())
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let code = out.status.code().unwrap_or(-1);
    assert_ne!(code, 0, "{args:?} should fail: {err}");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{args:?}: one line of error, got {err:?}");
    assert!(lines[0].starts_with("profiler: error: "), "{err}");
    (code, err)
}

/// [`fails_env`] without extra environment.
pub fn fails(args: &[&str]) -> (i32, String) {
    fails_env(args, &[])
}

/// Relative difference |a-b|/b.
pub fn rel_err(measured: f64, truth: f64) -> f64 {
    ((measured - truth) / truth).abs()
}

/// Print a measured error line (collected into the test log for the notes).
pub fn report(name: &str, measured: f64, truth: f64) -> f64 {
    let e = rel_err(measured, truth);
    eprintln!(
        "MEASURED {name}: profiler {measured:.0} truth {truth:.0} error {:.4}%",
        e * 100.0
    );
    e
}

/// A JSON number as u64 (panics with the value otherwise).
pub fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Latency samples in an exec record's disk histogram of `direction` ("read" or "write"): one
/// per request whose completion the programs saw (the kernel skips a few:
/// docs/figures.md, "Skipped BPF runs"), so at most its request count.
pub fn latency_samples(rec: &Value, direction: &str) -> u64 {
    let h = &rec["disk"][format!("{direction}_latency")]["counts"];
    h.as_array()
        .unwrap_or_else(|| panic!("no {direction} latency histogram: {rec}"))
        .iter()
        .map(u)
        .sum()
}

/// A JSON number as f64.
pub fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The `busy` test workload: BUSY_BIN (the VMs), else the `busy` binary cargo built beside
/// the test executable.
pub fn busy() -> String {
    std::env::var("BUSY_BIN").unwrap_or_else(|_| test_bin("busy"))
}

/// The `netpeer` test workload (a TCP transfer of known size): NETPEER_BIN (the VMs), else
/// the binary cargo built beside the test executable.
pub fn netpeer() -> String {
    std::env::var("NETPEER_BIN").unwrap_or_else(|_| test_bin("netpeer"))
}

/// A binary of this crate, built beside the test executable (target/<profile>/NAME, the test
/// being in target/<profile>/deps).
fn test_bin(name: &str) -> String {
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().and_then(Path::parent).unwrap().join(name);
    assert!(
        bin.exists(),
        "{} missing: build it with cargo build -p profiler-tests",
        bin.display()
    );
    bin.display().to_string()
}

/// Run a command to completion; panics with its stderr unless it succeeds.
pub fn sh(argv: &[&str]) -> String {
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .output()
        .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    assert!(
        out.status.success(),
        "{argv:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Remove a cgroup directory, retrying while its last tasks finish exiting.
pub fn rmdir(dir: &Path) {
    let deadline = Instant::now() + secs(5);
    while let Err(e) = fs::remove_dir(dir) {
        assert!(Instant::now() < deadline, "rmdir {}: {e}", dir.display());
        thread::sleep(Duration::from_millis(2));
    }
}

/// Start `n` CPU hogs pinned to CPU 0, one per new exec `hog0..`, let them compete for
/// `for_`, then kill each one and read its final /proc/PID/schedstat run delay. Returns (exec
/// cgroup id, run delay ns); the execs are removed.
pub fn pinned_hogs(cg: &TestCgroup, n: usize, for_: Duration) -> Vec<(u64, u64)> {
    let mut hogs = Vec::new();
    for i in 0..n {
        let e = cg.child(&format!("hog{i}"));
        let child = spawn_in(&e, &["taskset", "-c", "0", &busy(), "600000000"]);
        hogs.push((e, child));
    }
    thread::sleep(for_);
    let mut out = Vec::new();
    for (e, child) in hogs.iter_mut() {
        let (_, delay) = kill_for_final_schedstat(child);
        out.push((cgroup_id(e), delay));
    }
    for (e, _) in &hogs {
        rmdir(e);
    }
    out
}

/// The kernel's current clocksource, and whether the scheduler's clock (on-CPU times) runs on
/// it: it does on the TSC and kvm-clock; when the kernel finds the TSC unstable it falls back
/// to HPET or the ACPI PM timer, and the scheduler's clock then steps by ticks.
pub struct ClockSource {
    pub name: String,
    pub trusted: bool,
}

pub fn sched_clock_source() -> ClockSource {
    let name =
        fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|e| format!("unknown clocksource: {e}"));
    let trusted = matches!(name.as_str(), "tsc" | "kvm-clock");
    if !trusted {
        eprintln!("MEASURED clocksource {name}: on-CPU times are compared with wall time only");
    }
    ClockSource { name, trusted }
}
