//! Bad input never panics, hangs or leaves something behind: out-of-range flags, bad
//! endpoints, cgroup paths that climb out of the hierarchy, more execs than the tables hold,
//! records that make no sense, a stdout that closes or fills, a watched cgroup that goes away,
//! a command that ignores SIGTERM, and bidirectional controls in command lines.

use std::{
    fs,
    io::{BufRead as _, BufReader},
    path::Path,
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use profiler_tests::*;

/// Wait for a child we started, at most `limit`; None if it is still running then.
fn wait_for(child: &mut std::process::Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        if Instant::now() > deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn out_of_range_flags_are_one_line_and_exit_2() {
    let cg = TestCgroup::new("badflags");
    let a = cg.arg();
    for (flag, value, says) in [
        ("--grace", "99999999999999999999999", "longer than 24 hours"),
        ("--grace", "1e19", "invalid duration"),
        ("--interval", "0", "must be above zero"),
        (
            "--sample-interval",
            "10000000000000000000s",
            "longer than 24 hours",
        ),
        ("--otlp-timeout", "0ms", "must be above zero"),
        ("--export-interval", "1441m", "longer than 24 hours"),
        ("--max-execs", "4294967295", "1..=65536"),
        ("--max-cgroups", "4294967295", "1..=1048576"),
    ] {
        let (code, err) = fails(&["attach", "--cgroup", &a, flag, value]);
        assert_eq!(code, 2, "{flag} {value}: {err}");
        assert!(
            err.contains(flag) && err.contains(says),
            "{flag} {value}: {err}"
        );
    }
    // The variable in milliseconds, the same range.
    let (code, err) = fails_env(
        &[
            "attach",
            "--cgroup",
            &a,
            "--otlp-endpoint",
            "http://127.0.0.1:9",
        ],
        &[("OTEL_METRIC_EXPORT_INTERVAL", "99999999999999")],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("OTEL_METRIC_EXPORT_INTERVAL"), "{err}");
}

#[test]
fn bad_endpoints_and_paths_are_refused_before_anything_is_made() {
    require_root();
    let cg = TestCgroup::new("badpaths");
    for url in [
        "http://[::1]:99999",
        "http://[zz]",
        "http://user:pw@127.0.0.1:4318",
    ] {
        let (_, err) = fails(&["attach", "--cgroup", &cg.arg(), "--otlp-endpoint", url]);
        assert!(err.contains("--otlp-endpoint"), "{url}: {err}");
    }
    let (_, err) = fails(&["attach", "--cgroup", ""]);
    assert!(err.contains("the cgroup path is empty"), "{err}");

    // `run --parent` that climbs out of the v2 hierarchy: refused, nothing made.
    let tag = format!("profiler-escape-{}", std::process::id());
    let target = Path::new("/tmp").join(&tag);
    let (_, err) = fails(&[
        "run",
        "--parent",
        &format!("../../../../../../tmp/{tag}"),
        "--",
        "true",
    ]);
    assert!(
        err.contains("is not inside the cgroup v2 hierarchy"),
        "{err}"
    );
    assert!(!target.exists(), "{} was made", target.display());
    // Onto a v1 hierarchy beside it (a hybrid host), or anywhere else: the same.
    let v2 = v2_mount();
    let beside = v2.join("..").join("cpu").join(&tag);
    let (_, err) = fails(&["run", "--parent", beside.to_str().unwrap(), "--", "true"]);
    assert!(
        err.contains("is not inside the cgroup v2 hierarchy"),
        "{err}"
    );
    assert!(!v2.parent().unwrap().join("cpu").join(&tag).exists());

    // More execs already there than the exec table holds (--max-execs 1: two slots, fewer
    // than an exec's 32 probes): one line, no panic.
    let full = TestCgroup::new("fulltable");
    for i in 0..6 {
        full.child(&format!("e{i}"));
    }
    let (code, err) = fails(&["attach", "--cgroup", &full.arg(), "--max-execs", "1"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("the exec table is full (raise --max-execs)"),
        "{err}"
    );
}

/// A record file of the test's own.
fn records_file(name: &str, lines: &[String]) -> std::path::PathBuf {
    let dir = scratch_dir(name);
    let f = dir.join("in.jsonl");
    fs::write(&f, lines.join("\n")).unwrap();
    f
}

/// A real record, made by `profiler run`.
fn real_record() -> String {
    let out = Command::new(profiler_bin())
        .args(["run", "--output", "json", "--", "true"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Many files, some bad: each fault is one warning naming its file and line, the rest is
/// reported; hosts whose clocks disagree still compare by their own durations.
#[test]
fn report_of_many_files_warns_of_each_bad_one_and_reports_the_rest() {
    require_root();
    let v: Value = serde_json::from_str(&real_record()).unwrap();
    let rec = |id: u64, host: &str, shift_ns: i64, extra: Option<(&str, Value)>| {
        let mut r = v.clone();
        r["cgroup_id"] = id.into();
        r["host"] = host.into();
        for k in ["start_unix_ns", "end_unix_ns"] {
            r[k] = (u(&r[k]) as i64 + shift_ns).into();
        }
        if let Some((k, x)) = extra {
            r[k] = x;
        }
        r.to_string()
    };
    let dir = scratch_dir("report-many");
    let write = |name: &str, lines: &[String]| fs::write(dir.join(name), lines.join("\n")).unwrap();
    write(
        "a.jsonl",
        &[
            rec(11, "h1", 0, None),
            "{oops".into(),
            rec(12, "h1", 0, None),
        ],
    );
    // Another host, its clock an hour behind; then a record of a newer schema.
    let hour = -3_600_000_000_000;
    write(
        "b.jsonl",
        &[
            rec(21, "h2", hour, None),
            rec(22, "h2", hour, Some(("schema", 2.into()))),
        ],
    );
    write("empty.jsonl", &[]);
    let whole = rec(31, "h1", 0, None);
    write(
        "cut.jsonl",
        &[whole.clone(), whole[..whole.len() / 2].to_owned()],
    );
    let out = Command::new(profiler_bin())
        .args(["report", dir.to_str().unwrap(), "--json", "-"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let d = |f: &str| dir.join(f).display().to_string();
    for want in [
        format!("{} line 2: not an exec record", d("a.jsonl")),
        format!("{} line 2: records of schema 2 are newer", d("b.jsonl")),
        format!(
            "{} line 2: truncated (the file ends inside a record): skipped",
            d("cut.jsonl")
        ),
        format!("{} holds no exec records: skipped", d("empty.jsonl")),
    ] {
        assert!(err.contains(&want), "{want:?} not in {err}");
    }
    assert_eq!(err.lines().count(), 4, "one line per fault: {err}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["execs"], 5, "{doc}");
    assert_eq!(doc["skipped_lines"], 4, "{doc}");
    let runs = doc["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3, "a run per file with records: {doc}");
    let steps = doc["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1, "one command, one step: {doc}");
    // Every copy has the record's own wall time, whatever its host's clock said.
    let wall = &steps[0]["figures"]["wall"];
    assert_eq!(
        (u(&wall["min"]), u(&wall["max"])),
        (u(&v["wall_ns"]), u(&v["wall_ns"]))
    );
    assert_eq!(u(&wall["count"]), 5);

    // Nothing readable at all: one line, exit 1.
    let (code, err) = fails(&["report", &d("empty.jsonl"), &d("empty.jsonl")]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no exec records in 2 input(s)"), "{err}");
    let (code, err) = fails(&["report", &d("*.csv")]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("matches no file"), "{err}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn report_survives_records_that_make_no_sense_and_closed_or_full_outputs() {
    require_root();
    let good = real_record();
    let v: Value = serde_json::from_str(&good).unwrap();
    let mut backwards = v.clone();
    backwards["cgroup_id"] = 1.into();
    backwards["end_unix_ns"] = 1.into();
    let mut endless = v.clone();
    endless["cgroup_id"] = 2.into();
    endless["start_unix_ns"] = 0.into();
    endless["end_unix_ns"] = u64::MAX.into();
    let mut huge = v.clone();
    huge["cgroup_id"] = 3.into();
    huge["cpu"]["task_time_ns"] = u64::MAX.into();
    huge["cpu"]["on_cpu_ns"] = u64::MAX.into();
    let input = records_file(
        "report-bad",
        &[
            good.clone(),
            backwards.to_string(),
            endless.to_string(),
            huge.to_string(),
        ],
    );
    let html = input.with_file_name("out.html");
    let mut child = Command::new(profiler_bin())
        .args([
            "report",
            input.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_for(&mut child, secs(20)).expect("report hung");
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(status.success(), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains("in.jsonl line 2: skipped: ends (1) before it starts"),
        "{err}"
    );
    assert!(
        err.contains("in.jsonl line 3: skipped: lasts more than a year"),
        "{err}"
    );
    assert!(html.exists());

    // /dev/zero: one endless line, refused at a bounded length.
    let (code, err) = fails(&["report", "/dev/zero", "--html", html.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("longer than 64 MiB"), "{err}");

    // A reader that has gone: quiet, exit 0. A full device: one line, exit 1.
    let mut child = Command::new(profiler_bin())
        .args([
            "report",
            input.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let status = wait_for(&mut child, secs(20)).expect("report hung on a closed stdout");
    let err = child.wait_with_output().unwrap().stderr;
    let err = String::from_utf8_lossy(&err);
    assert!(
        status.success() && !err.contains("panicked"),
        "{status}: {err}"
    );
    let out = Command::new(profiler_bin())
        .args([
            "report",
            input.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ])
        .stdout(
            fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .unwrap(),
        )
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot write to stdout") && !err.contains("panicked"),
        "{err}"
    );
    let _ = fs::remove_dir_all(input.parent().unwrap());
}

/// `attach --output json` on `cg` with stdout and stderr piped, once it has attached; its
/// stderr's reader.
fn attach_piped(cg: &TestCgroup) -> (std::process::Child, BufReader<std::process::ChildStderr>) {
    let mut child = Command::new(profiler_bin())
        .args(["attach", "--output", "json", "--cgroup", &cg.arg()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("profiler: attached") {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "no attach");
    }
    (child, err)
}

#[test]
fn attach_stops_when_its_reader_goes_or_its_cgroup_is_removed() {
    require_root();
    // `attach | head -n1`: the reader takes one line and goes; attach stops by itself.
    let cg = TestCgroup::new("closedout");
    // Its stderr stays open (held) while the test reads its stdout.
    let (mut child, _err) = attach_piped(&cg);
    let out = child.stdout.take().unwrap();
    let one = cg.child("one");
    run_in(&one, &["true"]);
    rmdir(&one);
    let mut first = String::new();
    BufReader::new(out).read_line(&mut first).unwrap();
    assert!(first.starts_with('{'), "{first}");
    // The reader is gone now (dropped above).
    let status = wait_for(&mut child, secs(10)).unwrap_or_else(|| {
        let _ = child.kill();
        panic!("attach ran on after its reader went")
    });
    assert!(status.success(), "{status}");

    // The watched cgroup removed: what ended is reported, then one line and exit 1.
    let cg = TestCgroup::new("removedroot");
    let (mut child, mut err) = attach_piped(&cg);
    run_in(&cg.child("last"), &["true"]);
    remove_tree(&cg.path);
    let status = wait_for(&mut child, secs(15)).unwrap_or_else(|| {
        let _ = child.kill();
        panic!("attach ran on after its cgroup was removed")
    });
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut err, &mut rest);
    assert_eq!(status.code(), Some(1), "{rest}");
    assert!(
        rest.contains("was removed; attach again once it exists"),
        "{rest}"
    );
    let mut records = String::new();
    let _ = std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut records);
    assert!(
        records.contains("\"exec\":\"last\""),
        "the last exec is reported: {records}"
    );
}

#[test]
fn run_kills_a_command_that_ignores_sigterm() {
    require_root();
    let mut child = Command::new(profiler_bin())
        .args([
            "run",
            "--output",
            "json",
            "--kill-after",
            "1s",
            "--",
            "sh",
            "-c",
            "trap '' TERM; echo ready; sleep 60",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    let t0 = Instant::now();
    // SAFETY: signal the profiler this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = wait_for(&mut child, secs(20)).unwrap_or_else(|| {
        let _ = child.kill();
        panic!("run waited on a command that ignores SIGTERM")
    });
    let took = t0.elapsed();
    let mut rec = String::new();
    let _ = std::io::Read::read_to_string(&mut out, &mut rec);
    // The command was killed (the shell's sleep by SIGKILL): 128 + 9.
    assert_eq!(status.code(), Some(137), "{rec}");
    assert!(
        took >= Duration::from_millis(900),
        "killed after {took:?}, before --kill-after"
    );
    assert!(rec.contains("its cgroup was killed"), "{rec}");
}

#[test]
fn bidirectional_controls_are_escaped_like_the_other_controls() {
    require_root();
    let out = Command::new(profiler_bin())
        .args(["run", "--", "sh", "-c", ": step\u{202e}txt.exe"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains('\u{202e}'), "raw U+202E in the report: {err}");
    assert!(err.contains("\\u{202e}"), "{err}");
}

/// `run` forwards SIGTERM to the command, which ends as it chooses (here: exit 7, run's own
/// code then), and the processes the command left behind are killed and said so.
#[test]
fn run_forwards_sigterm_and_kills_what_the_command_left() {
    require_root();
    let mut child = Command::new(profiler_bin())
        .args([
            "run",
            "--output",
            "json",
            "--",
            "sh",
            "-c",
            "trap 'exit 7' TERM; sleep 60 & echo ready; while :; do sleep 0.05; done",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    // SAFETY: signal the profiler this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = wait_for(&mut child, secs(20)).unwrap_or_else(|| {
        let _ = child.kill();
        panic!("run did not end after SIGTERM")
    });
    let mut rec = String::new();
    let _ = std::io::Read::read_to_string(&mut out, &mut rec);
    assert_eq!(status.code(), Some(7), "the command's own code: {rec}");
    let rec: serde_json::Value = serde_json::from_str(rec.trim()).unwrap();
    assert_eq!(rec["exit"]["code"], 7, "{rec}");
    assert!(
        rec["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == "processes left behind by the command were killed"),
        "the background sleep: {rec}"
    );
}

/// A stderr whose reader has gone (`profiler run ... 2>&1 | head -c0`): the messages and the
/// report are lost, the profiler goes on and exits with the command's code (it once panicked
/// at its first message, exit 101).
#[test]
fn a_stderr_without_reader_loses_messages_not_the_run() {
    require_root();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let status = Command::new(profiler_bin())
        .args(["run", "--", "sh", "-c", "exit 3"])
        .stdout(Stdio::null())
        .stderr(writer)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(3), "{status}");
}
