//! Operational tasks: `cargo xtask setup | test | demo | bench`.
//!
//! setup installs what a fresh machine lacks (idempotent, no questions): the nightly
//! toolchain's rust-src and a bpf-linker built against that toolchain's own libLLVM.

use std::{
    env, fs,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use clap::{Parser, Subcommand};

mod bench;
mod dist;
#[cfg(test)]
mod doclinks;
mod vmtest;

#[derive(Parser)]
#[command(name = "xtask")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install the build prerequisites (rust-src for nightly, bpf-linker).
    Setup,
    /// Set up, build, then run every test: unit tests, the privileged end-to-end suite on this
    /// host, and the same suite (plus the pure cgroup v2 tests) in VMs on the kernel matrix.
    Test {
        /// Only run tests whose name contains this.
        filter: Option<String>,
        /// Skip the VM kernel matrix.
        #[arg(long)]
        host_only: bool,
    },
    /// Run the privileged test suite in qemu on each kernel of the matrix (Debian kernels,
    /// pure cgroup v2).
    Vmtest {
        /// Kernels of the matrix to run (default: all): 6.1, 6.12, newest.
        #[arg(long = "kernel")]
        kernels: Vec<String>,
        /// Only run tests whose name contains this.
        filter: Option<String>,
    },
    /// Set up, build, and profile a real demo workload with the embedded default output.
    Demo,
    /// Build what an operator installs into target/dist/: the static binary in a versioned
    /// tarball (with sha256, README, licences, man pages, completions, config, systemd unit)
    /// and a .deb.
    Dist,
    /// Build the sidecar container image (FROM scratch, the static binary) with the local
    /// Docker Engine and save it as target/dist/profiler-image-VERSION.tar.
    Image,
    /// Set up, build, and measure the profiler's cost: the standard workload side by side
    /// with the bpftrace floor (each eBPF program's runs and ns per run, total BPF CPU,
    /// userspace CPU), then resident memory idle, with live execs and OTLP export, and over
    /// exec churn. A benchmark: it prints figures, it checks none.
    Bench {
        /// Seconds of the standard workload in each side-by-side phase.
        #[arg(long, default_value_t = 20)]
        seconds: u32,
        /// Live execs held for the resident-memory figure with OTLP export on.
        #[arg(long, default_value_t = 1000)]
        live: u32,
        /// Execs created and ended for the resident-memory growth figure.
        #[arg(long, default_value_t = 100_000)]
        churn: u32,
        /// Measure this profiler binary instead of building the release one (e.g. an older
        /// build, for a before/after table).
        #[arg(long, value_name = "PATH")]
        profiler: Option<PathBuf>,
        /// Instead, compare the kernel programs of two builds in the same runs: both attached
        /// to one cgroup during the standard workload, once in each order (the one attached
        /// second finds caches warmed by the first). Per program: ns per run of each build in
        /// each order. `--profiler` is the first build (default: this release build).
        #[arg(long, value_name = "PATH")]
        against: Option<PathBuf>,
    },
}

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Setup => setup(),
        Task::Test { filter, host_only } => {
            setup()?;
            test(filter.as_deref())?;
            if host_only {
                return Ok(());
            }
            vmtest::vmtest(vmtest::Options {
                kernels: Vec::new(),
                filter,
            })
        }
        Task::Vmtest { kernels, filter } => {
            setup()?;
            vmtest::vmtest(vmtest::Options { kernels, filter })
        }
        Task::Demo => {
            setup()?;
            demo()
        }
        Task::Dist => {
            setup()?;
            dist::dist().map(|_| ())
        }
        Task::Image => {
            setup()?;
            dist::image().map(|_| ())
        }
        Task::Bench {
            seconds,
            live,
            churn,
            profiler,
            against,
        } => {
            setup()?;
            bench::bench(bench::Options {
                seconds,
                live,
                churn,
                profiler,
                against,
            })
        }
    }
}

pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

pub(crate) fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("xtask: running {cmd:?}");
    let st = cmd
        .status()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    if !st.success() {
        bail!("{cmd:?} failed: {st}");
    }
    Ok(())
}

pub(crate) fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(crate) fn is_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|v| v.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

// ------------------------------------------------------------------------------------------
// setup

