//! The exec records' cgroup section: pressure (PSI) and controller files merged with the eBPF
//! figures, with final values for execs that end between two samples. Root and BPF needed;
//! these run on this host (hybrid cgroups) and in the VMs (pure cgroup v2).

use std::{
    fs,
    path::Path,
    thread,
    time::{Duration, Instant},
};

use profiler_tests::*;

/// `some` (or `full`) total of a pressure file, in microseconds.
fn psi_total_us(dir: &Path, res: &str, kind: &str) -> u64 {
    let text = fs::read_to_string(dir.join(format!("{res}.pressure"))).unwrap();
    let line = text.lines().find(|l| l.starts_with(kind)).unwrap();
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("total="))
        .unwrap()
        .parse()
        .unwrap()
}

/// True on a pure cgroup v2 host where the exec cgroups get the memory and pids controllers.
fn controllers_on_v2(cg: &TestCgroup) -> bool {
    let s = fs::read_to_string(cg.path.join("cgroup.subtree_control")).unwrap_or_default();
    s.contains("memory") && s.contains("pids")
}

/// Test 1: an exec that stalls on IO (direct IO while another exec saturates the disk) shows
/// io.pressure `some` > 0, final, in its record.
#[test]
fn io_stall_shows_in_io_pressure() {
    let cg = TestCgroup::new("iopsi");
    let scratch = scratch_dir("iopsi");
    let p = Attached::start(&cg, &[]);
    let hog = cg.child("saturator");
    let victim = cg.child("victim");
    let big = format!("of={}", scratch.join("big").display());
    let mut h = spawn_in(
        &hog,
        &[
            "dd",
            "if=/dev/zero",
            &big,
            "bs=1M",
            "count=2048",
            "oflag=direct",
            "status=none",
        ],
    );
    thread::sleep(Duration::from_millis(300));
    let small = format!("of={}", scratch.join("small").display());
    run_in(
        &victim,
        &[
            "dd",
            "if=/dev/zero",
            &small,
            "bs=64k",
            "count=128",
            "oflag=direct",
            "status=none",
        ],
    );
    let truth_us = psi_total_us(&victim, "io", "some");
    let id = cgroup_id(&victim);
    rmdir(&victim);
    let rec = p.wait_ended(id, secs(60));
    h.kill().unwrap();
    h.wait().unwrap();
    let io = &rec["cgroup"]["io_pressure"];
    assert_eq!(io["when"], "final", "{io}");
    let got = f(&io["value"]["some"]["total_s"]);
    eprintln!(
        "MEASURED io.pressure some of the victim: {got} s (file before removal {truth_us} us)"
    );
    assert!(
        got > 0.0,
        "an exec waiting on a saturated disk has IO pressure: {io}"
    );
    assert!(
        got * 1e6 >= truth_us as f64,
        "the final total includes the last read: {got} s vs {truth_us} us"
    );
    let hid = cgroup_id(&hog);
    rmdir(&hog);
    p.wait_ended(hid, secs(60));
    p.stop();
    let _ = fs::remove_dir_all(&scratch);
}

/// Test 2: three execs, one CPU hog each, pinned to one CPU. An exec's cpu.pressure `some`
/// total is the wall time during which at least one of its tasks was runnable but waiting:
/// with one task, exactly that task's run-queue delay (with several, between the largest
/// delay of one task and their sum). Within 10% of the eBPF run-queue delay.
#[test]
fn cpu_pressure_matches_run_queue_delay() {
    let cg = TestCgroup::new("cpupsi");
    let p = Attached::start(&cg, &[]);
    let ids: Vec<u64> = pinned_hogs(&cg, 3, Duration::from_secs(3))
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    for id in ids {
        let rec = p.wait_ended(id, secs(60));
        let runq = u(&rec["cpu"]["runq_delay_ns"]) as f64 / 1e9;
        let cpu = &rec["cgroup"]["cpu_pressure"];
        assert_eq!(cpu["when"], "final", "{cpu}");
        let some = f(&cpu["value"]["some"]["total_s"]);
        let err = report(
            "cpu.pressure some vs eBPF run-queue delay",
            some * 1e9,
            runq * 1e9,
        );
        assert!(runq > 0.5, "three hogs on one CPU wait: {runq} s");
        assert!(err <= 0.10, "cpu some {some} s vs run-queue delay {runq} s");
    }
    p.stop();
}

