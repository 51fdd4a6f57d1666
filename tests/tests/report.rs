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

/// Run `argv` born in a new exec `name` of `cg`, remove the exec, and return its record, after
/// checking its start and end against this test's own clock.
fn exec(cg: &TestCgroup, p: &Attached, name: &str, argv: &[&str]) -> Value {
    let before = unix_now_ns();
    let dir = cg.child(name);
    run_born_in(&dir, argv);
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
    // Each of these execs is one process born in the exec and reaped before its removal: its
    // task time is its life, within the exec's.
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
    // whose name needs escaping.
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
    );
    let written = u(&dd["disk"]["write_bytes"]);
    let e = report("dd direct write bytes", written as f64, (16 * MIB) as f64);
    assert!(written >= 16 * MIB && e <= 0.01, "dd wrote {written}");
    let spin = exec(&cg, &p, "spin", &[&busy(), "300000"]);
    assert!(u(&spin["cpu"]["task_time_ns"]) >= 300_000_000, "{spin}");
    let sleep = exec(&cg, &p, "sleep", &["sleep", "0.2"]);
    assert!(u(&sleep["cpu"]["task_time_ns"]) >= 200_000_000, "{sleep}");
    let odd_name = r#"odd <b>&"quoted'"#;
    exec(&cg, &p, odd_name, &["true"]);
    // Still running when the profiler stops: reported as "running".
    let running_dir = cg.child("still-running");
    let mut running = spawn_in(&running_dir, &["sleep", "60"]);
    let running_id = cgroup_id(&running_dir);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (code, records, _) = p.stop();
    assert_eq!(code, 0);
    let _ = running.kill();
    let _ = running.wait();
    assert_eq!(records.len(), 5, "{records:?}");
    assert!(
        records
            .iter()
            .any(|r| r["cgroup_id"].as_u64() == Some(running_id) && r["state"] == "running")
    );

    // On-CPU, run-queue and IO-wait can exceed task time only by what the wake-ups count
    // twice (README, "A picture of a build").
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
    assert!(
        summary.contains("top execs by disk write:\n")
            && summary
                .split("top execs by disk write:\n")
                .nth(1)
                .unwrap()
                .lines()
                .next()
                .unwrap()
                .ends_with("  dd-write"),
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
        "5"
    );
    assert_eq!(
        b.eval("document.getElementById('overview').dataset.running"),
        "1"
    );
    assert_eq!(
        b.eval("document.querySelectorAll('#timeline .exec').length"),
        5
    );
    let rows = b.eval(
        "Array.from(document.querySelectorAll('#execs tbody tr')).map(tr => { \
           const o = { row: tr.dataset.row, id: tr.dataset.cgroupId }; \
           for (const td of tr.cells) o[td.dataset.key] = { v: td.dataset.v, text: td.textContent }; \
           return o; })",
    );
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), records.len());
    let by_id: HashMap<u64, &Value> = records.iter().map(|r| (u(&r["cgroup_id"]), r)).collect();
    let names: HashSet<String> = rows
        .iter()
        .map(|r| r["exec"]["text"].as_str().unwrap().to_owned())
        .collect();
    let want: HashSet<String> = ["dd-write", "spin", "sleep", odd_name, "still-running"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(names, want, "exec names on the page");
    for row in rows {
        let id: u64 = row["id"].as_str().unwrap().parse().unwrap();
        let rec = by_id[&id];
        let cell = |key: &str| row[key]["v"].as_str().unwrap().to_owned();
        assert_eq!(row["exec"]["text"], rec["exec"]);
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
        assert_eq!(
            row["state"]["text"].as_str().unwrap().split(',').next(),
            rec["state"].as_str()
        );
    }
    let dd_row = rows
        .iter()
        .find(|r| r["exec"]["text"] == "dd-write")
        .unwrap();
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

    // Record strings are text, not markup, in a real browser too.
    assert_eq!(
        b.eval("document.querySelectorAll('#execs tbody b, #timeline b, #tip b').length"),
        0
    );
    let odd_row = rows.iter().find(|r| r["exec"]["text"] == odd_name).unwrap();
    let label = b.eval(&format!(
        "document.querySelector('#timeline .exec[data-row=\"{}\"] text.label').textContent",
        odd_row["row"].as_str().unwrap()
    ));
    assert_eq!(label, odd_name);

    // Sorting: a click on "disk write" puts dd first, largest first; a second click reverses.
    b.click("#execs th[data-key=disk_write]");
    let column = |b: &mut Browser, key: &str| -> Vec<(String, u64)> {
        let v = b.eval(&format!(
            "Array.from(document.querySelectorAll('#execs tbody tr')).map(tr => \
             [tr.cells[0].textContent, tr.querySelector('td[data-key={key}]').dataset.v])"
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
    assert_eq!(col[0].0, "dd-write", "{col:?}");
    assert!(col.windows(2).all(|w| w[0].1 >= w[1].1), "{col:?}");
    b.click("#execs th[data-key=disk_write]");
    let col = column(&mut b, "disk_write");
    assert!(col.windows(2).all(|w| w[0].1 <= w[1].1), "{col:?}");
    assert_eq!(col.last().unwrap().0, "dd-write", "{col:?}");
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
    assert!(tip.starts_with("dd-write"), "{tip}");
    assert!(tip.contains(&format!("write {}", bytes(written))), "{tip}");
    assert!(
        tip.contains("dd if=/dev/zero"),
        "the dd process is listed: {tip}"
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
    drop(b);
    let _ = fs::remove_dir_all(&scratch);
}