fn setup() -> Result<()> {
    let installed = output(Command::new("rustup").args(["component", "list", "--toolchain", "nightly", "--installed"]))
        .context("the nightly toolchain is needed to build the eBPF programs (rustup toolchain install nightly)")?;
    if !installed.lines().any(|l| l.starts_with("rust-src")) {
        run(Command::new("rustup").args([
            "component",
            "add",
            "rust-src",
            "--toolchain",
            "nightly",
        ]))?;
    }
    install_bpf_linker()
}

/// bpf-linker must use the LLVM of the rustc that compiles the eBPF crate. Debian has no
/// matching LLVM, but the nightly toolchain ships its own libLLVM: link against that.
fn install_bpf_linker() -> Result<()> {
    let sysroot = output(Command::new("rustc").args(["+nightly", "--print", "sysroot"]))?;
    let lib_dir = PathBuf::from(sysroot.trim()).join("lib");
    let lib = fs::read_dir(&lib_dir)?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libLLVM.so.") && n.contains("-rust-"))
        })
        .with_context(|| format!("no libLLVM.so.*-rust-* in {}", lib_dir.display()))?;
    let name = lib.file_name().unwrap().to_string_lossy().into_owned();
    // libLLVM.so.22.1-rust-1.97.0-nightly -> 22
    let major: u32 = name
        .trim_start_matches("libLLVM.so.")
        .split(['.', '-'])
        .next()
        .and_then(|m| m.parse().ok())
        .with_context(|| format!("cannot read the LLVM version from {name}"))?;

    let stamp = format!("llvm-{major} {}", lib.display());
    let home = env::var("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(env::var("HOME").unwrap_or_else(|_| "/root".into())).join(".cargo")
        });
    let stamp_file = home.join("bpf-linker.llvm");
    let works = Command::new("bpf-linker")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if works && fs::read_to_string(&stamp_file).ok().as_deref() == Some(stamp.as_str()) {
        return Ok(());
    }
    let prefix = home.join("bpf-linker-llvm");
    fs::create_dir_all(prefix.join("lib"))?;
    let link = prefix.join("lib/libLLVM.so");
    let _ = fs::remove_file(&link);
    std::os::unix::fs::symlink(&lib, &link)?;
    eprintln!("xtask: building bpf-linker against {name} (about a minute)");
    run(Command::new("cargo")
        .args([
            "install",
            "--force",
            "bpf-linker",
            "--no-default-features",
            "--features",
        ])
        .arg(format!("llvm-{major}"))
        .env("LLVM_PREFIX", &prefix)
        // Find the toolchain's libLLVM at run time too.
        .env(
            "RUSTFLAGS",
            format!("-C link-arg=-Wl,-rpath,{}", lib_dir.display()),
        ))?;
    fs::write(&stamp_file, stamp)?;
    Ok(())
}

/// Install the Debian packages whose commands are missing: (package, command it provides).
pub(crate) fn ensure_debian_packages(wanted: &[(&str, &str)]) -> Result<()> {
    let on_path = |cmd: &str| {
        env::var_os("PATH")
            .map(|p| env::split_paths(&p).any(|d| d.join(cmd).is_file()))
            .unwrap_or(false)
            || Path::new("/usr/sbin").join(cmd).is_file()
            || Path::new("/sbin").join(cmd).is_file()
    };
    let missing: Vec<&str> = wanted
        .iter()
        .filter(|(_, cmd)| !on_path(cmd))
        .map(|(p, _)| *p)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    apt_install(&missing)
}