/// Test 3: 200 execs of about 5 ms each, removed at once: every record has the final PSI
/// totals and cpu.stat usage, read by eBPF at removal.
///
/// Truth for half of them: their own files, read just before removal (the read aggregates
/// PSI, so the final values must then equal it to the microsecond). The other half are never
/// read: their cpu usage must match the exec's eBPF on-CPU time (within 5% + 200 us), and
/// their PSI the deltas of a parent made for each exec (PSI is hierarchical and nothing else
/// runs in it), to the microsecond: see the check for why the parent must be new.
#[test]
fn short_execs_get_final_pressure_and_cpu_usage() {
    let cg = TestCgroup::new("final");
    let scratch = scratch_dir("final");
    let v2 = controllers_on_v2(&cg);
    // Sample slower than the execs live: the profiler never reads their files. Each exec is
    // alone in a parent of its own: the execs are at depth 2.
    let p = Attached::start(&cg, &["--sample-interval", "60m", "--exec-depth", "2"]);
    let controllers = fs::read_to_string(cg.path.join("cgroup.subtree_control")).unwrap();
    let out = scratch.join("f");
    let n = 200;
    let mut truth = Vec::new();
    let shared = |res: &str| psi_total_us(&cg.path, res, "some");
    for i in 0..n {
        let dir = cg.child(&format!("p{i}"));
        for c in controllers.split_whitespace() {
            fs::write(dir.join("cgroup.subtree_control"), format!("+{c}")).unwrap();
        }
        let parent = |res: &str| psi_total_us(&dir, res, "some");
        let (usage0, io0, cpu0) = (cpu_usage_usec(&dir), parent("io"), parent("cpu"));
        let (sio0, scpu0) = (shared("io"), shared("cpu"));
        let t0 = Instant::now();
        let e = cg.child(&format!("p{i}/e{i}"));
        let id = cgroup_id(&e);
        // Born in the cgroup: a task moved in takes its baseline at the attach tracepoint,
        // which fires after the move, so a tick between the two charges the cgroup for time
        // the baseline already holds (up to 1.4 ms under emulation).
        direct_write_in(&e, &out, "64k", 2);
        // The reaped task may still be on its way to its last context switch, which charges
        // its last run: wait until the exec's CPU time stops growing (1 ms apart, after the
        // 10 ms that were enough alone so far).
        thread::sleep(secs(1) / 100);
        let mut last = cpu_usage_usec(&e);
        loop {
            thread::sleep(Duration::from_millis(1));
            let now = cpu_usage_usec(&e);
            if now == last {
                break;
            }
            last = now;
        }
        let own = (i % 2 == 0).then(|| {
            (
                cpu_usage_usec(&e),
                psi_total_us(&e, "io", "some"),
                psi_total_us(&e, "cpu", "some"),
            )
        });
        rmdir(&e);
        let (usage1, io1, cpu1) = (cpu_usage_usec(&dir), parent("io"), parent("cpu"));
        let span = t0.elapsed();
        let (sio1, scpu1) = (shared("io"), shared("cpu"));
        rmdir(&dir);
        truth.push((
            id,
            own,
            (usage1 - usage0, io1 - io0, cpu1 - cpu0),
            (sio1 - sio0, scpu1 - scpu0),
            span,
        ));
    }
    let (mut worst_own, mut worst_parent_psi, mut worst_usage) = (0f64, 0f64, 0u64);
    let mut worst_shared = 0f64;
    let clock = sched_clock_source();
    for (id, own, (usage_us, io_us, cpu_us), (shared_io, shared_cpu), span) in truth {
        let rec = p.wait_ended(id, secs(60));
        let c = &rec["cgroup"];
        for name in ["cpu_usage_usec", "io_pressure", "cpu_pressure"] {
            assert_eq!(c[name]["when"], "final", "{name}: {c}");
        }
        if v2 {
            for name in ["memory_peak_bytes", "memory_events", "pids_peak"] {
                assert_eq!(c[name]["when"], "final", "{name}: {c}");
            }
            assert!(u(&c["pids_peak"]["value"]) >= 1);
        }
        let usage = u(&c["cpu_usage_usec"]["value"]);
        let io = f(&c["io_pressure"]["value"]["some"]["total_s"]) * 1e6;
        let cpu = f(&c["cpu_pressure"]["value"]["some"]["total_s"]) * 1e6;
        // The same time as the exec's tasks' own on-CPU time, summed by eBPF at their last
        // context switch.
        let oncpu_us = u(&rec["cpu"]["on_cpu_ns"]) / 1000;
        assert!(
            usage.abs_diff(oncpu_us) as f64 <= 0.05 * oncpu_us as f64 + 200.0,
            "cpu usage {usage} us vs eBPF on-CPU {oncpu_us} us: {rec}"
        );
        // And the parent's cpu.stat grew by it (its only child; read after the exec's task
        // settled, 10 ms after it was reaped): 2% and 20 us for rounding to microseconds.
        assert!(
            usage.abs_diff(usage_us) <= 20 + usage_us / 50,
            "cpu usage {usage} us vs the parent's delta {usage_us} us: {rec}"
        );
        worst_usage = worst_usage.max(usage.abs_diff(usage_us));
        match own {
            Some((own_usage, own_io, own_cpu)) => {
                assert!(
                    usage.abs_diff(own_usage) <= 2,
                    "cpu usage {usage} vs own file {own_usage}: {rec}"
                );
                for (got, want, what) in [(io, own_io, "io"), (cpu, own_cpu, "cpu")] {
                    assert!(
                        (got - want as f64).abs() <= 2.0,
                        "{what} some {got} us vs own file {want} us: {rec}"
                    );
                    worst_own = worst_own.max((got - want as f64).abs());
                }
            }
            None => {
                // PSI adds, at each aggregation, each CPU's stall since the last one weighted
                // by that CPU's non-idle time in whole jiffies (collect_percpu_times): a
                // group's total depends on when it aggregates, and a span of less than a
                // jiffy of non-idle time adds nothing. A group aggregates when its files are
                // read and in its periodic work, which starts 2 s after the group's first
                // task change. The new parent is read before and after the exec only, its
                // work never runs in between: it aggregates the very per-CPU times the
                // exec's replay at removal does, in one span. A parent shared by all the
                // execs has its work cut the spans: printed, not checked (issue 33: 2.3 ms
                // apart on a 6.1 guest, 135 us against 0 on 6.12).
                assert!(
                    span < secs(2),
                    "the parent's periodic work may have run: {span:?}"
                );
                for (got, want, what, whole) in [
                    (io, io_us, "io", shared_io),
                    (cpu, cpu_us, "cpu", shared_cpu),
                ] {
                    // Where the kernel distrusts the TSC (the 6.1 guest: HPET), the two
                    // stay apart, either way, for a cause not found yet (issue 33; not
                    // CONFIG_HZ, measured 250 there): seen up to 142 us (4.2%).
                    let d = (got - want as f64).abs();
                    let bound = if clock.trusted {
                        2.0
                    } else {
                        2000.0 + 0.1 * want as f64
                    };
                    assert!(
                        d <= bound,
                        "{what} some {got} us vs the parent's {want} us (within {bound} us): {rec}"
                    );
                    worst_parent_psi = worst_parent_psi.max(d);
                    worst_shared = worst_shared.max((got - whole as f64).abs());
                }
            }
        }
    }
    eprintln!(
        "MEASURED final figures of {n} short execs: cpu usage vs parent's delta within {worst_usage} us; \
         PSI vs own file (read before removal) within {worst_own:.1} us; PSI vs parent (never read) within {worst_parent_psi:.1} us, \
         vs the parent shared by all within {worst_shared:.1} us (clocksource {})",
        clock.name
    );
    p.stop();
    let _ = fs::remove_dir_all(&scratch);
}

