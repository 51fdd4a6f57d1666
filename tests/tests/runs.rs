//! `profiler report` over many runs, end to end: four real builds (the same steps, each an
//! exec, with known disk writes) are recorded under `profiler attach --output json`, three as
//! BASE and one as NEW, in which one step writes four times as much. `report` groups them by
//! step, `--compare` must flag that step's disk write alone (and `--fail-on` exit 3 on it), and
//! the Markdown's Mermaid gantt is rendered by the real mermaid library in headless Chromium.
//! Root and BPF needed (the recording); Chromium is Debian's package, mermaid's browser bundle
//! the npm package that `cargo xtask test` installs and names in MERMAID_JS: without either the
//! tests fail, they do not skip.

use std::{
    collections::BTreeMap,
    fs,
    io::Write as _,
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    sync::OnceLock,
};

use profiler_tests::{
    browser::{self, Browser},
    *,
};

/// dd's block size in the steps that write.
const BLOCK: u64 = 64 * 1024;
/// The blocks the compile step writes in each BASE build (a spread, in no order) and in NEW.
const BASE_COMPILE: [u64; 3] = [60, 68, 64];
const NEW_COMPILE: u64 = 256;
/// The pack step writes the same in every build.
const PACK: u64 = 32;
/// A step whose command Markdown and Mermaid both have syntax for: the name a program gives
/// itself (argv[0]), which is the exec's command, hence its step.
const HOSTILE: &str = "section: #1; <b>hostile</b> & co";

/// The steps of a build, each run as its own exec (a child cgroup of the test's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// `sh compile.sh`: dd of a count of blocks that the script holds (the command line is
    /// the same in every build: so is the step).
    Compile,
    /// A 30 ms spin, twice per build.
    Test,
    /// `sh pack.sh`: dd of PACK blocks.
    Pack,
    /// `sh flaky.sh`: exits 0 in BASE, 1 in NEW.
    Flaky,
    /// /bin/true named HOSTILE.
    Hostile,
    /// Only in BASE.
    Lint,
    /// Only in NEW.
    Docs,
}

/// One recorded build: its file and its execs' records, in the order run.
struct Build {
    file: PathBuf,
    records: Vec<(Kind, Value)>,
}

/// The four builds, recorded once for the tests of this file.
struct Recording {
    dir: PathBuf,
    base: Vec<Build>,
    new: Build,
    /// Each kind's step identity, as the records name it.
    steps: BTreeMap<Kind, String>,
}

impl Recording {
    fn step(&self, k: Kind) -> &str {
        &self.steps[&k]
    }

    fn base_files(&self) -> Vec<String> {
        self.base
            .iter()
            .map(|b| b.file.display().to_string())
            .collect()
    }
}

/// Where the tests leave their files: target/report-test.
fn out_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("target/report-test");
    fs::create_dir_all(&d).unwrap();
    d
}

/// Run `argv` in the exec `dir` with a clean environment (a CI runner's variables would
/// make all four builds one CI run), named `argv0` where given; its exit code.
fn run_step(dir: &Path, argv0: Option<&str>, argv: &[&str]) -> i32 {
    let mut cmd = command_in(dir, argv);
    if let Some(a) = argv0 {
        cmd.arg0(a);
    }
    let st = cmd
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdout(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("spawn {argv:?}: {e}"));
    st.code()
        .unwrap_or_else(|| panic!("{argv:?} ended by a signal: {st}"))
}

/// The scripts of the steps, as one build runs them: what differs from build to build is in
/// the scripts, never on the command line.
fn write_scripts(s: &Path, compile_blocks: u64, flaky_exit: i32) {
    let dd = |out: &str, n: u64| {
        format!(
            "exec dd if=/dev/zero of={}/{out} bs={BLOCK} count={n} oflag=direct conv=notrunc status=none\n",
            s.display()
        )
    };
    fs::write(s.join("compile.sh"), dd("compile.out", compile_blocks)).unwrap();
    fs::write(s.join("pack.sh"), dd("pack.out", PACK)).unwrap();
    fs::write(s.join("flaky.sh"), format!("exit {flaky_exit}\n")).unwrap();
    fs::write(s.join("lint.sh"), "exit 0\n").unwrap();
    fs::write(s.join("docs.sh"), "exit 0\n").unwrap();
}