pub(crate) fn apt_install(packages: &[&str]) -> Result<()> {
    run(Command::new("apt-get").args(["-q", "update"]))?;
    run(Command::new("apt-get")
        .args(["-q", "-y", "install", "--no-install-recommends"])
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

/// The real metric backends of the exporter tests: rotel (OTLP collector, from PyPI, in
/// target/tools/venv) and Debian's Prometheus. Returns (ROTEL_BIN, PROMETHEUS_BIN).
pub(crate) fn ensure_backends() -> Result<(PathBuf, PathBuf)> {
    let venv = root().join("target/tools/venv");
    let rotel = venv.join("bin/rotel-agent");
    if !rotel.exists() {
        ensure_debian_packages(&[("python3", "python3")])?;
        if !Command::new("python3")
            .args(["-c", "import ensurepip"])
            .output()
            .is_ok_and(|o| o.status.success())
        {
            apt_install(&["python3-venv"])?;
        }
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
        // The version whose debug output tests/src/backends/rotel_log.rs parses.
        run(Command::new(venv.join("bin/pip")).args(["install", "-q", "rotel==0.0.1a15"]))?;
        // The wheel keeps the binary inside the package (site-packages/rotel/rotel-agent).
        let pkg = output(Command::new(venv.join("bin/python")).args([
            "-c",
            "import os, rotel; print(os.path.dirname(rotel.__file__))",
        ]))?;
        let _ = fs::remove_file(&rotel);
        std::os::unix::fs::symlink(Path::new(pkg.trim()).join("rotel-agent"), &rotel)?;
    }
    let prometheus = PathBuf::from("/usr/bin/prometheus");
    let fresh = !prometheus.exists();
    ensure_debian_packages(&[("prometheus", "prometheus")])?;
    if fresh {
        // The package enables a service on :9090; the tests run their own Prometheus.
        stop_service("prometheus", "/run/prometheus/prometheus.pid")?;
    }
    Ok((rotel, prometheus))
}

/// The mermaid version whose browser bundle renders the Markdown's gantt in the report tests.
const MERMAID_VERSION: &str = "12.4.0";

/// Mermaid's browser bundle (the npm package, in target/tools/mermaid), which the report tests
/// load in headless Chromium to render `report --markdown`'s Mermaid gantt; node and npm from
/// Debian where npm is missing. Returns MERMAID_JS.
pub(crate) fn ensure_mermaid() -> Result<PathBuf> {
    let prefix = root().join("target/tools/mermaid");
    let pkg = prefix.join("node_modules/mermaid");
    let js = pkg.join("dist/mermaid.min.js");
    let installed = fs::read_to_string(pkg.join("package.json"))
        .ok()
        .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
        .and_then(|v| v["version"].as_str().map(str::to_owned));
    if installed.as_deref() != Some(MERMAID_VERSION) || !js.is_file() {
        ensure_debian_packages(&[("nodejs", "node"), ("npm", "npm")])?;
        fs::create_dir_all(&prefix)?;
        // Only the bundle is used, in a browser: the package's node engine does not matter.
        run(Command::new("npm")
            .args(["install", "--prefix"])
            .arg(&prefix)
            .args(["--no-audit", "--no-fund", "--save-exact"])
            .arg(format!("mermaid@{MERMAID_VERSION}")))?;
    }
    if !js.is_file() {
        bail!(
            "npm installed mermaid@{MERMAID_VERSION} without {}",
            js.display()
        );
    }
    Ok(js)
}

/// Stop a service that a package just installed and started (unless policy-rc.d forbade it):
/// the tests start their own instances.
fn stop_service(name: &str, pidfile: &str) -> Result<()> {
    if Path::new("/run/systemd/system").is_dir() {
        run(Command::new("systemctl").args(["disable", "--now", name]))
    } else if Path::new(pidfile).exists() {
        run(Command::new("service").args([name, "stop"]))
    } else {
        Ok(())
    }
}

/// The container runtimes of the runtime tests, from Debian: dockerd (with BuildKit and
/// containerd), runc, podman, buildah, crun, and busybox-static for the images' root filesystem. The tests
/// start their own daemons.
fn ensure_runtimes() -> Result<()> {
    let fresh = !Path::new("/usr/sbin/dockerd").exists();
    ensure_debian_packages(&[
        ("docker.io", "dockerd"),
        ("containerd", "containerd"),
        ("runc", "runc"),
        ("podman", "podman"),
        ("buildah", "buildah"),
        ("crun", "crun"),
        ("busybox-static", "busybox"),
    ])?;
    if fresh {
        stop_service("docker", "/run/docker.pid")?;
        stop_service("containerd", "/run/containerd/containerd.pid")?;
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------
// build and test

pub(crate) fn cargo() -> Command {
    let mut c = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

pub(crate) fn build(release: bool) -> Result<PathBuf> {
    let mut c = cargo();
    c.args(["build", "-p", "profiler"]);
    if release {
        c.arg("--release");
    }
    run(&mut c)?;
    Ok(root().join(if release {
        "target/release/profiler"
    } else {
        "target/debug/profiler"
    }))
}

fn test(filter: Option<&str>) -> Result<()> {
    if !is_root() {
        bail!(
            "the end-to-end tests load eBPF programs and create cgroups: run `cargo xtask test` as root"
        );
    }
    // Style and lints first: a minute at most, where the tests take many.
    lint()?;
    // The network tests make namespaces and veth pairs with ip(8); the TLS export test makes
    // a private CA with openssl and terminates TLS with socat; the report test loads its page
    // in headless Chromium; the programs test builds C files with make.
    ensure_debian_packages(&[
        ("gcc", "cc"),
        ("make", "make"),
        ("iproute2", "ip"),
        ("openssl", "openssl"),
        ("socat", "socat"),
        ("chromium", "chromium"),
    ])?;
    // The exporter tests check what real backends receive: rotel (OTLP) and Prometheus.
    let (rotel, prometheus) = ensure_backends()?;
    // The report tests render the Markdown's Mermaid gantt with the real mermaid library.
    let mermaid = ensure_mermaid()?;
    ensure_runtimes()?;
    let bin = build(false)?;
    // Workloads that run inside containers, which have no C library.
    let static_bins = vmtest::build_static_bins()?;
    // The packages and the image, which the deploy tests install and run.
    // The package test installs the .deb and reads its man page and unit; the sidecar test
    // lists the loaded BPF programs.
    ensure_debian_packages(&[
        ("man-db", "man"),
        ("systemd", "systemd-analyze"),
        ("bpftool", "bpftool"),
    ])?;
    let dist = dist::dist()?;
    let image = dist::image()?;
    if let Some(f) = filter {
        // A filter that matches nothing would pass: a renamed test must not go unnoticed.
        let listed = output(cargo().args([
            "test",
            "--workspace",
            "--exclude",
            "profiler-ebpf",
            "--",
            "--list",
            "--format",
            "terse",
            f,
        ]))?;
        if !listed.lines().any(|l| l.ends_with(": test")) {
            bail!("no test matches {f:?}: `cargo test --workspace -- --list` names them all");
        }
    }
    let mut unit = cargo();
    unit.args([
        "test",
        "--workspace",
        "--exclude",
        "profiler-tests",
        "--exclude",
        "profiler-ebpf",
    ]);
    if let Some(f) = filter {
        unit.arg(f);
    }
    run(&mut unit)?;
    // Privileged tests share one kernel: one at a time.
    let mut e2e = cargo();
    e2e.args(["test", "-p", "profiler-tests", "--"]);
    if let Some(f) = filter {
        e2e.arg(f);
    }
    e2e.args(["--test-threads=1", "--nocapture"])
        .env("PROFILER_BIN", &bin)
        .env("ROTEL_BIN", &rotel)
        .env("PROMETHEUS_BIN", &prometheus)
        .env("MERMAID_JS", &mermaid)
        .env("PROFILER_STATIC_BINS", &static_bins)
        .env("PROFILER_DIST_DIR", &dist)
        .env("PROFILER_IMAGE_TAR", &image)
        .env("PROFILER_IMAGE_REF", dist::image_ref());
    run(&mut e2e)
}

/// `cargo fmt --check` over the workspace, and clippy with warnings as errors: over the host
/// crates (every target), and over the eBPF crate as profiler/build.rs (aya-build) builds it:
/// the nightly toolchain, the BPF target, core built from source.
fn lint() -> Result<()> {
    run(cargo().args(["fmt", "--all", "--", "--check"]))?;
    run(cargo().args(["clippy", "--all-targets", "--", "-D", "warnings"]))?;
    let nightly = output(Command::new("rustup").args([
        "component",
        "list",
        "--toolchain",
        "nightly",
        "--installed",
    ]))?;
    if !nightly.lines().any(|l| l.starts_with("clippy")) {
        run(Command::new("rustup").args(["component", "add", "clippy", "--toolchain", "nightly"]))?;
    }
    // The cfg aya-build passes (the host's architecture); a target directory of its own, as
    // the toolchain and the flags differ from the host build's.
    let ebpf = "run nightly cargo clippy --package profiler-ebpf --bins --release \
        --target bpfel-unknown-none -Z build-std=core --target-dir target/clippy-ebpf \
        -- -D warnings";
    let cfg = format!("--cfg=bpf_target_arch=\"{}\"", env::consts::ARCH);
    run(Command::new("rustup")
        .current_dir(root())
        .args(ebpf.split_whitespace())
        .env("CARGO_ENCODED_RUSTFLAGS", cfg)
        .env_remove("RUSTC")
        .env_remove("RUSTC_WORKSPACE_WRAPPER"))
}

// ------------------------------------------------------------------------------------------
// demo

pub(crate) fn v2_mount() -> Result<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo")?;
    info.lines()
        .filter_map(|l| l.split_once(" - "))
        .find(|(_, post)| post.starts_with("cgroup2 "))
        .and_then(|(pre, _)| pre.split_whitespace().nth(4))
        .map(PathBuf::from)
        .context("no cgroup v2 mount")
}

/// Run `script` with sh inside cgroup `dir` (created here) and wait for it; then remove it.
fn exec_in(dir: &Path, script: &str) -> Result<()> {
    fs::create_dir_all(dir)?;
    let full = format!("echo $$ > {}/cgroup.procs && {script}", dir.display());
    let st = Command::new("sh").args(["-c", &full]).status()?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while fs::remove_dir(dir).is_err() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    if !st.success() {
        bail!("demo step failed: {script}");
    }
    Ok(())
}

fn demo() -> Result<()> {
    if !is_root() {
        bail!("the demo loads eBPF programs: run `cargo xtask demo` as root");
    }
    let bin = build(true)?;
    let base = v2_mount()?.join(format!("profiler-demo-{}", std::process::id()));
    fs::create_dir_all(&base)?;
    let work = root().join("target/demo");
    fs::create_dir_all(&work)?;
    let result = (|| -> Result<()> {
        eprintln!(
            "\nxtask: `profiler attach --cgroup {}`: each child cgroup is an exec",
            base.display()
        );
        let mut prof: Child = Command::new(&bin)
            .args(["attach", "--cgroup"])
            .arg(&base)
            .stderr(Stdio::inherit())
            .spawn()?;
        thread::sleep(Duration::from_secs(2));
        let w = work.display();
        // A small build: compile and link a C program, with its compiler processes.
        fs::write(
            work.join("hello.c"),
            "#include <stdio.h>\nint main(void){puts(\"hello\");return 0;}\n",
        )?;
        exec_in(
            &base.join("compile"),
            &format!("cc -O2 -o {w}/hello {w}/hello.c && {w}/hello >/dev/null"),
        )?;
        // Disk traffic: a direct-IO write and read, then a buffered write made durable.
        exec_in(
            &base.join("disk-io"),
            &format!(
                "dd if=/dev/zero of={w}/blob bs=1M count=32 oflag=direct status=none && \
                 dd if={w}/blob of=/dev/null bs=1M iflag=direct status=none && \
                 dd if=/dev/zero of={w}/blob2 bs=1M count=16 conv=fsync status=none"
            ),
        )?;
        // Many short processes, as a shell-heavy build step runs them.
        exec_in(
            &base.join("short-procs"),
            "for i in $(seq 1 30); do /bin/true; done",
        )?;
        // Two CPU hogs sharing one CPU: run-queue delay.
        exec_in(
            &base.join("contended"),
            "taskset -c 0 sh -c 'timeout 1 sh -c \"while :; do :; done\" & timeout 1 sh -c \"while :; do :; done\"; wait'",
        )?;
        thread::sleep(Duration::from_secs(3));
        interrupt(prof.id());
        prof.wait()?;
        eprintln!(
            "\nxtask: `profiler run -- tar czf ...`: one command in a fresh cgroup, with its process breakdown"
        );
        run(Command::new(&bin).args(["run", "--top", "5", "--", "sh", "-c"]).arg(format!(
            "tar czf {w}/src.tgz -C {} profiler profiler-common profiler-ebpf && sync -f {w}/src.tgz",
            root().display()
        )))?;
        Ok(())
    })();
    let _ = fs::remove_dir_all(&work);
    let _ = fs::remove_dir(&base);
    result
}

/// SIGINT to a process we started (the profiler flushes and exits 0).
pub(crate) fn interrupt(pid: u32) {
    let _ = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status();
}
