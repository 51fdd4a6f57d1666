//! End-to-end tests of the execs' lifecycle against independent ground truth: short execs and
//! processes that all get counted, `run` and its exit status, execs running at attach, exec
//! depth, SIGINT, --live, full tables, bad input. Root and BPF needed; run serially (`cargo
//! xtask test` does): they share one kernel.

use std::{
    collections::{HashMap, HashSet},
    fs,
    process::Command,
    thread,
    time::Duration,
};

use profiler_tests::*;

/// Test 5: 1000 execs of 1-5 ms each: all reported once, with CPU time, none misattributed.
#[test]
fn churn_of_short_execs_loses_nothing() {
    let cg = TestCgroup::new("churn");
    let p = Attached::start(&cg, &["--max-execs", "2048"]);
    let n = 1000;
    let parent_before = cpu_usage_usec(&cg.path) * 1000;
    let mut expected: HashMap<u64, (String, u32, u64)> = HashMap::new();
    for i in 0..n {
        let name = format!("e{i}");
        let e = cg.child(&name);
        let id = cgroup_id(&e);
        let us = 1000 + (i * 37 % 4001);
        // Born in its cgroup (clone3), as a container's init is: its whole life is the exec's,
        // in cpu.stat and in the profiler alike. (A task moved in is counted from the move; the
        // kernel may charge the new cgroup a slice it ran before the move.)
        let pid = run_born_in(&e, &[&busy(), &us.to_string()]);
        let usage_ns = cpu_usage_usec(&e) * 1000;
        rmdir(&e);
        assert!(
            expected.insert(id, (name, pid, usage_ns)).is_none(),
            "cgroup id reused while live"
        );
    }
    let ended = p.wait_ended_count(n, secs(60));
    let (code, all, stderr) = p.stop();
    assert_eq!(code, 0);
    assert!(
        !stderr.iter().any(|l| l.contains("warning")),
        "drops or errors: {stderr:?}"
    );
    let mut seen = HashSet::new();
    let mut worst: f64 = 0.0;
    let mut total = 0u64;
    for r in &ended {
        let id = u(&r["cgroup_id"]);
        let (name, pid, usage_ns) = expected
            .get(&id)
            .unwrap_or_else(|| panic!("unexpected exec {r}"));
        assert!(seen.insert(id), "exec {name} reported twice");
        assert_eq!(r["exec"], name.as_str());
        let oncpu = u(&r["cpu"]["on_cpu_ns"]);
        assert!(oncpu > 0, "exec {name} has no CPU time: {r}");
        total += oncpu;
        assert_eq!(
            u(&r["tasks"]["task_exits"]),
            1,
            "exec {name}: one task ended: {r}"
        );
        let procs = r["processes"].as_array().unwrap();
        assert_eq!(procs.len(), 1, "exec {name}: one process: {r}");
        assert_eq!(
            u(&procs[0]["pid"]),
            *pid as u64,
            "exec {name} holds its own process"
        );
        assert_eq!(procs[0]["comm"], "busy");
        // Its CPU time is at least what its own cgroup had when the test reaped it (the
        // reaped task still runs to its last context switch, which charges its last slice: a
        // host that deschedules the vCPU there stretches that slice, seen at 20 ms under TCG).
        // Together with the total below, no exec holds a neighbour's time.
        assert!(
            oncpu + 1000 >= *usage_ns,
            "exec {name}: {oncpu} ns vs cpu.stat {usage_ns} ns at reaping"
        );
        worst = worst.max((oncpu - usage_ns.min(&oncpu)) as f64 / *usage_ns as f64);
    }
    // Every task's last slice has been charged now (the profiler saw each last switch): the
    // execs' on-CPU times add up to their parent's usage.
    let parent = cpu_usage_usec(&cg.path) * 1000 - parent_before;
    let err = report(
        "churn: sum of on-CPU vs parent cpu.stat",
        total as f64,
        parent as f64,
    );
    assert!(
        err <= 0.001 || total.abs_diff(parent) <= 1_000_000,
        "sum {total} ns vs parent {parent} ns"
    );
    eprintln!(
        "MEASURED churn: {} of {n} execs reported; each at least its cpu.stat at reaping, the \
         largest excess (its last slice) {:.3}%",
        seen.len(),
        worst * 100.0
    );
    assert_eq!(seen.len(), n, "every exec is reported");
    assert_eq!(
        all.iter().filter(|r| r["state"] == "ended").count(),
        n,
        "nothing reported twice"
    );
}

