//! Fleet queries on Prometheus: the recording and alerting rules of
//! deploy/prometheus/profiler-rules.yml and every query of the Grafana dashboard
//! deploy/grafana/profiler-dashboard.json, on what two real profilers (two "hosts") export,
//! scraped by a real Prometheus. Expected values come from the profilers' own JSON records of
//! the same execs, and from known sizes (direct-IO writes, TCP_INFO of a transfer).

use std::{
    collections::BTreeSet,
    fs,
    io::Write as _,
    os::unix::process::ExitStatusExt as _,
    path::{Path, PathBuf},
    process::{Command, ExitStatus, Stdio},
    time::Duration,
};

use profiler_tests::{backends::*, fleet::*, *};

const MIB: u64 = 1 << 20;
const HOSTS: [&str; 2] = ["fleet-a", "fleet-b"];
/// The CI pipeline of the test's CI execs (GITHUB_WORKFLOW).
const PIPELINE: &str = "fleet";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn rules_file() -> PathBuf {
    repo().join("deploy/prometheus/profiler-rules.yml")
}

/// promtool beside PROMETHEUS_BIN, else Debian's; fails (never skips) when missing.
fn promtool() -> PathBuf {
    let p = std::env::var_os("PROMETHEUS_BIN")
        .map(PathBuf::from)
        .and_then(|p| p.parent().map(|d| d.join("promtool")))
        .unwrap_or_else(|| PathBuf::from("/usr/bin/promtool"));
    assert!(
        p.is_file(),
        "{} missing: it comes with Debian's prometheus package (`cargo xtask test` installs it); \
         PROMETHEUS_BIN's directory is searched first",
        p.display()
    );
    p
}

/// Test 1: `promtool check rules` accepts the rules file and `promtool test rules` passes its
/// unit tests (every recording rule's output and each alert, firing and not, on series shaped
/// like the profiler's: several execs of two steps on two hosts, a failed exec, an OOM kill, a
/// 2 ms exec scraped once, an exec whose labels change while it runs, an empty cgroup, a
/// renamed host, a day's gap for `offset 1d`).
#[test]
fn promtool_checks_and_unit_tests_the_rules() {
    let tool = promtool();
    let dir = repo().join("deploy/prometheus");
    let run = |args: &[&str]| -> String {
        let out = Command::new(&tool)
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap_or_else(|e| panic!("{} {args:?}: {e}", tool.display()));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "promtool {args:?}: {text}");
        text
    };
    let check = run(&["check", "rules", "profiler-rules.yml"]);
    let n: usize = check
        .split("SUCCESS: ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no rule count in {check:?}"));
    let text = fs::read_to_string(rules_file()).unwrap();
    let declared = text
        .lines()
        .filter(|l| {
            let l = l.trim_start();
            l.starts_with("- record:") || l.starts_with("- alert:")
        })
        .count();
    assert_eq!(n, declared, "{check}");
    let test = run(&["test", "rules", "profiler-rules.test.yml"]);
    assert!(test.contains("SUCCESS"), "{test}");
    let tests = fs::read_to_string(dir.join("profiler-rules.test.yml")).unwrap();
    let exprs = tests.matches("- expr:").count();
    let alerts = tests.matches("alertname:").count();
    eprintln!(
        "MEASURED fleet promtool: check rules found {n} rules; test rules passed \
         ({exprs} expression checks, {alerts} alert checks)"
    );
}

