//! `profiler report` end to end: a real recorded run (execs doing known work under
//! `profiler attach --output json`) is rendered, the page is loaded in headless Chromium, a
//! screenshot is taken, and the page's contents are checked through its DOM against the
//! records. Root and BPF needed (the recording); Chromium is Debian's package, which
//! `cargo xtask test` installs: without it the test fails, it does not skip.

use std::{
    collections::{HashMap, HashSet},
    fs,
    path::Path,
    process::Command,
    time::{SystemTime, UNIX_EPOCH},
};

use profiler::render::{bytes, dur};
use profiler_tests::{browser::Browser, *};

const MIB: u64 = 1024 * 1024;

fn unix_now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// What a record's memory-peak cell should hold: memory.peak, else v1 max usage, else "".
fn memory_peak(rec: &Value) -> String {
    let c = &rec["cgroup"];
    c["memory_peak_bytes"]["value"]
        .as_u64()
        .or(c["v1_memory_max_usage_bytes"]["value"].as_u64())
        .map(|v| v.to_string())
        .unwrap_or_default()
}

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// A GitHub Actions step's environment (with a trace context), on the server `server`.
fn github_env(server: &'static str, run: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![
        ("GITHUB_ACTIONS", "true"),
        ("GITHUB_WORKFLOW", "CI"),
        ("GITHUB_RUN_ID", run),
        ("GITHUB_JOB", "build"),
        ("GITHUB_SERVER_URL", server),
        ("GITHUB_REPOSITORY", "acme/app"),
        ("TRACEPARENT", TRACEPARENT),
    ]
}

/// Run `argv` in a new exec `name` of `cg` (born there; or, with `env`, moved in with exactly
/// that environment), remove the exec, and return its record, after checking its start and
/// end against this test's own clock.
fn exec(
    cg: &TestCgroup,
    p: &Attached,
    name: &str,
    argv: &[&str],
    env: Option<&[(&str, &str)]>,
) -> Value {
    let before = unix_now_ns();
    let dir = cg.child(name);
    match env {
        Some(env) => run_in_env(&dir, argv, env),
        None => {
            run_born_in(&dir, argv);
        }
    }
    let id = cgroup_id(&dir);
    rmdir(&dir);
    let after = unix_now_ns();
    let rec = p.wait_ended(id, secs(30));
    let (start, end) = (u(&rec["start_unix_ns"]), u(&rec["end_unix_ns"]));
    // The offset is taken once, at the profiler's start: 10 ms for its reading and any slew.
    let slack = 10_000_000;
    assert!(
        start + slack >= before && end <= after + slack && start <= end,
        "{name}: start {start} end {end}, test saw {before}..{after}"
    );
    assert_eq!(
        end - start,
        u(&rec["wall_ns"]),
        "{name}: end - start is wall"
    );
    // Each of these execs is one process started in the exec and reaped before its removal:
    // its task time is its life, within the exec's.
    let task = u(&rec["cpu"]["task_time_ns"]);
    assert!(
        task > 0 && task <= u(&rec["wall_ns"]),
        "{name}: task time {task}: {rec}"
    );
    rec
}