/// The command of a step, and the name it runs under (argv[0]) where that differs.
fn argv_of(k: Kind, s: &Path, busy: &str) -> (Vec<String>, Option<&'static str>) {
    let sh = |f: &str| vec!["sh".to_owned(), s.join(f).display().to_string()];
    match k {
        Kind::Compile => (sh("compile.sh"), None),
        Kind::Test => (vec![busy.to_owned(), "30000".into()], None),
        Kind::Pack => (sh("pack.sh"), None),
        Kind::Flaky => (sh("flaky.sh"), None),
        Kind::Hostile => (vec!["/bin/true".into()], Some(HOSTILE)),
        Kind::Lint => (sh("lint.sh"), None),
        Kind::Docs => (sh("docs.sh"), None),
    }
}

/// A scratch directory, removed on drop (also when the test fails).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Record four builds: BASE 1-3 then NEW, one after the other under one profiler.
fn record() -> Recording {
    let cg = TestCgroup::new("runs");
    let guard = Scratch(scratch_dir("runs"));
    let scratch = guard.0.clone();
    let dir = out_dir().join("runs");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let busy = busy();
    // The outputs exist at their largest, written and synced before any build: each dd of a
    // build overwrites blocks the file has (conv=notrunc), so that no exec allocates any.
    for (out, n) in [("compile.out", NEW_COMPILE), ("pack.out", PACK)] {
        let mut f = fs::File::create(scratch.join(out)).unwrap();
        f.write_all(&vec![0u8; (n * BLOCK) as usize]).unwrap();
        f.sync_all().unwrap();
    }
    // Programs and scripts in the page cache before the recording: no exec reads the disk.
    write_scripts(&scratch, 1, 0);
    for k in [Kind::Compile, Kind::Test, Kind::Pack, Kind::Lint] {
        let (argv, _) = argv_of(k, &scratch, &busy);
        let st = Command::new(&argv[0])
            .args(&argv[1..])
            .env_clear()
            .status()
            .unwrap();
        assert!(st.success(), "warm-up {argv:?}: {st}");
    }

    let p = Attached::start(&cg, &[]);
    let mut builds = Vec::new();
    let names = ["base1", "base2", "base3", "new"];
    for (b, name) in names.iter().enumerate() {
        let is_new = b == 3;
        let blocks = if is_new { NEW_COMPILE } else { BASE_COMPILE[b] };
        write_scripts(&scratch, blocks, i32::from(is_new));
        let last = if is_new { Kind::Docs } else { Kind::Lint };
        let plan = [
            Kind::Compile,
            Kind::Test,
            Kind::Pack,
            Kind::Test,
            Kind::Flaky,
            Kind::Hostile,
            last,
        ];
        let mut records = Vec::new();
        for (i, k) in plan.into_iter().enumerate() {
            let e = cg.child(&format!("{name}-{i}-{k:?}").to_lowercase());
            let (argv, argv0) = argv_of(k, &scratch, &busy);
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            let code = run_step(&e, argv0, &argv);
            let want = i32::from(k == Kind::Flaky && is_new);
            assert_eq!(code, want, "{name} {k:?}: {argv:?}");
            let id = cgroup_id(&e);
            rmdir(&e);
            let rec = p.wait_ended(id, secs(30));
            records.push((k, rec));
        }
        builds.push(records);
    }
    let (code, all, _) = p.stop();
    assert_eq!(code, 0, "the profiler's exit");
    drop(cg);
    drop(guard);

    // Every exec once, ended; the same kind is the same step in every build, and no two kinds
    // share one.
    let ids: Vec<u64> = builds
        .iter()
        .flatten()
        .map(|(_, r)| u(&r["cgroup_id"]))
        .collect();
    let ended = all.iter().filter(|r| r["state"] == "ended").count();
    assert_eq!(ended, ids.len(), "one ended record per exec: {all:?}");
    let mut steps: BTreeMap<Kind, String> = BTreeMap::new();
    for (k, r) in builds.iter().flatten() {
        let step = r["step"]
            .as_str()
            .unwrap_or_else(|| panic!("no step in {r}"));
        let known = steps.entry(*k).or_insert_with(|| step.to_owned());
        assert_eq!(known, step, "{k:?}: one step identity in every build");
    }
    let mut distinct: Vec<&String> = steps.values().collect();
    distinct.dedup();
    assert_eq!(distinct.len(), steps.len(), "{steps:?}");
    assert!(
        steps[&Kind::Hostile].starts_with(HOSTILE),
        "{:?}",
        steps[&Kind::Hostile]
    );

    // The ground truth: each dd's direct writes are its exec's disk writes; nothing is read.
    for (b, records) in builds.iter().enumerate() {
        for (k, r) in records {
            let truth = match k {
                Kind::Compile if b == 3 => NEW_COMPILE * BLOCK,
                Kind::Compile => BASE_COMPILE[b] * BLOCK,
                Kind::Pack => PACK * BLOCK,
                _ => 0,
            };
            let written = u(&r["disk"]["write_bytes"]);
            let read = u(&r["disk"]["read_bytes"]);
            eprintln!(
                "MEASURED {} {k:?}: disk write {written} (dd {truth}), read {read}, wall {} ns",
                names[b],
                u(&r["wall_ns"])
            );
            if truth > 0 {
                let e = report(
                    &format!("{} {k:?} direct write bytes", names[b]),
                    written as f64,
                    truth as f64,
                );
                assert!(
                    written >= truth && e <= 0.01,
                    "{k:?} wrote {written}, dd {truth}: {r}"
                );
            } else {
                assert!(written < 64 * 1024, "{k:?} wrote {written}: {r}");
            }
        }
    }

    let mut files = Vec::new();
    for (name, records) in names.iter().zip(builds) {
        let file = dir.join(format!("{name}.jsonl"));
        let lines: Vec<String> = records.iter().map(|(_, r)| r.to_string()).collect();
        fs::write(&file, lines.join("\n") + "\n").unwrap();
        files.push(Build { file, records });
    }
    let new = files.pop().unwrap();
    Recording {
        dir,
        base: files,
        new,
        steps,
    }
}

