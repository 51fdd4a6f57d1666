//! What an operator installs, made by `cargo xtask dist` (PROFILER_DIST_DIR): the tarball's
//! static binary runs and says its version and commit; the .deb installs with dpkg, its man
//! pages render, its completions and systemd unit are where bash-completion and systemd look
//! (the unit passes `systemd-analyze verify`), and removing it leaves nothing behind.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use profiler_tests::{require_root, sh};

fn dist_dir() -> PathBuf {
    PathBuf::from(std::env::var("PROFILER_DIST_DIR").expect(
        "PROFILER_DIST_DIR is not set: run these tests through `cargo xtask test`, which runs \
         `cargo xtask dist` first",
    ))
}

fn version() -> String {
    // The workspace version, which dist names its files by.
    env!("CARGO_PKG_VERSION").to_owned()
}

/// The commit of the tree the tests were built from.
fn head_commit() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    sh(&[
        "git",
        "-C",
        root.to_str().unwrap(),
        "rev-parse",
        "--short=12",
        "HEAD",
    ])
    .trim()
    .to_owned()
}

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn tarball_holds_a_static_binary_that_names_its_version_and_commit() {
    let dir = dist_dir();
    let name = format!("profiler-{}-x86_64-linux", version());
    let tarball = dir.join(format!("{name}.tar.gz"));
    // The checksum file verifies the tarball as sha256sum writes and checks it.
    let (ok, out) = run(Command::new("sha256sum")
        .current_dir(&dir)
        .args(["-c", &format!("{name}.tar.gz.sha256")]));
    assert!(ok, "sha256sum -c: {out}");

    let unpack = std::env::temp_dir().join(format!("profiler-tarball-{}", std::process::id()));
    let _ = fs::remove_dir_all(&unpack);
    fs::create_dir_all(&unpack).unwrap();
    sh(&[
        "tar",
        "-C",
        unpack.to_str().unwrap(),
        "-xzf",
        tarball.to_str().unwrap(),
    ]);
    let top = unpack.join(&name);
    let listed = sh(&["find", top.to_str().unwrap(), "-type", "f"]);
    let mut files: Vec<String> = listed
        .lines()
        .map(|l| l.trim_start_matches(top.to_str().unwrap()).to_owned())
        .collect();
    files.sort();
    let result = std::panic::catch_unwind(|| {
        for want in [
            "/profiler",
            "/README.md",
            "/LICENSE-MIT",
            "/LICENSE-APACHE",
            "/profiler.toml",
            "/profiler.service",
            "/completions/profiler.bash",
            "/completions/_profiler",
            "/completions/profiler.fish",
            "/man/profiler.1.gz",
            "/man/profiler-attach.1.gz",
            "/man/profiler-run.1.gz",
            "/man/profiler-report.1.gz",
            "/man/profiler-check.1.gz",
            "/prometheus/profiler-rules.yml",
            "/grafana/profiler-dashboard.json",
        ] {
            assert!(files.iter().any(|f| f == want), "{want} not in {files:?}");
        }
        let bin = top.join("profiler");
        // Statically linked: no program interpreter, so it runs on any x86_64 Linux.
        let (_, ldd) = run(Command::new("ldd").arg(&bin));
        assert!(
            ldd.contains("not a dynamic executable") || ldd.contains("statically linked"),
            "ldd: {ldd}"
        );
        let v = sh(&[bin.to_str().unwrap(), "--version"]);
        assert_eq!(
            v.trim(),
            format!("profiler {} (commit {})", version(), head_commit())
        );
        // The completions are the binary's own, for every subcommand.
        let bash = fs::read_to_string(top.join("completions/profiler.bash")).unwrap();
        for sub in ["attach", "run", "report", "check"] {
            assert!(bash.contains(sub), "bash completion lacks {sub}");
        }
    });
    let _ = fs::remove_dir_all(&unpack);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// The .deb, installed for the test's duration: purged on drop, also when the test fails.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = Command::new("dpkg").args(["--purge", "profiler"]).output();
    }
}

fn installed_status() -> Option<String> {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", "profiler"])
        .output()
        .ok()?;
    let s = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.success() && !s.contains("not-installed")).then_some(s)
}

