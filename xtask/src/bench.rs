//! `cargo xtask bench`: what the profiler costs, measured, never asserted.
//!
//! 1. The standard workload of xtask/bench (the project's shared harness: 2 direct-IO dd loops,
//!    200 short processes a second, sleepers and a pipe ping-pong, 8 MiB/s loopback TCP) runs
//!    alone, under the bpftrace floor (bench/baseline.bt: block_rq_issue bytes and sched_switch
//!    counts per cgroup) and under `profiler attach`, one phase after the other, each with the
//!    kernel's BPF statistics on. Printed: each program's runs and ns per run, the block
//!    programs' time per disk request, the total BPF CPU against the floor's, the userspace
//!    CPU and RSS of each peer.
//! 2. Resident memory of `profiler attach`: idle; with N live execs (one sleeping process each)
//!    and OTLP export to a local rotel collector; over M execs created and ended (RSS after a
//!    tenth of them, the warm-up, and at the end).
//!
//!
//! With `--against OTHER`, only a comparison of two builds' kernel programs in the same runs
//! (see `compare`): run-to-run spread on this machine kind is up to a third, the difference
//! between two builds in one run far less.
//!
//! Run it alone on the machine: other programs' BPF and CPU use end up in the figures.

use std::{
    collections::BTreeMap,
    fs,
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use crate::{
    build, ensure_backends, ensure_debian_packages, interrupt, is_root, root, run, v2_mount,
};

pub struct Options {
    pub seconds: u32,
    pub live: u32,
    pub churn: u32,
    pub profiler: Option<PathBuf>,
    pub against: Option<PathBuf>,
}

pub fn bench(o: Options) -> Result<()> {
    if !is_root() {
        bail!("the benchmark loads eBPF programs: run `cargo xtask bench` as root");
    }
    // The floor and the statistics come from Debian's bpftrace and bpftool; the harness is
    // bash, awk, bc and python3.
    ensure_debian_packages(&[
        ("bpftrace", "bpftrace"),
        ("bpftool", "bpftool"),
        ("python3", "python3"),
        ("bc", "bc"),
    ])?;
    let (rotel, _) = ensure_backends()?;
    let bin = match o.profiler {
        Some(p) => {
            fs::canonicalize(&p).with_context(|| format!("no profiler at {}", p.display()))?
        }
        None => build(true)?,
    };
    let out = root().join("target/bench");
    let _ = fs::remove_dir_all(&out);
    fs::create_dir_all(&out)?;
    if let Some(other) = o.against {
        let other = fs::canonicalize(&other)
            .with_context(|| format!("no profiler at {}", other.display()))?;
        let report = compare(&bin, &other, o.seconds)?;
        println!("\n{report}");
        fs::write(out.join("compare.txt"), &report)?;
        return Ok(());
    }

    let sbs = out.join("sbs");
    run(Command::new("bash")
        .arg(root().join("xtask/bench/side_by_side.sh"))
        .arg(&bin)
        .arg(&sbs)
        .arg(o.seconds.to_string()))?;
    let report = side_by_side_report(&sbs)?;

    let base = v2_mount()?.join(format!("profiler-bench-{}", std::process::id()));
    fs::create_dir_all(&base)?;
    let scratch = out.join("scratch");
    fs::create_dir_all(&scratch)?;
    let mem = (|| -> Result<String> {
        let mut s = String::new();
        let idle = rss_idle(&bin, &base)?;
        s.push_str(&format!("RSS, idle attach (after 10 s): {idle}\n"));
        let live = rss_live(&bin, &base, &rotel, o.live)?;
        s.push_str(&format!(
            "RSS, {} live execs, OTLP export every 5 s: {live}\n",
            o.live
        ));
        let churn = rss_churn(&bin, &base, o.churn)?;
        s.push_str(&churn);
        Ok(s)
    })();
    remove_tree(&base);
    let _ = fs::remove_dir_all(&scratch);
    let mem = mem?;
    println!("\n{report}{mem}");
    fs::write(out.join("report.txt"), format!("{report}{mem}"))?;
    eprintln!("xtask: figures in {}", out.display());
    Ok(())
}

/// Run count and run time (ns) of each loaded BPF program, by id, from bpftool.
fn bpf_programs() -> Result<BTreeMap<u64, (String, u64, u64)>> {
    let text = crate::output(Command::new("bpftool").args(["prog", "show", "--json"]))?;
    let v: serde_json::Value = serde_json::from_str(&text)?;
    Ok(v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| {
                    Some((
                        p["id"].as_u64()?,
                        (
                            p["name"].as_str().unwrap_or("?").to_owned(),
                            p["run_cnt"].as_u64().unwrap_or(0),
                            p["run_time_ns"].as_u64().unwrap_or(0),
                        ),
                    ))
                })
                .collect()
        })
        .unwrap_or_default())
}