/// The recording, made by the first test that asks for it.
fn recording() -> &'static Recording {
    static R: OnceLock<Recording> = OnceLock::new();
    R.get_or_init(record)
}

/// Run `profiler report ARGS` in the recording's directory.
fn report_cmd(dir: &Path, args: &[&str]) -> Output {
    // Absolute: the command runs in `dir`.
    let bin = fs::canonicalize(profiler_bin()).unwrap();
    let out = Command::new(bin)
        .current_dir(dir)
        .args(["report"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("panicked"),
        "report {args:?} panicked: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `report --json out.json --markdown=out.md --html out.html [extra] --compare BASE... --
/// new.jsonl` (options first: whatever follows `--` is an input); returns its output.
fn compare(r: &Recording, extra: &[&str]) -> Output {
    let mut args: Vec<String> = [
        "--json",
        "out.json",
        "--markdown=out.md",
        "--html",
        "out.html",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args.push("--compare".into());
    args.extend(r.base_files());
    args.push("--".into());
    args.push(r.new.file.display().to_string());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    report_cmd(&r.dir, &args)
}

/// A figure's entry in a step's comparison.
fn figure<'a>(step: &'a Value, key: &str) -> Option<&'a Value> {
    step["figures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["figure"] == key)
}

/// The step `name` in a list of steps.
fn step_in<'a>(steps: &'a Value, name: &str) -> &'a Value {
    steps
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == name)
        .unwrap_or_else(|| panic!("no step {name:?} in {steps:#}"))
}

/// Nearest-rank median and max of a step's execs' disk writes.
fn median_max(mut v: Vec<u64>) -> (u64, u64) {
    v.sort_unstable();
    let median = v[v.len().div_ceil(2) - 1];
    (median, *v.last().unwrap())
}

/// The disk writes of kind `k` in `builds`.
fn writes(builds: &[&Build], k: Kind) -> Vec<u64> {
    builds
        .iter()
        .flat_map(|b| &b.records)
        .filter(|(kind, _)| *kind == k)
        .map(|(_, r)| u(&r["disk"]["write_bytes"]))
        .collect()
}