/// Test 4: files a host lacks are flagged with the reason, never reported as zero; where the
/// host has them (pure v2), they carry values and their source.
#[test]
fn missing_files_are_flagged_not_zero() {
    let cg = TestCgroup::new("missing");
    let p = Attached::start(&cg, &[]);
    let e = cg.child("job");
    let mut hog = spawn_in(&e, &[&busy(), "600000000"]);
    thread::sleep(Duration::from_millis(1500));
    hog.kill().unwrap();
    hog.wait().unwrap();
    let id = cgroup_id(&e);
    rmdir(&e);
    let rec = p.wait_ended(id, secs(60));
    let c = &rec["cgroup"];
    let v2 = controllers_on_v2(&cg);
    for name in [
        "io_stat",
        "memory_current_bytes",
        "memory_stat",
        "pids_current",
    ] {
        let x = &c[name];
        if v2 {
            assert!(
                x["value"].is_object() || x["value"].is_u64(),
                "{name} has a value on pure v2: {x}"
            );
            assert!(
                x["source"].as_str().unwrap().starts_with("cgroup v2"),
                "{x}"
            );
        } else {
            assert!(
                x.get("value").is_none(),
                "{name}: no value, not a zero: {x}"
            );
            let why = x["missing"]
                .as_str()
                .unwrap_or_else(|| panic!("{name} says why it is missing: {x}"));
            assert!(why.contains("controller"), "{name}: {why}");
        }
    }
    // cpu.stat is there on both: sampled, and its usage final from the removal.
    assert!(u(&c["cpu_stat"]["value"]["usage_usec"]) > 0, "{c}");
    assert_eq!(c["cpu_usage_usec"]["when"], "final", "{c}");
    assert!(u(&c["cpu_usage_usec"]["value"]) > 1_000_000, "{c}");
    p.stop();
}