/// ns per run of each program of `first` and `second`, both attached to `base` (first, then
/// second) during `seconds` of the standard workload in a child cgroup of `base`.
fn same_run(
    first: &Path,
    second: &Path,
    base: &Path,
    seconds: u32,
) -> Result<[BTreeMap<String, f64>; 2]> {
    let before = bpf_programs()?;
    let a = attach(first, base, &[])?;
    thread::sleep(Duration::from_secs(2));
    let after_a = bpf_programs()?;
    let b = attach(second, base, &[])?;
    thread::sleep(Duration::from_secs(3));
    let start = bpf_programs()?;
    let name = format!("{}/wl", base.file_name().unwrap().to_string_lossy());
    let wl = run(Command::new("bash")
        .arg(root().join("xtask/bench/workload.sh"))
        .args(["-d", &seconds.to_string(), "-N", "-q", "-n", &name])
        .stdout(Stdio::null()));
    let end = bpf_programs();
    stop(a)?;
    stop(b)?;
    wl?;
    let end = end?;
    let mut out = [BTreeMap::new(), BTreeMap::new()];
    for (id, (prog, runs, ns)) in &end {
        let Some((_, runs0, ns0)) = start.get(id) else {
            continue;
        };
        let which = if !after_a.contains_key(id) {
            1
        } else if !before.contains_key(id) {
            0
        } else {
            continue;
        };
        let n = runs - runs0;
        if n > 0 {
            out[which].insert(prog.clone(), (ns - ns0) as f64 / n as f64);
        }
    }
    Ok(out)
}

/// Same-run comparison of two builds' kernel programs, once in each order.
fn compare(this: &Path, other: &Path, seconds: u32) -> Result<String> {
    // Run counts and times are kept only while the kernel's BPF statistics are on.
    let stats = Path::new("/proc/sys/kernel/bpf_stats_enabled");
    let was = fs::read_to_string(stats).unwrap_or_default();
    fs::write(stats, "1").context("cannot turn the kernel's BPF statistics on")?;
    let base = v2_mount()?.join(format!("profiler-compare-{}", std::process::id()));
    fs::create_dir_all(&base)?;
    let runs = (|| -> Result<_> {
        let [this_first, other_second] = same_run(this, other, &base, seconds)?;
        let [other_first, this_second] = same_run(other, this, &base, seconds)?;
        Ok((this_first, other_second, other_first, this_second))
    })();
    remove_tree(&base);
    let _ = fs::write(stats, was.trim());
    let (this_first, other_second, other_first, this_second) = runs?;
    let mut s = format!(
        "ns per run; THIS = {}, OTHER = {}
  {:<20} {:>11} {:>12} {:>11} {:>12} {:>7}
",
        this.display(),
        other.display(),
        "program",
        "THIS first",
        "OTHER second",
        "OTHER first",
        "THIS second",
        "ratio"
    );
    for (prog, t1) in &this_first {
        let get = |m: &BTreeMap<String, f64>| m.get(prog).copied().unwrap_or(f64::NAN);
        let (o2, o1, t2) = (get(&other_second), get(&other_first), get(&this_second));
        // THIS / OTHER at the same position, geometric mean of the two orders.
        let ratio = ((t1 / o1) * (t2 / o2)).sqrt();
        s.push_str(&format!(
            "  {prog:<20} {t1:>11.0} {o2:>12.0} {o1:>11.0} {t2:>12.0} {ratio:>7.2}\n"
        ));
    }
    Ok(s)
}