#[test]
fn deb_installs_with_man_pages_completions_and_a_verified_unit_and_removes_cleanly() {
    require_root();
    let deb = dist_dir().join(format!("profiler_{}-1_amd64.deb", version()));
    assert!(deb.is_file(), "{} missing", deb.display());
    assert!(
        installed_status().is_none(),
        "a package named profiler is already installed ({:?}): this test installs and purges \
         its own; remove it first",
        installed_status()
    );
    // What the package holds, from the archive itself.
    let contents = sh(&["dpkg-deb", "--contents", deb.to_str().unwrap()]);
    let files: Vec<String> = contents
        .lines()
        .filter(|l| !l.starts_with('d'))
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(|p| p.trim_start_matches('.').to_owned())
        .collect();
    for want in [
        "/usr/bin/profiler",
        "/usr/share/man/man1/profiler.1.gz",
        "/usr/share/man/man1/profiler-attach.1.gz",
        "/usr/share/bash-completion/completions/profiler",
        "/usr/share/zsh/vendor-completions/_profiler",
        "/usr/share/fish/vendor_completions.d/profiler.fish",
        "/etc/profiler/profiler.toml",
        "/usr/share/profiler/prometheus/profiler-rules.yml",
        "/usr/share/profiler/grafana/profiler-dashboard.json",
    ] {
        assert!(files.iter().any(|f| f == want), "{want} not in {files:?}");
    }
    let unit = files
        .iter()
        .find(|f| f.ends_with("/systemd/system/profiler.service"))
        .unwrap_or_else(|| panic!("no systemd unit in {files:?}"))
        .clone();

    let guard = Installed;
    let (ok, out) = run(Command::new("dpkg").arg("-i").arg(&deb));
    assert!(ok, "dpkg -i: {out}");
    for f in &files {
        assert!(Path::new(f).exists(), "{f} not installed");
    }
    let v = sh(&["/usr/bin/profiler", "--version"]);
    assert!(
        v.starts_with(&format!("profiler {} (commit ", version())),
        "{v}"
    );
    // man finds and renders the pages.
    let (ok, page) = run(Command::new("man")
        .args(["--pager=cat", "profiler-attach"])
        .env("MANWIDTH", "100"));
    assert!(
        ok && page.contains("--cgroup"),
        "man profiler-attach: {page}"
    );
    // bash-completion loads the script by the command's name from this directory.
    let (ok, out) = run(Command::new("bash").args([
        "-c",
        "source /usr/share/bash-completion/completions/profiler && complete -p profiler",
    ]));
    assert!(ok && out.contains("profiler"), "bash completion: {out}");
    // The unit as systemd reads it (no systemd runs here as PID 1: verify reads the file and
    // checks its commands and documentation exist).
    let (ok, out) = run(Command::new("systemd-analyze").args(["verify", &unit]));
    assert!(ok, "systemd-analyze verify {unit}: {out}");
    let unit_text = fs::read_to_string(&unit).unwrap();
    assert!(
        unit_text
            .contains("ExecStart=/usr/bin/profiler attach --config /etc/profiler/profiler.toml")
    );
    // The packaged config is one attach takes.
    let (ok, out) = run(Command::new("/usr/bin/profiler").args([
        "attach",
        "--config",
        "/etc/profiler/profiler.toml",
        "--help",
    ]));
    assert!(
        ok,
        "attach --config /etc/profiler/profiler.toml --help: {out}"
    );

    // Removed: every file but the config (a conffile: kept until purge); purged: that too.
    let (ok, out) = run(Command::new("dpkg").args(["-r", "profiler"]));
    assert!(ok, "dpkg -r: {out}");
    for f in &files {
        let kept = f == "/etc/profiler/profiler.toml";
        assert_eq!(Path::new(f).exists(), kept, "{f} after dpkg -r");
    }
    let (ok, out) = run(Command::new("dpkg").args(["--purge", "profiler"]));
    assert!(ok, "dpkg --purge: {out}");
    assert!(
        !Path::new("/etc/profiler").exists(),
        "/etc/profiler left after purge"
    );
    assert!(installed_status().is_none(), "{:?}", installed_status());
    drop(guard);
}

/// The capability names of a line such as `add: ["BPF", ...]` or
/// `CapabilityBoundingSet=CAP_BPF ...`, without the CAP_ prefix, sorted.
fn caps_in(line: &str) -> Vec<String> {
    let mut caps: Vec<String> = line
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.len() > 2 && w.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        .map(|w| w.trim_start_matches("CAP_").to_owned())
        .collect();
    caps.sort();
    caps
}

#[test]
fn daemonset_unit_and_recipe_grant_the_same_capabilities_and_a_config_attach_takes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let manifest = fs::read_to_string(root.join("deploy/kubernetes/profiler.yaml")).unwrap();
    let unit = fs::read_to_string(root.join("deploy/systemd/profiler.service")).unwrap();
    let docs = fs::read_to_string(root.join("docs/deploy.md")).unwrap();
    let from_manifest = caps_in(
        manifest
            .lines()
            .find(|l| l.trim_start().starts_with("add: ["))
            .expect("the DaemonSet adds capabilities"),
    );
    let from_unit = caps_in(
        unit.lines()
            .find(|l| l.starts_with("CapabilityBoundingSet="))
            .unwrap()
            .trim_start_matches("CapabilityBoundingSet="),
    );
    let ambient = caps_in(
        unit.lines()
            .find(|l| l.starts_with("AmbientCapabilities="))
            .unwrap()
            .trim_start_matches("AmbientCapabilities="),
    );
    let mut from_recipe: Vec<String> = docs
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("--cap-add="))
        .map(str::to_owned)
        .collect();
    from_recipe.sort();
    from_recipe.dedup();
    assert_eq!(from_manifest, from_unit, "DaemonSet vs unit");
    assert_eq!(ambient, from_unit, "ambient vs bounding set");
    assert_eq!(
        from_recipe, from_unit,
        "docs/deploy.md's docker run vs unit"
    );

    // The ConfigMap's profiler.toml: the indented block under `profiler.toml: |`.
    let mut lines = manifest
        .lines()
        .skip_while(|l| !l.contains("profiler.toml: |"));
    let head = lines.next().expect("a ConfigMap with profiler.toml");
    let indent = head.len() - head.trim_start().len() + 2;
    let toml: String = lines
        .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() >= indent)
        .map(|l| format!("{}\n", l.get(indent..).unwrap_or("")))
        .collect();
    assert!(toml.contains("runtime = \"containerd\""), "{toml}");
    let file = std::env::temp_dir().join(format!("profiler-daemonset-{}.toml", std::process::id()));
    fs::write(&file, &toml).unwrap();
    for config in [file.clone(), root.join("deploy/profiler.toml")] {
        let (ok, out) = run(Command::new(profiler_tests::profiler_bin())
            .args(["attach", "--help", "--config"])
            .arg(&config));
        assert!(ok, "attach --config {}: {out}", config.display());
    }
    let _ = fs::remove_file(&file);
}