/// Test 6: an exec running 50 short commands lists each of them, and a subshell that calls no
/// execve under its parent's command line.
#[test]
fn per_process_breakdown_lists_short_commands() {
    let cg = TestCgroup::new("procs");
    let p = Attached::start(&cg, &[]);
    let e = cg.child("job");
    // No command substitution: busybox ash (the VM guests' sh) runs an applet such as `seq`
    // in a forked child without execve, which would rightly take the shell's command line too.
    let script = "i=0; while [ $i -lt 50 ]; do i=$((i+1)); /bin/echo cmd-$i >/dev/null; done; \
                  (x=0; while [ $x -lt 2000 ]; do x=$((x+1)); done); true";
    run_in(&e, &["sh", "-c", script]);
    let id = cgroup_id(&e);
    rmdir(&e);
    let rec = p.wait_ended(id, secs(30));
    let procs = rec["processes"].as_array().unwrap();
    for i in 1..=50 {
        let want = format!("/bin/echo cmd-{i}");
        let n = procs.iter().filter(|p| p["args"] == want.as_str()).count();
        assert_eq!(n, 1, "process `{want}` listed once: {procs:?}");
    }
    // The shell and its subshell (a fork without execve) share the shell's command line.
    let shell: Vec<_> = procs
        .iter()
        .filter(|p| {
            p["args"]
                .as_str()
                .is_some_and(|a| a.starts_with("sh -c i=0;"))
        })
        .collect();
    assert_eq!(shell.len(), 2, "the shell and its subshell: {procs:?}");
    assert_ne!(shell[0]["pid"], shell[1]["pid"]);
    // Exactly: sh's own execve (it was moved in before it) and the 50 echos; the 50 echos'
    // forks and the subshell's (`true` is a builtin).
    assert_eq!(u(&rec["tasks"]["execve"]), 51, "{rec}");
    assert_eq!(u(&rec["tasks"]["processes_started"]), 51, "{rec}");
    assert!(
        procs
            .iter()
            .all(|p| u(&p["on_cpu_ns"]) > 0 && p["ended"] == true)
    );
    p.stop();
}