/// Test 3: the dashboard imports as the docs say: schema 39, every panel and query on the
/// `${datasource}` variable (a Prometheus data source), `host` and `step` variables from
/// label_values, and every recording rule a query names defined in the rules file.
#[test]
fn dashboard_uses_its_variables_and_the_rules() {
    let dash = Dashboard::load();
    let j = &dash.json;
    assert_eq!(j["schemaVersion"], 39);
    let vars = j["templating"]["list"].as_array().unwrap();
    let var = |n: &str| {
        vars.iter()
            .find(|v| v["name"] == n)
            .unwrap_or_else(|| panic!("no variable {n}"))
    };
    assert_eq!(var("datasource")["type"], "datasource");
    assert_eq!(var("datasource")["query"], "prometheus");
    let ds = serde_json::json!({"type": "prometheus", "uid": "${datasource}"});
    for n in ["host", "step"] {
        assert_eq!(var(n)["type"], "query");
        assert_eq!(var(n)["datasource"], ds, "{n}");
        let (sel, label) = dash.variable(n);
        assert!(!sel.is_empty() && !label.is_empty(), "{n}");
    }
    let rules = fs::read_to_string(rules_file()).unwrap();
    let recorded: BTreeSet<&str> = rules
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("- record: "))
        .map(str::trim)
        .collect();
    let panels = j["panels"].as_array().unwrap();
    let ids: BTreeSet<u64> = panels.iter().map(|p| u(&p["id"])).collect();
    assert_eq!(ids.len(), panels.len(), "panel ids are unique");
    for p in panels {
        assert_eq!(p["datasource"], ds, "{}", p["title"]);
        for t in p["targets"].as_array().unwrap() {
            assert_eq!(t["datasource"], ds, "{}", p["title"]);
        }
    }
    let mut used = BTreeSet::new();
    for (title, refid, expr) in dash.targets() {
        for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')) {
            if word.matches(':').count() == 2 {
                assert!(
                    recorded.contains(word),
                    "{title} ({refid}) names {word}, which the rules do not record"
                );
                used.insert(word.to_owned());
            }
        }
    }
    eprintln!(
        "MEASURED fleet dashboard: {} panels, {} queries, {} of the {} recorded series used",
        panels.len(),
        dash.targets().len(),
        used.len(),
        recorded.len()
    );
}