/// Test: a step that allocates past its memory.max is killed by the OOM killer, and its record
/// says so: its outcome SIGKILL with `oom_killed`, its memory.events counting the kill, and the
/// victim's peak RSS under the limit; against the status wait4 gave and the cgroup's own
/// memory.events. On a hybrid host (memory controller on v1) nothing is killed, and the record
/// says why memory.events is missing: the VM matrix runs the OOM case.
#[test]
fn an_oom_killed_step_names_its_victim() {
    let cg = TestCgroup::new("oom");
    let v2 = controllers_on_v2(&cg);
    let p = Attached::start(&cg, &[]);
    let dir = cg.child("step");
    const LIMIT: u64 = 32 * 1024 * 1024;
    if v2 {
        fs::write(dir.join("memory.max"), LIMIT.to_string()).unwrap();
        if dir.join("memory.swap.max").exists() {
            fs::write(dir.join("memory.swap.max"), "0").unwrap();
        }
    }
    // A 64 MiB buffer, filled: twice the limit.
    let argv: Vec<String> = [
        "dd",
        "if=/dev/zero",
        "of=/dev/null",
        "bs=64M",
        "count=1",
        "status=none",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let child = profiler::spawn::spawn_in_cgroup(&dir, &argv).unwrap();
    let (status, rusage) = wait4(child.pid);
    let events = fs::read_to_string(dir.join("memory.events")).unwrap_or_default();
    let id = cgroup_id(&dir);
    rmdir(&dir);
    let rec = p.wait_ended(id, secs(30));
    let exit = &rec["exit"];
    let dd = rec["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| u(&q["pid"]) == child.pid as u64)
        .unwrap_or_else(|| panic!("dd is listed: {rec}"))
        .clone();
    assert_eq!(
        u(&dd["max_rss_bytes"]),
        rusage.ru_maxrss as u64 * 1024,
        "{rec}"
    );
    if v2 {
        assert!(
            libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL,
            "dd past memory.max is killed: status {status:#x}"
        );
        assert_eq!(exit["signal"], "SIGKILL", "{rec}");
        assert_eq!(exit["oom_killed"], true, "{rec}");
        assert_eq!(dd["exit"]["oom_killed"], true, "{rec}");
        let truth = events
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .expect("memory.events has oom_kill");
        assert_eq!(truth, 1, "{events}");
        let got = &rec["cgroup"]["memory_events"];
        assert_eq!(got["value"]["oom_kill"], truth, "{got}");
        // Killed before its 64 MiB buffer was all resident (RSS also counts file pages that
        // are charged elsewhere: seen 34.6 MB against the 32 MiB limit).
        assert!(u(&dd["max_rss_bytes"]) < 64 * 1024 * 1024, "{rec}");
        eprintln!(
            "MEASURED OOM kill: {exit}, peak RSS {} of a {LIMIT} limit, memory.events {}",
            u(&dd["max_rss_bytes"]),
            got["value"]
        );
    } else {
        assert_eq!(status, 0, "no limit on a hybrid host: dd succeeds");
        assert_eq!(exit["code"], 0, "{rec}");
        assert!(exit.get("oom_killed").is_none(), "{rec}");
        let missing = rec["cgroup"]["memory_events"]["missing"]
            .as_str()
            .unwrap_or_else(|| panic!("memory.events is said missing: {rec}"));
        assert!(missing.contains("memory controller"), "{missing}");
        eprintln!(
            "MEASURED hybrid host: memory.events missing ({missing}); the VM matrix runs the OOM case"
        );
    }
    let (code, _, _) = p.stop();
    assert_eq!(code, 0);
}

/// Removes a cgroup at the root on drop (also when the test fails first).
struct RootCgroup(std::path::PathBuf);

impl Drop for RootCgroup {
    fn drop(&mut self) {
        if self.0.exists() {
            remove_tree(&self.0);
        }
    }
}

/// Test 6: execs picked by name at the cgroup root (`--runtime buildah`: its RUN steps are
/// `/buildah-buildah<N>`, beside everything else): one there before the attach and one made
/// after are execs with exact figures (a 2 MiB direct write), a cgroup beside them is not
/// watched, and the root is no exec. No buildah needed: the kernel programs pick the names.
#[test]
fn execs_picked_by_name_at_the_root_are_exact_and_their_siblings_unwatched() {
    require_root();
    let pid = std::process::id();
    let root = v2_mount();
    let step = |n: u32| RootCgroup(root.join(format!("buildah-buildah{pid}{n}")));
    let (before, after) = (step(1), step(2));
    fs::create_dir(&before.0).unwrap();
    let mut sleeper = spawn_in(&before.0, &["sleep", "30"]);
    // buildah's storage, as --runtime buildah checks it (an empty one will do).
    let storage = scratch_dir("named-storage");
    let p = Attached::start_with(
        &[
            "--runtime".into(),
            "buildah".into(),
            "--runtime-root".into(),
            storage.display().to_string(),
        ],
        &[],
    );
    let beside = TestCgroup::new("named-beside");
    let scratch = scratch_dir("named");
    direct_write_in(&beside.child("x"), &scratch.join("beside"), "64k", 16);
    fs::create_dir(&after.0).unwrap();
    direct_write_in(&after.0, &scratch.join("after"), "64k", 32);
    let id = cgroup_id(&after.0);
    rmdir(&after.0);
    let rec = p.wait_ended(id, secs(30));
    assert_eq!(
        rec["exec"],
        format!("buildah-buildah{pid}2"),
        "its path from the root: {rec}"
    );
    assert_eq!(u(&rec["disk"]["write_bytes"]), 2 << 20, "{rec}");
    assert_eq!(
        rec["command"],
        format!(
            "dd if=/dev/zero of={} bs=64k count=32 oflag=direct status=none",
            scratch.join("after").display()
        )
    );
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let id = cgroup_id(&before.0);
    rmdir(&before.0);
    let rec = p.wait_ended(id, secs(30));
    assert_eq!(rec["partial"], true, "there before the attach: {rec}");
    let (code, all, _) = p.stop();
    assert_eq!(code, 0);
    let execs: Vec<&str> = all.iter().filter_map(|r| r["exec"].as_str()).collect();
    assert!(
        execs.iter().all(|e| e.starts_with("buildah-buildah")),
        "only the named execs, not the root or the cgroup beside: {execs:?}"
    );
    eprintln!(
        "MEASURED named execs: {} records, all buildah-buildah*, 2097152 B written exactly",
        all.len()
    );
    let _ = fs::remove_dir_all(&scratch);
    let _ = fs::remove_dir_all(&storage);
}