/// Test 7: `profiler run` exits with the command's code and prints a report.
#[test]
fn run_reports_and_keeps_the_exit_code() {
    require_root();
    // `profiler run` makes its cgroups under <v2>/profiler, created when missing: removed
    // afterwards (also on failure) when this test created it.
    struct RemoveIfNew(std::path::PathBuf, bool);
    impl Drop for RemoveIfNew {
        fn drop(&mut self) {
            if !self.1 {
                let _ = fs::remove_dir(&self.0);
            }
        }
    }
    let run_parent = v2_mount().join("profiler");
    let _cleanup = RemoveIfNew(run_parent.clone(), run_parent.exists());
    let out = Command::new(profiler_bin())
        .args(["run", "--", "sh", "-c", "exit 3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("exited with code 3"), "{err}");
    assert!(
        err.contains("sh -c exit 3"),
        "the process table lists the command: {err}"
    );

    let out = Command::new(profiler_bin())
        .args([
            "run",
            "--output",
            "json",
            "--",
            "sh",
            "-c",
            "dd if=/dev/zero of=/dev/null bs=1k count=100 status=none; exit 5",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5));
    let rec: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rec["state"], "ended");
    // The record's outcome is the command's; dd's own is its.
    assert_eq!(rec["exit"]["code"], 5, "{rec}");
    let procs = rec["processes"].as_array().unwrap();
    let exit_of = |comm: &str| &procs.iter().find(|p| p["comm"] == comm).unwrap()["exit"];
    assert_eq!(exit_of("sh")["code"], 5, "{rec}");
    assert_eq!(exit_of("dd")["code"], 0, "{rec}");
    assert_eq!(
        u(&rec["exit"]["pid"]),
        u(&procs.iter().find(|p| p["comm"] == "sh").unwrap()["pid"])
    );
    assert!(u(&rec["cpu"]["on_cpu_ns"]) > 0);
    assert_eq!(
        u(&rec["tasks"]["processes_started"]),
        2,
        "sh (started in the cgroup) and dd"
    );
    assert_eq!(
        u(&rec["io"]["write_bytes"]),
        100 * 1024,
        "dd wrote 100 KiB to /dev/null, and nothing else wrote: {rec}"
    );
    let leftovers: Vec<_> = fs::read_dir(&run_parent)
        .map(|d| d.flatten().filter(|e| e.path().is_dir()).collect())
        .unwrap_or_default();
    assert!(
        leftovers.is_empty(),
        "run removes its cgroup: {leftovers:?}"
    );

    let out = Command::new(profiler_bin())
        .args(["run", "--", "/nonexistent/command"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
}

/// Test 7b: how each process ended and its peak memory, exact for processes of a millisecond:
/// the exec's `exit` and each process's `exit` and `max_rss_bytes` against the status and the
/// rusage that wait4 gave the test for the same process.
#[test]
fn exit_status_and_peak_memory_match_wait4() {
    let cg = TestCgroup::new("exit");
    let p = Attached::start(&cg, &[]);
    let cases: [(&str, &[&str]); 4] = [
        ("exit-3", &["sh", "-c", "exit 3"]),
        ("sigterm", &["sh", "-c", "kill -TERM $$"]),
        ("true", &["true"]),
        // 64 MiB touched: a peak well above the program's own.
        (
            "alloc",
            &[
                "dd",
                "if=/dev/zero",
                "of=/dev/null",
                "bs=64M",
                "count=1",
                "status=none",
            ],
        ),
    ];
    for (name, argv) in cases {
        let dir = cg.child(name);
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let child = profiler::spawn::spawn_in_cgroup(&dir, &argv).unwrap();
        let (status, rusage) = wait4(child.pid);
        let id = cgroup_id(&dir);
        rmdir(&dir);
        let rec = p.wait_ended(id, secs(30));
        let exit = &rec["exit"];
        assert_eq!(u(&exit["pid"]), child.pid as u64, "{name}: {rec}");
        if libc::WIFEXITED(status) {
            assert_eq!(exit["code"], libc::WEXITSTATUS(status), "{name}: {rec}");
            assert!(exit.get("signal").is_none(), "{name}: {rec}");
        } else {
            assert!(libc::WIFSIGNALED(status), "{name}: status {status:#x}");
            let sig = nix::sys::signal::Signal::try_from(libc::WTERMSIG(status)).unwrap();
            assert_eq!(exit["signal"], sig.as_str(), "{name}: {rec}");
            assert!(exit.get("code").is_none(), "{name}: {rec}");
        }
        let procs = rec["processes"].as_array().unwrap();
        let proc = procs
            .iter()
            .find(|q| u(&q["pid"]) == child.pid as u64)
            .unwrap_or_else(|| panic!("{name}: pid {} not listed: {rec}", child.pid));
        let mut own = exit.clone();
        own.as_object_mut().unwrap().remove("pid");
        assert_eq!(
            proc["exit"], own,
            "{name}: the process's exit is the exec's"
        );
        // ru_maxrss is in KiB.
        assert_eq!(
            u(&proc["max_rss_bytes"]),
            rusage.ru_maxrss as u64 * 1024,
            "{name}: peak RSS vs wait4's ru_maxrss: {rec}"
        );
        eprintln!(
            "MEASURED exit of {name}: {} in {} ns of wall, peak RSS {} KiB",
            exit,
            u(&rec["wall_ns"]),
            rusage.ru_maxrss
        );
    }
    let (code, _, _) = p.stop();
    assert_eq!(code, 0);
}

/// A named cgroup v1 hierarchy mounted for the test, unmounted on drop.
struct V1Mount(std::path::PathBuf);

impl Drop for V1Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = fs::remove_dir(&self.0);
    }
}

/// Test 8: each bad input gives one clear line and a non-zero exit.
#[test]
fn bad_inputs_give_one_clear_line() {
    require_root();
    let (code, err) = fails(&["attach", "--cgroup", "/profiler-test-no-such-cgroup"]);
    assert_eq!(code, 1);
    assert!(err.contains("does not exist"), "{err}");

    let v1 = V1Mount(std::env::temp_dir().join(format!("profiler-test-v1-{}", std::process::id())));
    fs::create_dir_all(&v1.0).unwrap();
    let name = format!("none,name=proftest{}", std::process::id());
    let st = Command::new("mount")
        .args(["-t", "cgroup", "-o", &name, "cgroup"])
        .arg(&v1.0)
        .status()
        .unwrap();
    assert!(st.success(), "mount a named cgroup v1 hierarchy");
    let (code, err) = fails(&["attach", "--cgroup", v1.0.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        err.contains("cgroup v1") && err.contains("cgroup v2"),
        "{err}"
    );
    drop(v1);

    let cg = TestCgroup::new("bad");
    let (_, err) = fails(&[
        "attach",
        "--cgroup",
        &cg.arg(),
        "--btf",
        "/nonexistent/vmlinux",
    ]);
    assert!(
        err.contains("BTF") && err.contains("CONFIG_DEBUG_INFO_BTF"),
        "{err}"
    );

    // A kernel without the cgroup_mkdir tracepoint: its BTF lacks btf_trace_cgroup_mkdir.
    let btf = fs::read("/sys/kernel/btf/vmlinux").unwrap();
    let needle = b"btf_trace_cgroup_mkdir\0";
    let pos = btf
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("tracepoint in BTF");
    let mut patched = btf.clone();
    patched[pos + needle.len() - 4] = b'X';
    let path = std::env::temp_dir().join(format!("profiler-test-btf-{}", std::process::id()));
    fs::write(&path, &patched).unwrap();
    let (code, err) = fails(&[
        "attach",
        "--cgroup",
        &cg.arg(),
        "--btf",
        path.to_str().unwrap(),
    ]);
    let _ = fs::remove_file(&path);
    assert_eq!(code, 1);
    assert!(err.contains("lacks the tracepoint cgroup_mkdir"), "{err}");

    // Not root: run as nobody, from a copy of the binary anyone may execute.
    let bin = std::env::temp_dir().join(format!("profiler-test-bin-{}", std::process::id()));
    fs::copy(profiler_bin(), &bin).unwrap();
    let out = as_nobody(Command::new(&bin).args(["attach", "--cgroup", &cg.arg()]))
        .output()
        .unwrap();
    let _ = fs::remove_file(&bin);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("needs root privileges"), "{err}");

    let (code, err) = fails(&["attach", "--cgroup", &cg.arg(), "--exec-depth", "deep"]);
    assert_eq!(code, 2);
    assert!(err.contains("--exec-depth"), "{err}");
    let (code, err) = fails(&[
        "attach",
        "--cgroup",
        &cg.arg(),
        "--live",
        "--interval",
        "often",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("--interval"), "{err}");
    let (code, _) = fails(&["attach", "--cgroup", &cg.arg(), "--no-such-flag"]);
    assert_eq!(code, 2);
    let (code, _) = fails(&["run"]);
    assert_eq!(code, 2);
}

/// An exec already running at attach is reported from then on, and marked partial.
#[test]
fn exec_running_at_attach_is_partial_and_counted_from_attach() {
    let cg = TestCgroup::new("partial");
    let e = cg.child("job");
    let mut hog = spawn_in(&e, &[&busy(), "600000000"]);
    // By the hog's own CPU time, not wall time (under load, wall time may be no CPU at all).
    let cpu = |hog: &std::process::Child| schedstat(hog.id()).0;
    while cpu(&hog) < 200_000_000 {
        thread::sleep(Duration::from_millis(10));
    }
    let before = cpu(&hog);
    let p = Attached::start(&cg, &[]);
    let attached = cpu(&hog);
    while cpu(&hog) < attached + 300_000_000 {
        thread::sleep(Duration::from_millis(10));
    }
    let (last, _) = kill_for_final_schedstat(&mut hog);
    let id = cgroup_id(&e);
    rmdir(&e);
    let rec = p.wait_ended(id, secs(30));
    assert_eq!(rec["partial"], true);
    let oncpu = u(&rec["cpu"]["on_cpu_ns"]);
    // Counted from attach (its baseline is taken while it attaches): at most what ran after
    // `before`, at least what ran after it attached, less a tick (the running task's figure
    // at the baseline lags /proc by the slice in progress), plus 1 ms for the last switch.
    assert!(
        oncpu <= last - before + 1_000_000,
        "on-CPU {oncpu} ns includes time before attach ({before}..{last})"
    );
    assert!(
        oncpu + 10_000_000 >= last - attached,
        "on-CPU {oncpu} ns misses time after attach ({attached}..{last})"
    );
    p.stop();
}

/// SIGINT flushes: a running exec is reported with its figures so far, exit 0.
#[test]
fn sigint_reports_running_execs_and_exits_zero() {
    for (signal, name) in [(libc::SIGINT, "sigint"), (libc::SIGTERM, "sigterm")] {
        let cg = TestCgroup::new(name);
        let p = Attached::start(&cg, &[]);
        let e = cg.child("job");
        let mut hog = spawn_in(&e, &[&busy(), "600000000"]);
        let pid = hog.id();
        let on_cpu = || schedstat(pid).0;
        // Until it has run a while by its own count (no wall-time sleep: under load, that
        // might be no CPU time at all).
        while on_cpu() < 50_000_000 {
            thread::sleep(Duration::from_millis(10));
        }
        let before = on_cpu();
        let (code, recs, _) = p.stop_with(signal);
        let after = on_cpu();
        hog.kill().unwrap();
        hog.wait().unwrap();
        assert_eq!(code, 0, "{name}");
        let id = cgroup_id(&e);
        let rec = recs
            .iter()
            .find(|r| u(&r["cgroup_id"]) == id)
            .unwrap_or_else(|| panic!("{name}: the running exec is reported"));
        assert_eq!(rec["state"], "running");
        // Read at the signal: between the hog's own figures before and after it, less a tick
        // (10 ms at HZ=100, stretched under emulation, where a 6.1 guest was seen 20 ms
        // behind) before: a running task's sum_exec_runtime is brought up to date at ticks
        // and switches, where /proc adds the slice in progress.
        let got = u(&rec["cpu"]["on_cpu_ns"]);
        assert!(
            (before.saturating_sub(stretched_ns(10_000_000))..=after).contains(&got),
            "{name}: on-CPU {got}, the hog's {before}..{after}: {rec}"
        );
        assert_eq!(u(&rec["live_tasks"]), 1);
    }
}

/// --exec-depth 2: cgroups two levels down are execs, deeper ones roll up into them, and
/// processes in between count as their own cgroup's exec.
#[test]
fn exec_depth_rolls_descendants_up() {
    let cg = TestCgroup::new("depth");
    let p = Attached::start(&cg, &["--exec-depth", "2"]);
    let job = cg.child("ci/job");
    let step = job.join("step");
    fs::create_dir(&step).unwrap();
    run_in(&step, &[&busy(), "200000"]);
    run_in(&job, &[&busy(), "100000"]);
    rmdir(&step);
    let id = cgroup_id(&job);
    rmdir(&job);
    let rec = p.wait_ended(id, secs(30));
    // The job was alone in ci: ci's usage, once the profiler has seen the job's last task
    // switch out for the last time, is the job's whole usage.
    let truth = cpu_usage_usec(&cg.path.join("ci")) * 1000;
    assert_eq!(rec["exec"], "ci/job");
    let oncpu = u(&rec["cpu"]["on_cpu_ns"]);
    report(
        "rolled-up on-CPU ns vs cpu.stat",
        oncpu as f64,
        truth as f64,
    );
    assert!(
        rel_err(oncpu as f64, truth as f64) < 0.02,
        "{oncpu} vs {truth}"
    );
    assert_eq!(u(&rec["tasks"]["task_exits"]), 2);
    let (_, recs, _) = p.stop();
    assert!(
        !recs.iter().any(|r| r["exec"] == "ci/job/step"),
        "step rolls up into ci/job"
    );
}

/// Processes directly in the watched cgroup are its `.` exec, and those in a cgroup above
/// --exec-depth are that cgroup's own exec, beside the execs below it: each process counted
/// once, in its own cgroup's exec, its on-CPU time that of /proc/PID/schedstat.
#[test]
fn processes_above_exec_depth_are_their_cgroups_execs() {
    let cg = TestCgroup::new("above");
    // No controllers delegated to it: a cgroup that may hold processes and children (pure
    // cgroup v2 forbids both where controllers are enabled below).
    let top = cg.child("flat");
    let p = Attached::start_with(
        &[
            "--cgroup".into(),
            top.display().to_string(),
            "--exec-depth".into(),
            "2".into(),
        ],
        &[],
    );
    let mid = top.join("ci");
    let step = mid.join("step");
    fs::create_dir_all(&step).unwrap();
    // Run `busy` born in `dir`; its on-CPU time from /proc once it has exited.
    let run = |dir: &std::path::Path, us: &str| -> (i32, u64) {
        let argv = vec![busy(), us.to_owned()];
        let child = profiler::spawn::spawn_in_cgroup(dir, &argv).unwrap();
        while !exited(child.pid) {
            thread::sleep(Duration::from_millis(1));
        }
        let on_cpu = settled_schedstat(child.pid).0;
        wait4(child.pid);
        (child.pid, on_cpu)
    };
    let in_top = run(&top, "50000");
    let in_mid = run(&mid, "50000");
    let in_step = run(&step, "50000");
    let step_id = cgroup_id(&step);
    rmdir(&step);
    let mid_id = cgroup_id(&mid);
    rmdir(&mid);
    p.wait_ended(step_id, secs(30));
    p.wait_ended(mid_id, secs(30));
    let (code, recs, _) = p.stop();
    assert_eq!(code, 0);
    for (exec, (pid, on_cpu)) in [(".", in_top), ("ci", in_mid), ("ci/step", in_step)] {
        let mine: Vec<&Value> = recs
            .iter()
            .filter(|r| {
                r["processes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|q| u(&q["pid"]) == pid as u64)
            })
            .collect();
        let execs: HashSet<&str> = mine.iter().filter_map(|r| r["exec"].as_str()).collect();
        assert_eq!(
            execs,
            HashSet::from([exec]),
            "pid {pid} is in exec {exec} only: {mine:?}"
        );
        let rec = mine.last().unwrap();
        let q = rec["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|q| u(&q["pid"]) == pid as u64)
            .unwrap();
        assert_eq!(u(&q["on_cpu_ns"]), on_cpu, "{exec}: {rec}");
        assert_eq!(
            u(&rec["cpu"]["on_cpu_ns"]),
            on_cpu,
            "{exec}: the exec is its process: {rec}"
        );
    }
}

/// --live with JSON output: running execs are reported every interval with growing figures.
#[test]
fn live_json_reports_running_execs() {
    let cg = TestCgroup::new("live");
    let p = Attached::start(&cg, &["--live", "--interval", "200ms"]);
    let e = cg.child("job");
    let id = cgroup_id(&e);
    let mut hog = spawn_in(&e, &[&busy(), "600000000"]);
    let running = |p: &Attached| {
        p.records()
            .iter()
            .filter(|r| u(&r["cgroup_id"]) == id && r["state"] == "running")
            .count()
    };
    // Until three running records came, and the hog ran 300 ms by its own count.
    let deadline = std::time::Instant::now() + secs(30);
    while running(&p) < 3 || schedstat(hog.id()).0 < 300_000_000 {
        assert!(std::time::Instant::now() < deadline, "no running records");
        thread::sleep(Duration::from_millis(20));
    }
    let (last, _) = kill_for_final_schedstat(&mut hog);
    rmdir(&e);
    let ended = p.wait_ended(id, secs(30));
    let (_, recs, _) = p.stop();
    let live: Vec<u64> = recs
        .iter()
        .filter(|r| u(&r["cgroup_id"]) == id && r["state"] == "running")
        .map(|r| u(&r["cpu"]["on_cpu_ns"]))
        .collect();
    assert!(
        live.windows(2).all(|w| w[0] <= w[1]),
        "CPU time grows: {live:?}"
    );
    let end = u(&ended["cpu"]["on_cpu_ns"]);
    assert!(end >= *live.last().unwrap(), "{live:?} then {end}");
    // The hog's whole life, less what it ran before its move into the exec (a fork's: 5 ms,
    // stretched under emulation, where a 6.1 guest was seen to take 13.7 ms).
    assert!(
        end <= last + 1_000_000 && end + stretched_ns(5_000_000) >= last,
        "ended with {end} ns, the hog's own {last} ns"
    );
}

/// Beyond --max-execs the profiler follows no more execs and says so; once execs end, their
/// slots serve new ones. Beyond --max-cgroups, the same for cgroups.
#[test]
fn full_tables_are_warned_and_recover() {
    // One exec beside the attached cgroup's own: two slots, the `.` exec and one more.
    let cg = TestCgroup::new("maxexecs");
    let p = Attached::start(&cg, &["--max-execs", "1"]);
    let dirs: Vec<_> = (0..4).map(|i| cg.child(&format!("e{i}"))).collect();
    let ids: Vec<u64> = dirs.iter().map(|d| cgroup_id(d)).collect();
    let mut kids: Vec<_> = dirs
        .iter()
        .map(|d| spawn_in(d, &["sleep", "0.3"]))
        .collect();
    for k in &mut kids {
        k.wait().unwrap();
    }
    for d in &dirs {
        rmdir(d);
    }
    let followed = p.wait_ended(ids[0], secs(30));
    assert!(u(&followed["cpu"]["on_cpu_ns"]) > 0, "{followed}");
    // Its slot is freed 2 s after its cgroups are forgotten (docs/cost.md, "Where the time goes"):
    // then a new exec is followed.
    let followed_again = (0..20).any(|i| {
        let again = cg.child(&format!("again-{i}"));
        let id = cgroup_id(&again);
        run_in(&again, &["true"]);
        rmdir(&again);
        thread::sleep(Duration::from_millis(500));
        p.records().iter().any(|r| u(&r["cgroup_id"]) == id)
    });
    assert!(
        followed_again,
        "no exec followed within 10 s of a slot's release"
    );
    let (code, recs, err) = p.stop();
    assert_eq!(code, 0);
    for id in &ids[1..] {
        assert!(
            !recs.iter().any(|r| u(&r["cgroup_id"]) == *id),
            "exec {id} was not followed, and has no record"
        );
    }
    assert!(
        err.iter()
            .any(|l| l.contains("exec table full: execs not followed (raise --max-execs)")),
        "{err:?}"
    );

    // --max-cgroups: the table holds twice as many; deeper cgroups roll up into their exec.
    let cg = TestCgroup::new("maxcgroups");
    let p = Attached::start(&cg, &["--max-cgroups", "2"]);
    let job = cg.child("job");
    let deep: Vec<_> = (0..4)
        .map(|i| {
            let d = job.join(format!("d{i}"));
            fs::create_dir(&d).unwrap();
            d
        })
        .collect();
    for d in deep.iter().rev() {
        rmdir(d);
    }
    let job_id = cgroup_id(&job);
    rmdir(&job);
    p.wait_ended(job_id, secs(30));
    let (code, _, err) = p.stop();
    assert_eq!(code, 0);
    assert!(
        err.iter()
            .any(|l| l.contains("cgroup table full: cgroups not followed (raise --max-cgroups)")),
        "{err:?}"
    );
}