/// Test 1: the step made heavier is flagged, on its disk write, by the growth dd was told to
/// make; no other step's bytes are; `--fail-on` turns it into exit 3.
#[test]
fn compare_flags_the_step_made_heavier() {
    let r = recording();
    let base: Vec<&Build> = r.base.iter().collect();

    // Steps of BASE alone: each step's execs, and its disk writes as dd made them.
    let mut args = r.base_files();
    args.extend(["--json".into(), "-".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = report_cmd(&r.dir, &args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("--json - is no JSON ({e}): {}", text(&out.stdout)));
    assert_eq!(doc["runs"].as_array().unwrap().len(), 3, "one run per file");
    assert_eq!(doc["execs"], 21);
    assert_eq!(doc["skipped_lines"], 0);
    let steps = &doc["steps"];
    assert_eq!(steps.as_array().unwrap().len(), 6, "{steps:#}");
    for (k, execs) in [
        (Kind::Compile, 3),
        (Kind::Test, 6),
        (Kind::Pack, 3),
        (Kind::Flaky, 3),
        (Kind::Hostile, 3),
        (Kind::Lint, 3),
    ] {
        let s = step_in(steps, r.step(k));
        assert_eq!((u(&s["execs"]), u(&s["runs"])), (execs, 3), "{k:?}: {s}");
        assert_eq!(s["failed"], 0, "{k:?}");
        let w = &s["figures"]["write"];
        let recorded = writes(&base, k);
        let (median, max) = median_max(recorded.clone());
        assert_eq!(u(&w["count"]), execs, "{k:?}: {w}");
        assert_eq!(
            (u(&w["median"]), u(&w["max"]), u(&w["min"])),
            (median, max, *recorded.iter().min().unwrap()),
            "{k:?}: the records' median and max: {w}"
        );
        // The writes dd made: median 64 blocks (of 60, 68, 64), max 68; pack 32 every time.
        let (truth_median, truth_max) = match k {
            Kind::Compile => (64 * BLOCK, 68 * BLOCK),
            Kind::Pack => (PACK * BLOCK, PACK * BLOCK),
            _ => (0, 0),
        };
        eprintln!(
            "MEASURED steps {k:?}: disk write median {median} max {max}, dd {truth_median} {truth_max}"
        );
        // Exactly: dd's direct writes overwrite blocks the files have (no allocation, no
        // metadata in the exec's IO), and the other steps write nothing.
        assert_eq!(
            (median, max),
            (truth_median, truth_max),
            "{k:?}: disk write median and max against dd's"
        );
    }
    assert!(
        !steps
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["step"] == r.step(Kind::Docs)),
        "a NEW step in BASE's steps"
    );

    // BASE against NEW.
    for f in ["out.json", "out.md", "out.html"] {
        let _ = fs::remove_file(r.dir.join(f));
    }
    let out = compare(r, &[]);
    let terminal = text(&out.stdout);
    eprintln!("{terminal}");
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        text(&out.stderr)
    );
    let doc: Value =
        serde_json::from_str(&fs::read_to_string(r.dir.join("out.json")).unwrap()).unwrap();
    assert_eq!(doc["margin_pct"], 10);
    assert_eq!((u(&doc["base"]["execs"]), u(&doc["new"]["execs"])), (21, 7));
    let steps = &doc["steps"];
    assert_eq!(steps.as_array().unwrap().len(), 7, "{steps:#}");

    let compile = step_in(steps, r.step(Kind::Compile));
    assert_eq!(compile["status"], "changed", "{compile:#}");
    let w = figure(compile, "write").expect("compile's disk write compared");
    assert_eq!(w["verdict"], "heavier", "{w:#}");
    let base_median = median_max(writes(&base, Kind::Compile)).0;
    let new_write = writes(&[&r.new], Kind::Compile)[0];
    assert_eq!(
        (u(&w["base"]["median"]), u(&w["new"]["median"])),
        (base_median, new_write),
        "{w:#}"
    );
    let pct = f(&w["change_pct"]);
    let exact = (new_write as f64 - base_median as f64) * 100.0 / base_median as f64;
    assert!(
        (pct - exact).abs() < 1e-6,
        "change {pct}%, records {exact}%"
    );
    // dd wrote 256 blocks against BASE's median of 64: four times as much, +300%.
    let ratio = 1.0 + pct / 100.0;
    let e = report(
        "compile disk write NEW/BASE (x1000)",
        ratio * 1000.0,
        (NEW_COMPILE as f64 / 64.0) * 1000.0,
    );
    assert!(e <= 0.01, "change {pct:.2}% against dd's +300%");

    // No other byte figure moved: the other steps' writes and reads are what dd (or nothing)
    // made, the same in every build; nor compile's reads or network.
    let mut flagged = Vec::new();
    for s in steps.as_array().unwrap() {
        for fig in s["figures"].as_array().unwrap() {
            let key = fig["figure"].as_str().unwrap();
            if !["read", "write", "network"].contains(&key) || fig["verdict"] == "same" {
                continue;
            }
            flagged.push(format!(
                "{} {key} {}",
                s["step"].as_str().unwrap(),
                fig["verdict"].as_str().unwrap()
            ));
        }
    }
    assert_eq!(
        flagged,
        [format!("{} write heavier", r.step(Kind::Compile))],
        "byte figures flagged"
    );
    for k in [Kind::Test, Kind::Pack, Kind::Flaky, Kind::Hostile] {
        let s = step_in(steps, r.step(k));
        assert_eq!(
            (u(&s["base_execs"]), u(&s["new_execs"])),
            (
                if k == Kind::Test { 6 } else { 3 },
                if k == Kind::Test { 2 } else { 1 }
            )
        );
        let w = figure(s, "write").unwrap_or_else(|| panic!("{k:?} has no write: {s:#}"));
        assert_eq!(w["verdict"], "same", "{k:?}: {w:#}");
    }
    let flaky = step_in(steps, r.step(Kind::Flaky));
    assert_eq!(
        (
            &flaky["status"],
            u(&flaky["base_failed"]),
            u(&flaky["new_failed"])
        ),
        (&Value::from("changed"), 0, 1),
        "fails in NEW, never in BASE: {flaky:#}"
    );
    let docs = step_in(steps, r.step(Kind::Docs));
    assert_eq!(
        (
            &docs["status"],
            u(&docs["base_execs"]),
            u(&docs["new_execs"])
        ),
        (&Value::from("new"), 0, 1),
        "{docs:#}"
    );
    let lint = step_in(steps, r.step(Kind::Lint));
    assert_eq!(
        (
            &lint["status"],
            u(&lint["base_execs"]),
            u(&lint["new_execs"])
        ),
        (&Value::from("gone"), 3, 0),
        "{lint:#}"
    );
    // Changed steps first, the most grown first.
    assert_eq!(steps[0]["step"], r.step(Kind::Compile), "{steps:#}");

    // The terminal's verdict says the same.
    let heavier: Vec<&str> = terminal
        .lines()
        .filter(|l| l.contains("disk write") && l.contains("HEAVIER"))
        .collect();
    assert_eq!(heavier.len(), 1, "{terminal}");
    assert!(heavier[0].contains("+300%"), "{terminal}");
    assert!(
        terminal.contains(&format!(
            "new      {}  (1 execs, only in NEW)",
            r.step(Kind::Docs)
        )),
        "{terminal}"
    );
    assert!(
        terminal.contains(&format!(
            "gone     {}  (3 execs, only in BASE)",
            r.step(Kind::Lint)
        )),
        "{terminal}"
    );

    // The Markdown: the moved figure, the new and gone steps, the gantt.
    let md = fs::read_to_string(r.dir.join("out.md")).unwrap();
    eprintln!("MARKDOWN\n{md}");
    let rows: Vec<&str> = md
        .lines()
        .filter(|l| l.contains("| disk write |") && l.contains('🔺'))
        .collect();
    assert_eq!(rows.len(), 1, "{md}");
    assert!(
        rows[0].contains("compile.sh") && rows[0].ends_with("| 🔺 +300% |"),
        "{md}"
    );
    assert!(
        md.contains("Only in NEW: ") && md.contains("Only in BASE: "),
        "{md}"
    );
    assert_eq!(md.matches("```mermaid\n").count(), 1, "{md}");
    // The hostile name in a table cell: its Markdown is quoted.
    assert!(
        !md.lines()
            .filter(|l| l.starts_with('|'))
            .any(|l| l.contains("<b>")),
        "unquoted markup in a table: {md}"
    );

    // The page: the same comparison.
    let html = fs::read_to_string(r.dir.join("out.html")).unwrap();
    assert_eq!(
        html.matches("data-status=\"changed\" data-figure=\"write\"")
            .count(),
        1,
        "{html}"
    );
    assert!(
        !html.contains(HOSTILE),
        "the hostile name unescaped in the page"
    );

    // --fail-on: beyond 50% of growth, exit 3 naming the step; beyond 500%, none.
    let out = compare(r, &["--fail-on", "write=50%"]);
    let err = text(&out.stderr);
    eprintln!("--fail-on write=50%: exit {:?}: {err}", out.status.code());
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains(&format!("{}: write +", r.step(Kind::Compile)))
            && err.contains("crossed by 1 step figure(s)"),
        "{err}"
    );
    let out = compare(r, &["--fail-on", "write=500%"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // A step that fails in NEW alone.
    let out = compare(r, &["--fail-on", "failed"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains(&format!(
            "{}: failed 1 time(s), never in BASE",
            r.step(Kind::Flaky)
        )),
        "{err}"
    );
}

/// A page that loads mermaid's browser bundle from its local path, to render into.
fn mermaid_page(dir: &Path) -> PathBuf {
    let js = browser::mermaid_js();
    let page = dir.join("mermaid.html");
    fs::write(
        &page,
        format!(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\">\
             <script src=\"file://{}\"></script></head>\n<body><div id=\"out\"></div></body></html>\n",
            js.display()
        ),
    )
    .unwrap();
    page
}

/// The version of the mermaid package whose bundle MERMAID_JS is (its package.json, two
/// directories up).
fn mermaid_version() -> String {
    let js = browser::mermaid_js();
    let pkg = js
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("package.json");
    let v: Value =
        serde_json::from_str(&fs::read_to_string(&pkg).unwrap_or_default()).unwrap_or_default();
    v["version"]
        .as_str()
        .unwrap_or("of unknown version")
        .to_owned()
}

/// Render the Mermaid `text` into #out, as the SVG with id `id`: Err(mermaid's error) when it
/// fails or takes over 20 seconds.
fn render(b: &mut Browser, id: &str, text: &str) -> Result<(), String> {
    let src = serde_json::to_string(text).unwrap();
    let v = b.eval(&format!(
        "(async () => {{ \
           mermaid.initialize({{ startOnLoad: false, securityLevel: 'strict' }}); \
           const r = await Promise.race([mermaid.render('{id}', {src}), \
             new Promise((_, no) => setTimeout(() => no(new Error('no result in 20 s')), 20000))]); \
           document.getElementById('out').innerHTML = r.svg; return 'ok'; \
         }})().catch(e => 'error: ' + e)"
    ));
    match v.as_str() {
        Some("ok") => Ok(()),
        _ => Err(v.to_string()),
    }
}

/// The one ```mermaid block of a Markdown text.
fn mermaid_block(md: &str) -> String {
    let blocks: Vec<&str> = md.split("```mermaid\n").skip(1).collect();
    assert_eq!(blocks.len(), 1, "one mermaid block: {md}");
    blocks[0]
        .split("\n```")
        .next()
        .unwrap()
        .trim_end()
        .to_owned()
        + "\n"
}

/// A gantt task line: name, whether crit, id, start and end (ms).
#[derive(Debug)]
struct Task {
    name: String,
    crit: bool,
    id: String,
    start: u64,
    end: u64,
}

fn tasks(gantt: &str) -> Vec<Task> {
    let body = gantt
        .split_once("    section execs\n")
        .unwrap_or_else(|| panic!("no section: {gantt}"))
        .1;
    body.lines()
        .map(|l| {
            let (name, data) = l
                .rsplit_once(" :")
                .unwrap_or_else(|| panic!("no task: {l:?}"));
            let mut parts: Vec<&str> = data.split(", ").collect();
            let crit = parts[0] == "crit";
            if ["crit", "active"].contains(&parts[0]) {
                parts.remove(0);
            }
            assert_eq!(parts.len(), 3, "{l:?}");
            Task {
                name: name.trim().to_owned(),
                crit,
                id: parts[0].to_owned(),
                start: parts[1].parse().unwrap(),
                end: parts[2].parse().unwrap(),
            }
        })
        .collect()
}

/// Test 2: the Markdown's gantt, rendered by mermaid in Chromium: no error, one bar per exec
/// of NEW, placed and sized by its times, the failed exec's bar crit, the hostile name text.
#[test]
fn markdown_gantt_renders_in_mermaid() {
    let _ = browser::mermaid_js(); // before any work: fail at once without them
    let _ = browser::chromium_bin();
    let r = recording();
    let out = compare(r, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let md = fs::read_to_string(r.dir.join("out.md")).unwrap();
    let gantt = mermaid_block(&md);
    eprintln!("GANTT\n{gantt}");
    assert!(gantt.starts_with("gantt\n    dateFormat x\n"), "{gantt}");
    let tasks = tasks(&gantt);

    // The last run's execs (NEW's), each a task from its start to its end.
    let new = &r.new.records;
    assert_eq!(tasks.len(), new.len(), "{gantt}");
    let mut want: Vec<(u64, u64, bool)> = new
        .iter()
        .map(|(k, rec)| {
            let start = u(&rec["start_unix_ns"]) / 1_000_000;
            let end = (u(&rec["end_unix_ns"]) / 1_000_000).max(start + 1);
            (start, end, *k == Kind::Flaky)
        })
        .collect();
    let mut got: Vec<(u64, u64, bool)> = tasks.iter().map(|t| (t.start, t.end, t.crit)).collect();
    want.sort_unstable();
    got.sort_unstable();
    assert_eq!(got, want, "{gantt}");
    for t in &tasks {
        assert!(
            !t.name.contains([':', '#', ';', '<', '>', '%']),
            "Mermaid syntax in a name: {t:?}"
        );
    }
    let hostile: Vec<&Task> = tasks
        .iter()
        .filter(|t| t.name.contains("hostile"))
        .collect();
    assert_eq!(hostile.len(), 1, "{gantt}");

    let out = out_dir();
    let page = mermaid_page(&r.dir);
    let mut b = Browser::start(&out);
    b.open(&page, 1400, 900);
    assert_eq!(
        b.eval("typeof mermaid"),
        "object",
        "mermaid not loaded from {}",
        browser::mermaid_js().display()
    );
    eprintln!("MEASURED mermaid {}", mermaid_version());
    if let Err(e) = render(&mut b, "gantt", &gantt) {
        panic!("mermaid failed on the gantt: {e}\n{gantt}");
    }
    assert_eq!(
        b.eval("document.querySelector('#out svg').getAttribute('aria-roledescription')"),
        "gantt"
    );
    let bars = b.eval(
        "Array.from(document.querySelectorAll('#out svg rect.task')).map(r => { \
           const t = document.getElementById(r.id + '-text'); \
           return { id: r.id, class: r.getAttribute('class'), x: +r.getAttribute('x'), \
             width: +r.getAttribute('width'), text: t ? t.textContent : null }; })",
    );
    let bars = bars.as_array().unwrap();
    eprintln!("MEASURED gantt bars: {bars:?}");
    assert_eq!(bars.len(), tasks.len(), "one bar per task line: {bars:?}");
    let bar = |t: &Task| -> &Value {
        let id = format!("gantt-{}", t.id);
        bars.iter()
            .find(|b| b["id"] == id.as_str())
            .unwrap_or_else(|| panic!("no bar {id}: {bars:?}"))
    };
    // Pixels per millisecond, from the whole span; each bar within 1.5 pixels of its place.
    let t0 = tasks.iter().map(|t| t.start).min().unwrap();
    let t1 = tasks.iter().map(|t| t.end).max().unwrap();
    let first = tasks.iter().find(|t| t.start == t0).unwrap();
    let x0 = f(&bar(first)["x"]);
    let right = tasks
        .iter()
        .map(|t| f(&bar(t)["x"]) + f(&bar(t)["width"]))
        .fold(0f64, f64::max);
    let scale = (right - x0) / (t1 - t0) as f64;
    assert!(scale > 0.0, "{bars:?}");
    for t in &tasks {
        let b = bar(t);
        let class = b["class"].as_str().unwrap();
        let classes: Vec<&str> = class.split_whitespace().collect();
        assert!(classes.contains(&"task"), "{t:?}: {class}");
        assert_eq!(
            classes.iter().any(|c| c.starts_with("crit")),
            t.crit,
            "{t:?}: crit where the exec failed: {class}"
        );
        assert_eq!(b["text"].as_str().map(str::trim), Some(t.name.as_str()));
        let (x, w) = (f(&b["x"]), f(&b["width"]));
        let (want_x, want_w) = (
            x0 + (t.start - t0) as f64 * scale,
            (t.end - t.start) as f64 * scale,
        );
        assert!(
            (x - want_x).abs() <= 1.5 && (w - want_w).abs() <= 1.5,
            "{t:?}: bar at {x} wide {w}, its times say {want_x:.1} wide {want_w:.1}"
        );
    }
    let crit = bars
        .iter()
        .filter(|b| b["class"].as_str().unwrap().contains("crit"))
        .count();
    assert_eq!(crit, 1, "the failed exec alone: {bars:?}");
    // The hostile name is text: no markup from it.
    assert_eq!(b.eval("document.querySelectorAll('#out svg b').length"), 0);
    assert_eq!(
        b.eval("performance.getEntriesByType('resource').filter(e => !e.name.startsWith('file:')).length"),
        0,
        "the page fetched from the network"
    );
    let png = out.join("gantt.png");
    b.screenshot_page(&png, 1400);
    let shot = fs::read(&png).unwrap();
    assert!(
        shot.starts_with(b"\x89PNG") && shot.len() > 5_000,
        "screenshot of {} bytes",
        shot.len()
    );
    eprintln!("SCREENSHOT {}", png.display());

    // The comparison's page (no script of its own): the moved figure, the new and gone steps,
    // every step name as text.
    b.open(&r.dir.join("out.html"), 1400, 900);
    let moved = b.eval(
        "Array.from(document.querySelectorAll('#compare tr[data-figure]')).map(tr => \
         [tr.dataset.status, tr.dataset.figure, tr.cells[0].textContent, tr.cells[1].className])",
    );
    let write_rows: Vec<&Value> = moved
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m[1] == "write")
        .collect();
    assert_eq!(
        write_rows,
        [&serde_json::json!([
            "changed",
            "write",
            r.step(Kind::Compile),
            "heavier"
        ])],
        "{moved}"
    );
    for (status, k) in [("new", Kind::Docs), ("gone", Kind::Lint)] {
        assert_eq!(
            b.eval(&format!(
                "Array.from(document.querySelectorAll('#compare tr[data-status={status}]')).map(tr => tr.cells[0].textContent)"
            )),
            serde_json::json!([r.step(k)])
        );
    }
    let names = b.eval(
        "Array.from(document.querySelectorAll('#steps tr')).slice(1).map(tr => tr.cells[0].textContent)",
    );
    assert!(
        names
            .as_array()
            .unwrap()
            .contains(&Value::from(r.step(Kind::Hostile))),
        "{names}"
    );
    assert_eq!(
        b.eval("document.querySelectorAll('#steps b, #compare b').length"),
        0
    );
}

/// Test 3: step names that begin like Mermaid's gantt statements (and so would be read as
/// them) are drawn as task names: each exec of a recorded run is one bar, whatever its name.
#[test]
fn gantt_survives_step_names_that_read_as_mermaid_statements() {
    let _ = browser::mermaid_js();
    let _ = browser::chromium_bin();
    // Each the first word(s) of a program's name (argv[0]), which is its exec's command.
    let names = [
        "section: #1; <b>x</b>",
        "title build",
        "gantt build",
        "topAxis x",
        "inclusiveEndDates y",
        "weekend friday z",
        "call make",
        "2026-12-07 nightly",
        "click here",
    ];
    let cg = TestCgroup::new("runs-names");
    let p = Attached::start(&cg, &[]);
    let mut records = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let e = cg.child(&format!("n{i}"));
        assert_eq!(run_step(&e, Some(name), &["/bin/true"]), 0);
        let id = cgroup_id(&e);
        rmdir(&e);
        records.push(p.wait_ended(id, secs(30)));
    }
    let (code, _, _) = p.stop();
    assert_eq!(code, 0);
    drop(cg);
    for (n, r) in names.iter().zip(&records) {
        assert!(r["step"].as_str().unwrap().starts_with(n), "{n}: {r}");
    }
    let dir = out_dir().join("names");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let lines: Vec<String> = records.iter().map(|r| r.to_string()).collect();
    fs::write(dir.join("names.jsonl"), lines.join("\n") + "\n").unwrap();
    let out = report_cmd(&dir, &["names.jsonl", "--steps", "--markdown=names.md"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let gantt = mermaid_block(&fs::read_to_string(dir.join("names.md")).unwrap());
    eprintln!("GANTT\n{gantt}");
    let tasks = tasks(&gantt);
    assert_eq!(tasks.len(), names.len(), "{gantt}");

    // Each line alone under the gantt's header, so that every failing name is named.
    let header = gantt.split_once("    section execs\n").unwrap().0;
    let page = mermaid_page(&dir);
    let mut b = Browser::start(&out_dir());
    b.open(&page, 1200, 600);
    let mut failed = Vec::new();
    for (i, line) in gantt
        .split_once("    section execs\n")
        .unwrap()
        .1
        .lines()
        .enumerate()
    {
        let one = format!("{header}    section execs\n{line}\n");
        let id = format!("g{i}");
        let drawn = render(&mut b, &id, &one).and_then(|()| {
            let v = b.eval(
                "Array.from(document.querySelectorAll('#out svg rect.task')).map(r => \
                 (document.getElementById(r.id + '-text') || {}).textContent)",
            );
            let want = line.rsplit_once(" :").unwrap().0.trim();
            match v.as_array().map(Vec::as_slice) {
                Some([t]) if t.as_str().map(str::trim) == Some(want) => Ok(()),
                _ => Err(format!("bars {v}, not one named {want:?}")),
            }
        });
        if let Err(e) = drawn {
            failed.push(format!("{line:?}: {e}"));
        }
    }
    // And all of them together.
    if let Err(e) = render(&mut b, "all", &gantt) {
        failed.push(format!("the whole gantt: {e}"));
    }
    assert!(
        failed.is_empty(),
        "mermaid did not draw these gantt lines as tasks:\n{}",
        failed.join("\n")
    );
}