#[test]
fn report_of_a_recorded_run_in_chromium() {
    let _ = browser::chromium_bin(); // before any work: fail at once without it
    let cg = TestCgroup::new("report");
    let scratch = scratch_dir("report");
    let out = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("target/report-test");
    fs::create_dir_all(&out).unwrap();
    let p = Attached::start(&cg, &[]);

    // Known work: 16 MiB of direct writes, 300 ms of spinning, 200 ms asleep, and an exec
    // whose path and command need escaping.
    let file = scratch.join("data");
    let of = format!("of={}", file.display());
    let dd = exec(
        &cg,
        &p,
        "dd-write",
        &[
            "dd",
            "if=/dev/zero",
            &of,
            "bs=1M",
            "count=16",
            "oflag=direct",
            "status=none",
        ],
        None,
    );
    let written = u(&dd["disk"]["write_bytes"]);
    let e = report("dd direct write bytes", written as f64, (16 * MIB) as f64);
    assert!(written >= 16 * MIB && e <= 0.01, "dd wrote {written}");
    let spin = exec(&cg, &p, "spin", &[&busy(), "300000"], None);
    assert!(u(&spin["cpu"]["task_time_ns"]) >= 300_000_000, "{spin}");
    let sleep = exec(&cg, &p, "sleep", &["sleep", "0.2"], None);
    assert!(u(&sleep["cpu"]["task_time_ns"]) >= 200_000_000, "{sleep}");
    let odd_name = r#"odd <b>&"quoted'"#;
    // true ignores its arguments: the command line is all that needs escaping.
    exec(&cg, &p, odd_name, &["true", odd_name], None);
    let odd_command = format!("true {odd_name}");

    // CI steps: GitHub Actions with a trace context; the same with a server address that is
    // no web address (its run must not become a link); GitLab CI, whose task has an address.
    let gh = exec(
        &cg,
        &p,
        "ci-github",
        &["/bin/sleep", "0.11"],
        Some(&github_env("https://github.example", "4242")),
    );
    let gh_run = "https://github.example/acme/app/actions/runs/4242";
    assert_eq!(gh["ci"]["attributes"]["cicd.pipeline.run.url.full"], gh_run);
    assert_eq!(
        gh["ci"]["trace"]["trace_id"],
        "4bf92f3577b34da6a3ce929d0e0e4736"
    );
    let bad = exec(
        &cg,
        &p,
        "ci-bad-url",
        &["/bin/sleep", "0.12"],
        Some(&github_env("javascript:alert(1)", "4243")),
    );
    let bad_run = "javascript:alert(1)/acme/app/actions/runs/4243";
    assert_eq!(
        bad["ci"]["attributes"]["cicd.pipeline.run.url.full"],
        bad_run
    );
    let (gl_run, gl_task) = (
        "https://gitlab.example/group/app/-/pipelines/99",
        "https://gitlab.example/group/app/-/jobs/555",
    );
    let gl = exec(
        &cg,
        &p,
        "ci-gitlab",
        &["/bin/sleep", "0.13"],
        Some(&[
            ("GITLAB_CI", "true"),
            ("CI_PROJECT_PATH", "group/app"),
            ("CI_PIPELINE_ID", "99"),
            ("CI_JOB_NAME", "test"),
            ("CI_JOB_ID", "555"),
            ("CI_PIPELINE_URL", gl_run),
            ("CI_JOB_URL", gl_task),
        ]),
    );
    assert_eq!(
        gl["ci"]["attributes"]["cicd.pipeline.task.run.url.full"],
        gl_task
    );
    // An exec that never ran a program: named by its path.
    let empty_dir = cg.child("no-program");
    let empty_id = cgroup_id(&empty_dir);
    std::thread::sleep(std::time::Duration::from_millis(50));
    rmdir(&empty_dir);
    let empty = p.wait_ended(empty_id, secs(30));
    assert_eq!(empty.get("command"), None, "{empty}");
    // Still running when the profiler stops: reported as "running".
    let running_dir = cg.child("still-running");
    let mut running = spawn_in(&running_dir, &["sleep", "60"]);
    let running_id = cgroup_id(&running_dir);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (code, records, _) = p.stop();
    assert_eq!(code, 0);
    let _ = running.kill();
    let _ = running.wait();
    assert_eq!(records.len(), 9, "{records:?}");
    assert!(
        records
            .iter()
            .any(|r| r["cgroup_id"].as_u64() == Some(running_id) && r["state"] == "running")
    );

    // On-CPU, run-queue and IO-wait can exceed task time only by what the clocks of two CPUs
    // disagree (docs/report.md, "A picture of a build: `profiler report`").
    for r in &records {
        let c = &r["cpu"];
        let parts = u(&c["on_cpu_ns"]) + u(&c["runq_delay_ns"]) + u(&c["iowait_ns"]);
        let task = u(&c["task_time_ns"]);
        let waits = u(&c["iowait_waits"]).max(1);
        eprintln!(
            "MEASURED {}: task time {task}, parts {parts}, overlap {} ns ({} ns per IO wait)",
            r["exec"],
            parts.saturating_sub(task),
            parts.saturating_sub(task) / waits
        );
        assert!(
            parts as f64 <= task as f64 * 1.01,
            "parts exceed task time by more than 1%: {r}"
        );
    }

    let jsonl = out.join("run.jsonl");
    let lines: Vec<String> = records.iter().map(|r| r.to_string()).collect();
    fs::write(&jsonl, lines.join("\n") + "\n").unwrap();
    let html = out.join("report.html");
    let _ = fs::remove_file(&html);
    let res = Command::new(profiler_bin())
        .args(["report", "--html"])
        .arg(&html)
        .arg(&jsonl)
        .output()
        .unwrap();
    let summary = String::from_utf8_lossy(&res.stdout).into_owned();
    assert!(
        res.status.success(),
        "profiler report: {}",
        String::from_utf8_lossy(&res.stderr)
    );
    eprintln!("{summary}");
    let total_task: u64 = records.iter().map(|r| u(&r["cpu"]["task_time_ns"])).sum();
    let whole = summary
        .lines()
        .find_map(|l| l.strip_prefix("  = task time"))
        .unwrap_or_else(|| panic!("no task time line: {summary}"));
    assert_eq!(
        whole.split_whitespace().next(),
        Some(dur(total_task).as_str()),
        "{summary}"
    );
    // Named by the command, the path beside it.
    let top_write = summary
        .split("top execs by disk write:\n")
        .nth(1)
        .and_then(|t| t.lines().next())
        .unwrap_or_else(|| panic!("no disk write ranking: {summary}"));
    assert!(
        top_write.contains("  dd if=/dev/zero of=") && top_write.ends_with("  [dd-write]"),
        "{summary}"
    );

    let mut b = Browser::start(&out);
    b.open(&html, 1280, 900);
    // Self-contained: the page fetched nothing.
    assert_eq!(
        b.eval("performance.getEntriesByType('resource').length"),
        0,
        "the page loaded resources"
    );
    assert_eq!(
        b.eval("document.getElementById('overview').dataset.execs"),
        "9"
    );
    assert_eq!(
        b.eval("document.getElementById('overview').dataset.running"),
        "1"
    );
    assert_eq!(
        b.eval("document.querySelectorAll('#timeline .exec').length"),
        9
    );
    let rows = b.eval(
        "Array.from(document.querySelectorAll('#execs tbody tr')).map(tr => { \
           const o = { row: tr.dataset.row, id: tr.dataset.cgroupId }; \
           const part = (td, sel, f) => { const e = td.querySelector(sel); return e ? f(e) : null; }; \
           for (const td of tr.cells) o[td.dataset.key] = { v: td.dataset.v, text: td.innerText, \
             name: part(td, '.name', e => e.textContent), sub: part(td, '.sub', e => e.textContent), \
             trace: part(td, '.trace', e => e.title), \
             links: Array.from(td.querySelectorAll('a')).map(a => a.getAttribute('href')) }; \
           return o; })",
    );
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), records.len());
    let by_id: HashMap<u64, &Value> = records.iter().map(|r| (u(&r["cgroup_id"]), r)).collect();
    // The cgroup path: under the name, or the name itself.
    let path_of = |row: &Value| -> String {
        let e = &row["exec"];
        e["sub"].as_str().or(e["name"].as_str()).unwrap().to_owned()
    };
    let paths: HashSet<String> = rows.iter().map(path_of).collect();
    let want: HashSet<String> = [
        "dd-write",
        "spin",
        "sleep",
        odd_name,
        "still-running",
        "ci-github",
        "ci-bad-url",
        "ci-gitlab",
        "no-program",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(paths, want, "exec paths on the page");
    for row in rows {
        let id: u64 = row["id"].as_str().unwrap().parse().unwrap();
        let rec = by_id[&id];
        let cell = |key: &str| row[key]["v"].as_str().unwrap().to_owned();
        // Named by its first program's command line (no container here), else its path.
        match rec["command"].as_str() {
            Some(command) => {
                assert_eq!(row["exec"]["v"], command, "{rec}");
                assert_eq!(row["exec"]["sub"], rec["exec"], "the path under the name");
            }
            None => {
                assert_eq!(row["exec"]["v"], rec["exec"], "{rec}");
                assert_eq!(row["exec"]["name"], rec["exec"]);
                assert_eq!(row["exec"]["sub"], Value::Null, "the path once");
            }
        }
        // Links only where the record has a web address.
        let links: Vec<&str> = row
            .as_object()
            .unwrap()
            .values()
            .filter_map(|c| c.get("links"))
            .flat_map(|l| l.as_array().unwrap())
            .map(|l| l.as_str().unwrap())
            .collect();
        let want: Vec<&str> = match rec["exec"].as_str().unwrap() {
            "ci-github" => vec![gh_run],
            "ci-gitlab" => vec![gl_run, gl_task],
            _ => vec![],
        };
        assert_eq!(links, want, "links of {}", rec["exec"]);
        assert_eq!(
            row["ci"]["trace"], rec["ci"]["trace"]["trace_id"],
            "trace id of {}",
            rec["exec"]
        );
        for (key, field) in [
            ("wall", &rec["wall_ns"]),
            ("task_time", &rec["cpu"]["task_time_ns"]),
            ("on_cpu", &rec["cpu"]["on_cpu_ns"]),
            ("runq", &rec["cpu"]["runq_delay_ns"]),
            ("iowait", &rec["cpu"]["iowait_ns"]),
            ("disk_read", &rec["disk"]["read_bytes"]),
            ("disk_write", &rec["disk"]["write_bytes"]),
            ("net_rx", &rec["network"]["sockets"]["rx_bytes"]),
            ("net_tx", &rec["network"]["sockets"]["tx_bytes"]),
            ("processes", &rec["tasks"]["processes_started"]),
        ] {
            assert_eq!(cell(key), u(field).to_string(), "{key} of {}", rec["exec"]);
        }
        assert_eq!(cell("memory_peak"), memory_peak(rec), "{}", rec["exec"]);
        let c = &rec["cpu"];
        let other = u(&c["task_time_ns"])
            .saturating_sub(u(&c["on_cpu_ns"]) + u(&c["runq_delay_ns"]) + u(&c["iowait_ns"]));
        assert_eq!(cell("other"), other.to_string(), "other of {}", rec["exec"]);
        // The state, then the main program's outcome under it.
        let state = row["state"]["text"].as_str().unwrap();
        assert_eq!(state.split([',', '\n']).next(), rec["state"].as_str());
        if let Some(code) = rec["exit"]["code"].as_u64() {
            assert!(state.ends_with(&format!("exit {code}")), "{state}: {rec}");
        }
    }
    let row_of = |path: &str| rows.iter().find(|r| path_of(r) == path).unwrap();
    let dd_row = row_of("dd-write");
    let dd_name = dd_row["exec"]["name"].as_str().unwrap();
    assert!(dd_name.starts_with("dd if=/dev/zero of="), "{dd_row}");
    assert_eq!(row_of("ci-github")["exec"]["name"], "/bin/sleep 0.11");
    assert_eq!(row_of("no-program")["exec"]["name"], "no-program");
    // The CI cell: system, pipeline, run, task, and the trace under them; a run whose address
    // is no web address is text.
    assert_eq!(
        row_of("ci-github")["ci"]["text"],
        "GitHub Actions · CI · run 4242 · build\ntrace 4bf92f35…"
    );
    assert_eq!(
        row_of("ci-bad-url")["ci"]["text"],
        format!("GitHub Actions · CI · run 4243 ({bad_run}) · build\ntrace 4bf92f35…")
    );
    assert_eq!(
        row_of("ci-gitlab")["ci"]["text"],
        "GitLab CI · group/app · run 99 · test"
    );
    // Every link of the page opens in a new tab and tells its target nothing of the page.
    let anchors = b.eval(
        "Array.from(document.querySelectorAll('a')).map(a => \
         [a.getAttribute('href'), a.target, a.rel, a.closest('#execs') !== null])",
    );
    let anchors = anchors.as_array().unwrap();
    assert_eq!(anchors.len(), 3, "{anchors:?}");
    for a in anchors {
        assert!([gh_run, gl_run, gl_task].contains(&a[0].as_str().unwrap()));
        assert_eq!(a[1], "_blank");
        assert_eq!(a[2], "noopener noreferrer");
        assert_eq!(a[3], true, "in the table");
    }
    assert!(
        !b.eval("document.documentElement.outerHTML")
            .as_str()
            .unwrap()
            .contains("href=\"javascript"),
        "a javascript: link"
    );
    assert_eq!(dd_row["disk_write"]["v"], written.to_string());
    assert_eq!(dd_row["disk_write"]["text"], bytes(written));

    // The build's breakdown adds up, and its parts are the records' sums.
    let part = |b: &mut Browser, k: &str| -> u64 {
        b.eval(&format!(
            "(document.querySelector('#total tr[data-part={k}] td[data-v]') || {{dataset: {{v: '0'}}}}).dataset.v"
        ))
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
    };
    let sum = |f: &str| -> u64 { records.iter().map(|r| u(&r["cpu"][f])).sum() };
    let (cpu, runq, iowait, other, overlap, task) = (
        part(&mut b, "cpu"),
        part(&mut b, "runq"),
        part(&mut b, "iowait"),
        part(&mut b, "other"),
        part(&mut b, "overlap"),
        part(&mut b, "task"),
    );
    assert_eq!(
        (cpu, runq, iowait, task),
        (
            sum("on_cpu_ns"),
            sum("runq_delay_ns"),
            sum("iowait_ns"),
            total_task
        )
    );
    assert_eq!(
        cpu + runq + iowait + other - overlap,
        task,
        "the parts add up"
    );

    // Record strings are text, not markup, in a real browser too (the hover's details are
    // checked below, once shown).
    assert_eq!(
        b.eval("document.querySelectorAll('#execs tbody b, #timeline b').length"),
        0
    );
    let odd_row = row_of(odd_name);
    assert_eq!(odd_row["exec"]["name"], odd_command.as_str());
    let label = b.eval(&format!(
        "document.querySelector('#timeline .exec[data-row=\"{}\"] text.label').textContent",
        odd_row["row"].as_str().unwrap()
    ));
    assert_eq!(label, odd_command.as_str());

    // Sorting: a click on "disk write" puts dd first, largest first; a second click reverses.
    b.click("#execs th[data-key=disk_write]");
    let column = |b: &mut Browser, key: &str| -> Vec<(String, u64)> {
        let v = b.eval(&format!(
            "Array.from(document.querySelectorAll('#execs tbody tr')).map(tr => \
             [tr.cells[0].dataset.v, tr.querySelector('td[data-key={key}]').dataset.v])"
        ));
        v.as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p[0].as_str().unwrap().to_owned(),
                    p[1].as_str().unwrap().parse().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(
        b.eval(
            "document.querySelector('#execs th[data-key=disk_write]').getAttribute('aria-sort')"
        ),
        "descending"
    );
    let col = column(&mut b, "disk_write");
    assert_eq!(col[0].0, dd_row["exec"]["v"], "{col:?}");
    assert!(col.windows(2).all(|w| w[0].1 >= w[1].1), "{col:?}");
    b.click("#execs th[data-key=disk_write]");
    let col = column(&mut b, "disk_write");
    assert!(col.windows(2).all(|w| w[0].1 <= w[1].1), "{col:?}");
    assert_eq!(col.last().unwrap().0, dd_row["exec"]["v"], "{col:?}");
    b.click("#execs th[data-key=wall]");
    let col = column(&mut b, "wall");
    assert!(col.windows(2).all(|w| w[0].1 >= w[1].1), "{col:?}");

    // The whole page in one viewport, the dd exec's bar hovered: its details show.
    let height = b
        .eval("document.documentElement.scrollHeight")
        .as_u64()
        .unwrap();
    b.resize(1280, height as u32 + 20);
    let dd_bar = format!(
        "#timeline .exec[data-row=\"{}\"] rect:not(.hit)",
        dd_row["row"].as_str().unwrap()
    );
    b.hover(&dd_bar);
    assert_eq!(b.eval("document.getElementById('tip').hidden"), false);
    let tip = b.eval("document.getElementById('tip').textContent");
    let tip = tip.as_str().unwrap();
    assert!(tip.starts_with("dd if=/dev/zero of="), "{tip}");
    assert!(tip.contains("cgroup pathdd-write"), "{tip}");
    assert!(tip.contains(&format!("write {}", bytes(written))), "{tip}");
    let top_proc = b.eval("document.querySelector('#tip ol.procs li').textContent");
    assert!(
        top_proc
            .as_str()
            .unwrap()
            .starts_with("dd if=/dev/zero of="),
        "the dd process is listed: {top_proc}"
    );

    // A click on the GitHub step's bar pins its details: they stay when the mouse moves on,
    // and their links take the mouse (a real link under the pointer, not the page behind).
    let gh_bar = format!(
        "#timeline .exec[data-row=\"{}\"] rect:not(.hit)",
        row_of("ci-github")["row"].as_str().unwrap()
    );
    b.click(&gh_bar);
    b.hover(&dd_bar);
    assert_eq!(
        b.eval("[document.getElementById('tip').hidden, document.getElementById('tip').dataset.row, document.getElementById('tip').classList.contains('pinned')]"),
        serde_json::json!([false, row_of("ci-github")["row"], true])
    );
    let detail = |b: &mut Browser, key: &str| {
        b.eval(&format!(
            "(() => {{ const td = document.querySelector('#tip tr[data-key={key}] td'); \
             return td ? [td.textContent, Array.from(td.querySelectorAll('a')).map(a => \
             [a.getAttribute('href'), a.target, a.rel])] : null; }})()"
        ))
    };
    assert_eq!(detail(&mut b, "ci")[0], "GitHub Actions");
    assert_eq!(detail(&mut b, "pipeline")[0], "CI");
    assert_eq!(detail(&mut b, "task")[0], "build");
    assert_eq!(
        detail(&mut b, "run"),
        serde_json::json!(["4242", [[gh_run, "_blank", "noopener noreferrer"]]])
    );
    assert_eq!(
        detail(&mut b, "command")[0],
        "/bin/sleep 0.11",
        "the first program"
    );
    assert_eq!(detail(&mut b, "path")[0], "ci-github");
    let trace = detail(&mut b, "trace")[0].as_str().unwrap().to_owned();
    assert!(
        trace.starts_with("4bf92f3577b34da6a3ce929d0e0e4736, parent span 00f067aa0ba902b7"),
        "{trace}"
    );
    assert_eq!(
        b.eval(
            "(() => { const a = document.querySelector('#tip tr[data-key=run] a'); \
             const r = a.getBoundingClientRect(); \
             return document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2) === a; })()"
        ),
        true,
        "the pinned run link is under the pointer"
    );
    let png = out.join("report.png");
    b.screenshot(&png);
    let shot = fs::read(&png).unwrap();
    assert!(
        shot.starts_with(b"\x89PNG") && shot.len() > 10_000,
        "screenshot of {} bytes",
        shot.len()
    );
    eprintln!("SCREENSHOT {}", png.display());

    // The step whose server is no web address: its run is text in the details too.
    b.click("h1");
    assert_eq!(
        b.eval("document.getElementById('tip').hidden"),
        true,
        "unpinned"
    );
    let bad_bar = format!(
        "#timeline .exec[data-row=\"{}\"] rect:not(.hit)",
        row_of("ci-bad-url")["row"].as_str().unwrap()
    );
    b.hover(&bad_bar);
    assert_eq!(
        detail(&mut b, "run"),
        serde_json::json!([format!("4243 ({bad_run})"), []])
    );
    assert_eq!(b.eval("document.querySelectorAll('#tip a').length"), 0);
    // The GitLab step's task links to its job.
    let gl_bar = format!(
        "#timeline .exec[data-row=\"{}\"] rect:not(.hit)",
        row_of("ci-gitlab")["row"].as_str().unwrap()
    );
    b.hover(&gl_bar);
    assert_eq!(
        detail(&mut b, "task"),
        serde_json::json!(["test #555", [[gl_task, "_blank", "noopener noreferrer"]]])
    );
    // The odd exec's details: its path and command as text; the only bold text is the
    // page's own (one name per listed process and per listed program).
    let odd_bar = format!(
        "#timeline .exec[data-row=\"{}\"] rect:not(.hit)",
        odd_row["row"].as_str().unwrap()
    );
    b.hover(&odd_bar);
    let tip = b.eval("document.getElementById('tip').textContent");
    let tip = tip.as_str().unwrap();
    assert!(tip.contains(odd_command.as_str()), "{tip}");
    assert!(tip.contains(odd_name), "{tip}");
    assert_eq!(
        b.eval("document.querySelectorAll('#tip b').length"),
        b.eval("document.querySelectorAll('#tip ol.procs li, #tip ul.programs li').length"),
        "markup from a record: {tip}"
    );
    assert_eq!(
        b.eval("performance.getEntriesByType('resource').length"),
        0,
        "nothing fetched after all that"
    );

    // The README's picture: the page of this run less the two execs that test escaping and a
    // bad address (nothing to show a reader), as it opens (no details shown, unsorted), whole,
    // 1280 pixels wide (where every column of the table fits), in a page of its own. Always to
    // target/report-test/report-page.png; also to docs/report.png with
    // PROFILER_UPDATE_SCREENSHOT=1 (each run's figures differ a little, so the committed
    // picture changes only when asked).
    let shown: Vec<String> = records
        .iter()
        .filter(|r| r["exec"] != odd_name && r["exec"] != "ci-bad-url")
        .map(|r| r.to_string())
        .collect();
    assert_eq!(shown.len(), 7);
    fs::write(out.join("build.jsonl"), shown.join("\n") + "\n").unwrap();
    // A relative path: the page's title is the file as given.
    let res = Command::new(profiler_bin())
        .current_dir(&out)
        .args(["report", "build.jsonl", "--html", "build.html"])
        .output()
        .unwrap();
    assert!(
        res.status.success(),
        "profiler report: {}",
        String::from_utf8_lossy(&res.stderr)
    );
    b.open(&out.join("build.html"), 1280, 900);
    assert_eq!(
        b.eval("(() => { const s = document.querySelector('.scroll'); return s.scrollWidth <= s.clientWidth; })()"),
        true,
        "the table is cut at 1280 pixels"
    );
    let page_png = out.join("report-page.png");
    b.screenshot_page(&page_png, 1280);
    let shot = fs::read(&page_png).unwrap();
    // The PNG header's width and height (IHDR, big-endian, after the 16-byte signature and
    // chunk head).
    let dim = |at: usize| u32::from_be_bytes(shot[at..at + 4].try_into().unwrap());
    assert!(
        shot.starts_with(b"\x89PNG"),
        "{} is no PNG",
        page_png.display()
    );
    let (w, h) = (dim(16), dim(20));
    assert!(w == 1280 && (600..8000).contains(&h), "{w} x {h} pixels");
    eprintln!("SCREENSHOT {} ({w} x {h})", page_png.display());
    if std::env::var_os("PROFILER_UPDATE_SCREENSHOT").is_some_and(|v| v == "1") {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap()
            .join("docs/report.png");
        fs::copy(&page_png, &docs).unwrap();
        eprintln!("SCREENSHOT copied to {}", docs.display());
    }
    drop(b);
    let _ = fs::remove_dir_all(&scratch);
}