/// A directory removed on drop, also when the test fails.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The environment of a GitHub Actions step of job `task` in workflow [`PIPELINE`].
fn ci_env(task: &str) -> Vec<(String, String)> {
    [
        ("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        ("GITHUB_ACTIONS", "true"),
        ("GITHUB_WORKFLOW", PIPELINE),
        ("GITHUB_RUN_ID", "9001"),
        ("GITHUB_JOB", task),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// Run `argv` inside the cgroup `dir` with exactly the environment `env`, to completion: its
/// status and standard output.
fn run_exec(dir: &Path, argv: &[&str], env: &[(String, String)]) -> (ExitStatus, String) {
    let out = command_in(dir, argv)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::piped())
        .output()
        .unwrap_or_else(|e| panic!("spawn {argv:?}: {e}"));
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Test 2: two profilers (host.name fleet-a and fleet-b from OTEL_RESOURCE_ATTRIBUTES) follow
/// execs of known figures (dd writing 4 MiB with direct IO three times on both hosts, a
/// transfer of known size over a veth pair, a step exiting 3 on each host, an exec of a few milliseconds, an
/// exec whose labels change while it runs, a sleep running on each host); a real Prometheus
/// scrapes both with the rules loaded. Every recording rule's output equals what the records
/// of the same execs add up to (each exec once, whole), the alerts are evaluated, and every
/// query of the dashboard, its variables substituted, returns the series it promises.
#[test]
fn two_profilers_feed_the_rules_and_every_dashboard_query() {
    let dash = Dashboard::load();
    let (cg_a, cg_b) = (TestCgroup::new("fleet-a"), TestCgroup::new("fleet-b"));
    let scratch = RemoveOnDrop(scratch_dir("fleet"));
    let start = |cg: &TestCgroup, host: &str| {
        let args: Vec<String> = [
            "--cgroup",
            &cg.arg(),
            "--prometheus",
            "127.0.0.1:0",
            "--sample-interval",
            "200ms",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let attrs = format!("host.name={host},deployment.environment=test");
        Attached::start_with(&args, &[("OTEL_RESOURCE_ATTRIBUTES", &attrs)])
    };
    let (pa, pb) = (start(&cg_a, HOSTS[0]), start(&cg_b, HOSTS[1]));
    let (addr_a, addr_b) = (pa.prometheus_addr(), pb.prometheus_addr());
    let rules = rules_file();
    let prom = Prometheus::start_with(&[&addr_a, &addr_b], Duration::from_secs(1), &[&rules]);
    // Each profiler's target_info names its own host.
    let want: Want = [(&addr_a, HOSTS[0]), (&addr_b, HOSTS[1])]
        .into_iter()
        .map(|(i, h)| (vec![i.clone(), h.to_owned()], W::V(1.0)))
        .collect();
    expect(
        &prom,
        "target_info",
        &["instance", "host_name"],
        &want,
        &|_| false,
    );

    // A sleep running on each host throughout.
    let mut ran: Vec<Ran> = Vec::new();
    let mut sleepers = Vec::new();
    for (cg, host, addr) in [(&cg_a, HOSTS[0], &addr_a), (&cg_b, HOSTS[1], &addr_b)] {
        let d = cg.child("idle");
        sleepers.push(spawn_in(&d, &["sleep", "600"]));
        ran.push(Ran {
            host,
            instance: addr.clone(),
            id: cgroup_id(&d),
            running: Some("sleep 600"),
            rec: None,
        });
    }

    // The network step's peer: a server in a namespace of its own, over a veth pair.
    let (ns_c, ns_s) = (Netns::new("fleet-c"), Netns::new("fleet-s"));
    veth(&ns_c, "flc0", "10.213.7.1", &ns_s, "fls0", "10.213.7.2");
    let server_addr = "10.213.7.2:7003";
    let _server = Server::start(Some(&ns_s), server_addr, None);
    let (up, down) = (2 * MIB, MIB);

    let out = scratch.0.join("dd.out");
    let of = format!("of={}", out.display());
    let dd: Vec<&str> = vec![
        "dd",
        "if=/dev/zero",
        &of,
        "bs=1M",
        "count=4",
        "oflag=direct",
        "status=none",
    ];
    let netpeer = netpeer();
    let (up_s, down_s) = (up.to_string(), down.to_string());
    let fetch: Vec<&str> = vec![
        "ip",
        "netns",
        "exec",
        &ns_c.name,
        &netpeer,
        "send",
        server_addr,
        &up_s,
        &down_s,
    ];
    // (host, exec, argv, CI task, expected exit code)
    let plan: Vec<(usize, &str, &[&str], &str, i32)> = vec![
        (0, "dd-1", &dd, "compile", 0),
        (0, "dd-2", &dd, "compile", 0),
        (1, "dd-1", &dd, "compile", 0),
        (0, "fail-1", &["sh", "-c", "exit 3"], "test", 3),
        (1, "fail-1", &["sh", "-c", "exit 3"], "test", 3),
        (0, "net-1", &fetch, "fetch", 0),
        (1, "short-1", &["true"], "noop", 0),
    ];
    let cgs = [&cg_a, &cg_b];
    let addrs = [&addr_a, &addr_b];
    let mut sent = None;
    for (h, name, argv, task, code) in plan {
        let e = cgs[h].child(name);
        let (status, stdout) = run_exec(&e, argv, &ci_env(task));
        assert_eq!(status.code(), Some(code), "{argv:?} on {}", HOSTS[h]);
        if name == "net-1" {
            sent = Some(tcp_info(&stdout));
        }
        ran.push(Ran {
            host: HOSTS[h],
            instance: addrs[h].clone(),
            id: cgroup_id(&e),
            running: None,
            rec: None,
        });
        rmdir(&e);
    }
    let sent = sent.unwrap();
    drop(scratch);

    // An exec whose labels change while it runs: a shell moved into its cgroup is seen (and
    // scraped) before any program starts there, named by its path; then it execs a program.
    let late = cg_a.child("late-1");
    let late_id = cgroup_id(&late);
    let mut sh = Command::new("sh")
        .args(["-c", "read go; exec sleep 0.1"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    fs::write(late.join("cgroup.procs"), sh.id().to_string()).unwrap();
    prom.wait_for(
        &format!(
            "container_uptime_seconds{{profiler_exec_cgroup_id=\"{late_id}\",profiler_exec_step=\"late-1\"}}"
        ),
        secs(30),
    );
    sh.stdin.take().unwrap().write_all(b"go\n").unwrap();
    assert!(sh.wait().unwrap().success());
    rmdir(&late);
    ran.push(Ran {
        host: HOSTS[0],
        instance: addr_a.clone(),
        id: late_id,
        running: None,
        rec: None,
    });

    // A cgroup created and removed with no program ever run in it (a runtime that failed to
    // start its container): an exec without an outcome, that has ended all the same.
    let empty = cg_b.child("empty-1");
    let empty_id = cgroup_id(&empty);
    prom.wait_for(
        &format!("container_uptime_seconds{{profiler_exec_cgroup_id=\"{empty_id}\"}}"),
        secs(30),
    );
    rmdir(&empty);
    ran.push(Ran {
        host: HOSTS[1],
        instance: addr_b.clone(),
        id: empty_id,
        running: None,
        rec: None,
    });

    // An OOM kill, where the execs have the memory controller of cgroup v2 (not on a hybrid
    // host).
    let oom_possible = fs::read_to_string(cg_b.path.join("cgroup.subtree_control"))
        .unwrap_or_default()
        .split_whitespace()
        .any(|c| c == "memory");
    if oom_possible {
        let oom_dir = cg_b.child("oom-1");
        fs::write(oom_dir.join("memory.max"), (32 * MIB).to_string()).unwrap();
        if oom_dir.join("memory.swap.max").exists() {
            fs::write(oom_dir.join("memory.swap.max"), "0").unwrap();
        }
        let argv = [
            "dd",
            "if=/dev/zero",
            "of=/dev/null",
            "bs=64M",
            "count=1",
            "status=none",
        ];
        let (status, _) = run_exec(&oom_dir, &argv, &ci_env("package"));
        assert_eq!(status.signal(), Some(libc::SIGKILL), "dd past memory.max");
        ran.push(Ran {
            host: HOSTS[1],
            instance: addr_b.clone(),
            id: cgroup_id(&oom_dir),
            running: None,
            rec: None,
        });
        rmdir(&oom_dir);
    }

    for r in ran.iter_mut().filter(|r| r.running.is_none()) {
        let p = if r.host == HOSTS[0] { &pa } else { &pb };
        r.rec = Some(p.wait_ended(r.id, secs(30)));
    }

    // The records: each host names itself; the steps are as the commands make them.
    for r in ran
        .iter()
        .filter_map(|r| r.rec.as_ref().map(|rec| (r, rec)))
    {
        assert_eq!(r.1["host"], r.0.host, "{}", r.1);
    }
    let socket_view = ran
        .iter()
        .filter_map(|r| r.rec.as_ref())
        .any(|rec| rec["network"]["sockets"].is_object());
    let oom_view = ran.iter().filter_map(|r| r.rec.as_ref()).any(|rec| {
        rec["cgroup"]["memory_events"]["value"]
            .get("oom_kill")
            .is_some()
    });
    let figs: Vec<Fig> = ran
        .iter()
        .map(|r| Fig::of(r, socket_view, oom_view))
        .collect();
    let step_of = |id: u64, host: &str| -> String {
        let i = id.to_string();
        figs.iter()
            .find(|f| f.id == i && f.host == host)
            .unwrap()
            .step
            .clone()
    };
    let dd_steps: BTreeSet<&str> = figs
        .iter()
        .filter(|f| f.step.starts_with("compile: dd "))
        .map(|f| f.step.as_str())
        .collect();
    assert_eq!(
        dd_steps.len(),
        1,
        "one step identity for the dd execs: {dd_steps:?}"
    );
    let dd_step = dd_steps.into_iter().next().unwrap().to_owned();
    let fail_step = "test: sh -c exit 3";
    let late_step = step_of(late_id, HOSTS[0]);
    assert_ne!(
        late_step, "late-1",
        "the late exec is named by its command in the end"
    );
    let steps: BTreeSet<&str> = figs.iter().map(|f| f.step.as_str()).collect();
    assert!(steps.contains(fail_step), "{steps:?}");
    assert!(steps.contains("noop: true"), "{steps:?}");
    let net_step = figs
        .iter()
        .find(|f| f.step.starts_with("fetch: "))
        .unwrap_or_else(|| panic!("no fetch step: {steps:?}"))
        .step
        .clone();

    // The naive per-series view counts the late exec twice, under two steps.
    let naive_q = format!(
        "count by (profiler_exec_step) (max_over_time(container_uptime_seconds{{instance=\"{addr_a}\",profiler_exec_cgroup_id=\"{late_id}\"}}[5m]))"
    );
    let want: Want = [("late-1", 1.0), (late_step.as_str(), 1.0)]
        .into_iter()
        .map(|(k, v)| (vec![k.to_owned()], W::V(v)))
        .collect();
    expect(&prom, &naive_q, &["profiler_exec_step"], &want, &|_| false);
    let naive_steps: Vec<&String> = want.keys().map(|k| &k[0]).collect();

    // What rate() and increase() make of the short exec: its series starts with its final
    // values, so less than its CPU time (nothing when never scraped while it ran).
    let short = figs.iter().find(|f| f.step == "noop: true").unwrap();
    let short_wall = ran
        .iter()
        .find(|r| r.id.to_string() == short.id)
        .and_then(|r| r.rec.as_ref())
        .map(|rec| u(&rec["wall_ns"]))
        .unwrap();
    let short_cpu = short.cpu.val();
    assert!(short_cpu > 0.0, "{short:?}");
    let short_q = |f: &str| {
        format!(
            "sum({f}(container_cpu_time_seconds_total{{instance=\"{}\",profiler_exec_cgroup_id=\"{}\"}}[5m]))",
            short.instance, short.id
        )
    };
    let increase = wait_check(&prom, &short_q("increase"), secs(30), |g| {
        if g.len() == 1 {
            Ok(())
        } else {
            Err("no answer".into())
        }
    })[0]
        .1;
    assert!(
        increase < short_cpu,
        "increase() {increase} of an exec of a few milliseconds of {short_cpu} CPU s"
    );

    // Every rule evaluates without error.
    wait_check(&prom, "vector(1)", secs(30), |_| {
        let bad: Vec<String> = prom
            .rules()
            .iter()
            .filter(|r| r["health"] != "ok")
            .map(|r| format!("{} {} {}", r["name"], r["health"], r["lastError"]))
            .collect();
        if bad.is_empty() {
            Ok(())
        } else {
            Err(bad.join("; "))
        }
    });

    // The recording rules, at every level, against the records.
    let exec_key = |f: &Fig| Some(vec![f.instance.clone(), f.id.clone()]);
    let host_step = |f: &Fig| Some(vec![f.host.clone(), f.step.clone()]);
    let step = |f: &Fig| Some(vec![f.step.clone()]);
    let pipeline = |f: &Fig| (!f.pipeline.is_empty()).then(|| vec![f.pipeline.clone()]);
    let one = |_: &Fig| Some(W::V(1.0));
    let none = |_: &Key| false;
    // Per exec: each once, with its host and its final step.
    let want = agg(
        &figs,
        |f| {
            Some(vec![
                f.instance.clone(),
                f.id.clone(),
                f.host.clone(),
                f.step.clone(),
            ])
        },
        one,
    );
    expect(
        &prom,
        "exec:profiler_exec_info:latest_5m",
        &[
            "instance",
            "profiler_exec_cgroup_id",
            "host_name",
            "profiler_exec_step",
        ],
        &want,
        &none,
    );
    let levels: [(&str, &str, &[&str], KeyFn); 4] = [
        (
            "exec",
            "max_5m",
            &["instance", "profiler_exec_cgroup_id"],
            &exec_key,
        ),
        (
            "host_step",
            "sum_5m",
            &["host_name", "profiler_exec_step"],
            &host_step,
        ),
        ("step", "sum_5m", &["profiler_exec_step"], &step),
        ("pipeline", "sum_5m", &["cicd_pipeline_name"], &pipeline),
    ];
    let mut checked = 1;
    for (level, op, keys, key) in levels {
        if level != "exec" {
            let want = agg(&figs, key, one);
            expect(
                &prom,
                &format!("{level}:profiler_execs:count_5m"),
                keys,
                &want,
                &none,
            );
            checked += 1;
        }
        for m in metrics() {
            let want = level_want(&figs, &m, key);
            let q = format!("{level}:{}:{op}", m.name);
            expect(&prom, &q, &keys_with(keys, &m), &want, &none);
            checked += 1;
        }
    }
    // Ratios (a running exec's are unknown: the sleeps' step is left out).
    let sum_by = |key: &dyn Fn(&Fig) -> Option<Key>, v: fn(&Fig) -> Option<W>| agg(&figs, key, v);
    let ratio = |a: &Want, b: &Want, add_a: bool| -> Want {
        a.iter()
            .filter_map(|(k, x)| {
                let (W::V(x), Some(W::V(y))) = (*x, b.get(k).copied()) else {
                    return None;
                };
                let d = if add_a { x + y } else { y };
                (d > 0.0).then(|| (k.clone(), W::V(x / d)))
            })
            .collect()
    };
    let not_sleep = |k: &Key| k[0] == "sleep 600";
    for (level, keys, key) in [
        (
            "step",
            &["profiler_exec_step"][..],
            &step as &dyn Fn(&Fig) -> Option<Key>,
        ),
        ("pipeline", &["cicd_pipeline_name"][..], &pipeline),
    ] {
        let cpu = sum_by(key, |f| Some(f.cpu));
        let io = sum_by(key, |f| Some(f.io));
        let failures = sum_by(key, |f| f.failed.map(|x| W::V(if x { 1.0 } else { 0.0 })));
        let exits = sum_by(key, |f| f.failed.map(|_| W::V(1.0)));
        expect(
            &prom,
            &format!("{level}:profiler_exec_io_wait_share:ratio_5m"),
            keys,
            &ratio(&io, &cpu, true),
            &not_sleep,
        );
        expect(
            &prom,
            &format!("{level}:profiler_exec_failures_per_exits:ratio_5m"),
            keys,
            &ratio(&failures, &exits, false),
            &not_sleep,
        );
        checked += 2;
        if level == "step" {
            let count = sum_by(key, |_| Some(W::V(1.0)));
            let per_exec: Want = cpu
                .iter()
                .filter(|(k, _)| !not_sleep(k))
                .map(|(k, v)| (k.clone(), W::V(v.val() / count[k].val())))
                .collect();
            expect(
                &prom,
                "step:profiler_exec_cpu_seconds_per_exec:avg_5m",
                keys,
                &per_exec,
                &not_sleep,
            );
            checked += 1;
        }
    }
    // Running now: the sleep on each host.
    let want: Want = HOSTS
        .iter()
        .map(|h| (vec![h.to_string()], W::V(1.0)))
        .collect();
    expect(
        &prom,
        "host:profiler_execs_running:count",
        &["host_name"],
        &want,
        &none,
    );
    checked += 1;
    let rule_count = prom
        .rules()
        .iter()
        .filter(|r| r["type"] == "recording")
        .count();
    assert_eq!(checked, rule_count, "every recording rule checked");

    // The rules' figures against the known sizes: dd's 3 x 4 MiB, the transfer's bytes.
    let one_value = |q: String| -> f64 {
        let got = prom.query(&q);
        assert_eq!(got.len(), 1, "{q}: {got:?}");
        got[0].1
    };
    let dd_write = one_value(format!(
        "step:profiler_exec_disk_bytes:sum_5m{{profiler_exec_step=\"{}\",disk_io_direction=\"write\"}}",
        lit(&dd_step)
    ));
    let err = report(
        "fleet dd step bytes written (step rule, 3 execs on 2 hosts)",
        dd_write,
        (12 * MIB) as f64,
    );
    assert!(
        dd_write >= (12 * MIB) as f64 && err <= 0.01,
        "dd step wrote {dd_write} B for 3 x 4 MiB of direct IO"
    );
    let tx = one_value(format!(
        "step:profiler_exec_network_bytes:sum_5m{{profiler_exec_step=\"{}\",network_io_direction=\"transmit\"}}",
        lit(&net_step)
    ));
    report(
        "fleet fetch step bytes sent (step rule) vs TCP_INFO",
        tx,
        sent.bytes_sent as f64,
    );
    assert!(
        sent.tx(0).contains(&(tx as u64)),
        "fetch step sent {tx} B, TCP_INFO {sent:?}"
    );
    let failures = agg(&figs, host_step, |f| {
        f.failed.map(|x| W::V(if x { 1.0 } else { 0.0 }))
    });
    for h in HOSTS {
        assert_eq!(
            failures[&vec![h.to_owned(), fail_step.to_owned()]],
            W::V(1.0)
        );
    }

    // The failing step's alert is evaluated (pending for its `for`), no other step's.
    let want: Want = [(vec![fail_step.to_owned()], W::V(1.0))]
        .into_iter()
        .collect();
    expect(
        &prom,
        "ALERTS{alertname=\"ProfilerStepFailureRatioHigh\"}",
        &["profiler_exec_step"],
        &want,
        &none,
    );
    let oom_steps: Want = agg(&figs, step, |f| {
        f.oom.filter(|v| *v != W::V(0.0) && *v != W::Any)
    })
    .into_iter()
    .collect();
    expect(
        &prom,
        "ALERTS{alertname=\"ProfilerStepOOMKilled\"}",
        &["profiler_exec_step"],
        &oom_steps,
        &none,
    );

    // The dashboard: its variables, then every query under two selections.
    let (sel, label) = dash.variable("host");
    let got = prom.query(&format!("group by ({label}) ({sel})"));
    let hosts: BTreeSet<&str> = got.iter().map(|(l, _)| l[&label].as_str()).collect();
    assert_eq!(hosts, BTreeSet::from(HOSTS), "$host's values");
    let all = Selection {
        hosts: HOSTS.iter().map(|h| h.to_string()).collect(),
        steps: None,
    };
    let (sel, label) = dash.variable("step");
    let got = prom.query(&format!("group by ({label}) ({})", all.substitute(&sel)));
    let got: BTreeSet<&str> = got.iter().map(|(l, _)| l[&label].as_str()).collect();
    assert_eq!(got, steps, "$step's values");
    let narrow = Selection {
        hosts: vec![HOSTS[1].to_owned()],
        steps: Some(vec![dd_step.clone(), fail_step.to_owned()]),
    };
    let mut queries = 0;
    for s in [&all, &narrow] {
        for (title, refid, expr) in dash.targets() {
            let q = s.substitute(&expr);
            let (keys, want, ignore) = panel_want(&title, &refid, &figs, s);
            let ignore = |k: &Key| ignore && k.first().is_some_and(|s| s == "sleep 600");
            wait_check(&prom, &q, secs(60), |got| {
                compare(got, &keys, &want, &ignore).map_err(|e| format!("{title} ({refid}): {e}"))
            });
            queries += 1;
        }
    }

    let cpu = one_value(format!(
        "step:profiler_exec_cpu_seconds:sum_5m{{profiler_exec_step=\"{}\"}}",
        lit(&dd_step)
    ));
    eprintln!(
        "MEASURED fleet rules: {checked} recording rules equal the records of {} execs on 2 hosts \
         (dd step: 3 execs, {dd_write} B written, {cpu:.6} CPU s; {fail_step:?}: 2 failures, \
         1 per host; fetch step {tx} B sent)",
        figs.len()
    );
    eprintln!(
        "MEASURED fleet short exec: lived {short_wall} ns, {short_cpu:.9} CPU s; increase() over \
         5m says {increase}, the rules {short_cpu:.9}"
    );
    eprintln!(
        "MEASURED fleet label change: exec late-1 was 2 series (steps {naive_steps:?}); the rules \
         count it once, as {late_step:?}"
    );
    eprintln!(
        "MEASURED fleet dashboard: {queries} queries ({} per selection) and 2 variables answered \
         as expected, all hosts and steps, and host {} with 2 steps",
        queries / 2,
        HOSTS[1]
    );
    if oom_possible {
        eprintln!("MEASURED fleet OOM: the OOM step's kill counted and its alert firing");
    } else {
        eprintln!(
            "MEASURED fleet OOM: no memory.max in cgroup v2 here (hybrid host): no OOM exec, no \
             OOM series, the OOM queries answer nothing"
        );
    }
    drop(_server);
    for mut s in sleepers {
        let _ = s.kill();
        let _ = s.wait();
    }
    pa.stop();
    pb.stop();
}