/// key=value lines of measure.sh's usage.txt.
fn usage(dir: &Path) -> Result<BTreeMap<String, String>> {
    let text = fs::read_to_string(dir.join("usage.txt"))
        .with_context(|| format!("no usage.txt in {}", dir.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect())
}

/// (name, runs, run time ns) of each program in bpf_cost.json, most time first.
fn programs(dir: &Path) -> Result<Vec<(String, u64, u64)>> {
    let text = fs::read_to_string(dir.join("bpf_cost.json"))
        .with_context(|| format!("no bpf_cost.json in {}", dir.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)?;
    let mut out: Vec<(String, u64, u64)> = v["programs"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| {
                    (
                        p["name"].as_str().unwrap_or("?").to_owned(),
                        p["run_cnt"].as_u64().unwrap_or(0),
                        p["run_time_ns"].as_u64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort_by_key(|p| std::cmp::Reverse(p.2));
    Ok(out)
}

fn side_by_side_report(sbs: &Path) -> Result<String> {
    let mut s = String::new();
    let floor = usage(&sbs.join("bpftrace"))?;
    let prof = usage(&sbs.join("profiler"))?;
    let f = |m: &BTreeMap<String, String>, k: &str| -> f64 {
        m.get(k).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN)
    };
    for (name, dir) in [("bpftrace floor", "bpftrace"), ("profiler", "profiler")] {
        s.push_str(&format!(
            "{name}:\n  {:<20} {:>10} {:>9} {:>12}\n",
            "program", "runs", "ns/run", "total ms"
        ));
        for (p, runs, ns) in programs(&sbs.join(dir))? {
            s.push_str(&format!(
                "  {:<20} {:>10} {:>9.0} {:>12.2}\n",
                p,
                runs,
                ns as f64 / runs.max(1) as f64,
                ns as f64 / 1e6
            ));
        }
    }
    let progs = programs(&sbs.join("profiler"))?;
    let block_ns: u64 = progs
        .iter()
        .filter(|(p, _, _)| p.starts_with("block_"))
        .map(|(_, _, ns)| ns)
        .sum();
    // One completion per request (and one start, block_io_start or block_getrq).
    let requests = progs
        .iter()
        .filter(|(p, _, _)| p.starts_with("block_rq_complet"))
        .map(|(_, n, _)| *n)
        .sum::<u64>();
    if requests > 0 {
        s.push_str(&format!(
            "block programs per disk request: {:.0} ns ({requests} requests)\n",
            block_ns as f64 / requests as f64
        ));
    }
    let (pf, ff) = (
        f(&prof, "bpf_cpu_pct_of_one_cpu"),
        f(&floor, "bpf_cpu_pct_of_one_cpu"),
    );
    s.push_str(&format!(
        "total BPF CPU: profiler {pf:.3}% of one CPU, bpftrace floor {ff:.3}% (ratio {:.2})\n",
        pf / ff
    ));
    s.push_str(&format!(
        "userspace CPU: profiler {:.2}% of one CPU, bpftrace {:.2}%\n",
        f(&prof, "peer_cpu_pct_of_one_cpu"),
        f(&floor, "peer_cpu_pct_of_one_cpu")
    ));
    s.push_str(&format!(
        "RSS during the workload: profiler {:.1} MiB max, bpftrace {:.1} MiB\n",
        f(&prof, "peer_rss_kb_max") / 1024.0,
        f(&floor, "peer_rss_kb_max") / 1024.0
    ));
    Ok(s)
}

/// VmRSS, RssAnon and RssFile of a process, in KiB.
fn rss(pid: u32) -> Option<(u64, u64, u64)> {
    let st = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb = |k: &str| -> Option<u64> {
        st.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
    };
    Some((kb("VmRSS:")?, kb("RssAnon:")?, kb("RssFile:")?))
}

/// The largest RSS over `d`, sampled every 100 ms.
fn max_rss(pid: u32, d: Duration) -> Option<(u64, u64, u64)> {
    let end = Instant::now() + d;
    let mut best: Option<(u64, u64, u64)> = None;
    while Instant::now() < end {
        if let Some(r) = rss(pid)
            && best.is_none_or(|b| r.0 > b.0)
        {
            best = Some(r);
        }
        thread::sleep(Duration::from_millis(100));
    }
    best
}

fn fmt_rss(r: Option<(u64, u64, u64)>) -> String {
    match r {
        Some((t, a, f)) => format!(
            "{:.1} MiB (anonymous {:.1}, file and BPF-map mappings {:.1})",
            t as f64 / 1024.0,
            a as f64 / 1024.0,
            f as f64 / 1024.0
        ),
        None => "not measured (the profiler exited)".into(),
    }
}

fn attach(bin: &Path, base: &Path, extra: &[&str]) -> Result<Child> {
    let child = Command::new(bin)
        .args(["attach", "--cgroup"])
        .arg(base)
        .args(extra)
        .stdout(Stdio::null())
        .spawn()?;
    Ok(child)
}

fn stop(mut p: Child) -> Result<()> {
    interrupt(p.id());
    p.wait()?;
    Ok(())
}

fn rss_idle(bin: &Path, base: &Path) -> Result<String> {
    let p = attach(bin, base, &[])?;
    thread::sleep(Duration::from_secs(10));
    let r = max_rss(p.id(), Duration::from_secs(5));
    stop(p)?;
    Ok(fmt_rss(r))
}

/// Start `prog args` with its pid in cgroup `dir` (created here) from the start.
fn spawn_in(dir: &Path, prog: &str, args: &[&str]) -> Result<Child> {
    fs::create_dir_all(dir)?;
    let procs = dir.join("cgroup.procs");
    let mut c = Command::new(prog);
    c.args(args).stdout(Stdio::null()).stderr(Stdio::null());
    // SAFETY: only a write to a file between fork and exec (this process is single-threaded).
    unsafe {
        c.pre_exec(move || fs::write(&procs, b"0"));
    }
    Ok(c.spawn()?)
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn rss_live(bin: &Path, base: &Path, rotel: &Path, n: u32) -> Result<String> {
    let (grpc, http) = (free_port()?, free_port()?);
    let mut collector = Command::new(rotel)
        .args([
            "start",
            "--otlp-grpc-endpoint",
            &format!("127.0.0.1:{grpc}"),
            "--otlp-http-endpoint",
            &format!("127.0.0.1:{http}"),
            "--exporter",
            "blackhole",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start rotel-agent")?;
    thread::sleep(Duration::from_secs(1));
    let endpoint = format!("http://127.0.0.1:{http}");
    let result = (|| -> Result<String> {
        let p = attach(
            bin,
            base,
            &["--otlp-endpoint", &endpoint, "--export-interval", "5s"],
        )?;
        let mut sleepers = Vec::new();
        let spawned = (|| -> Result<()> {
            for i in 0..n {
                sleepers.push(spawn_in(
                    &base.join(format!("live{i}")),
                    "sleep",
                    &["3600"],
                )?);
            }
            Ok(())
        })();
        let r = if spawned.is_ok() {
            // Several exports and samples of every exec, then the largest RSS over 10 s.
            thread::sleep(Duration::from_secs(20));
            max_rss(p.id(), Duration::from_secs(10))
        } else {
            None
        };
        for s in sleepers.iter_mut() {
            let _ = s.kill();
            let _ = s.wait();
        }
        for i in 0..n {
            rmdir_retry(&base.join(format!("live{i}")));
        }
        stop(p)?;
        spawned?;
        Ok(fmt_rss(r))
    })();
    let _ = collector.kill();
    let _ = collector.wait();
    result
}

fn rss_churn(bin: &Path, base: &Path, n: u32) -> Result<String> {
    let p = attach(bin, base, &[])?;
    thread::sleep(Duration::from_secs(2));
    let start = Instant::now();
    let mut warm = None;
    let result = (|| -> Result<()> {
        for i in 0..n {
            let d = base.join(format!("c{i}"));
            spawn_in(&d, "/bin/true", &[])?.wait()?;
            rmdir_retry(&d);
            if i + 1 == n / 10 {
                // Warm-up: the first tenth.
                thread::sleep(Duration::from_secs(3));
                warm = rss(p.id());
            }
        }
        Ok(())
    })();
    let took = start.elapsed();
    thread::sleep(Duration::from_secs(5));
    let end = rss(p.id());
    stop(p)?;
    result?;
    Ok(format!(
        "RSS over {n} execs ended ({:.0} execs/s): after {} (warm-up) {}; at the end {}\n",
        n as f64 / took.as_secs_f64(),
        n / 10,
        fmt_rss(warm),
        fmt_rss(end)
    ))
}

fn rmdir_retry(d: &PathBuf) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while d.exists() && fs::remove_dir(d).is_err() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
}

/// Kill what is left under `base` (only this benchmark's processes are there) and remove it.
fn remove_tree(base: &Path) {
    if let Ok(rd) = fs::read_dir(base) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                if let Ok(pids) = fs::read_to_string(p.join("cgroup.procs")) {
                    for pid in pids.lines() {
                        let _ = Command::new("kill").args(["-KILL", pid]).status();
                    }
                }
                rmdir_retry(&p);
            }
        }
    }
    let _ = fs::remove_dir(base);
}
