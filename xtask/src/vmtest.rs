//! `cargo xtask vmtest`: run the privileged test suite inside qemu on a matrix of Debian stock
//! kernels, each booted with pure cgroup v2 (+cpu +io +memory +pids), bpffs, tracefs, a virtio
//! scratch disk and the host's build shared over 9p.
//!
//! Everything comes from Debian packages: the kernels (fetched with a private apt
//! configuration, so the host's sources stay untouched), busybox-static for the initramfs,
//! qemu, e2fsprogs and cpio.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    fs,
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use crate::{ensure_debian_packages, output, root, run};

/// The kernel matrix: a name and the Debian suite whose `linux-image-amd64` it is.
pub const KERNELS: &[(&str, &str)] = &[
    ("6.1", "bookworm"),
    ("6.12", "bookworm-backports"),
    ("newest", "trixie-backports"),
];

/// Debian packages the VM tests need on the host.
const HOST_PACKAGES: &[(&str, &str)] = &[
    ("qemu-system-x86", "qemu-system-x86_64"),
    ("busybox-static", "busybox"),
    ("cpio", "cpio"),
    ("e2fsprogs", "mkfs.ext4"),
    ("xz-utils", "xz"),
    ("zstd", "zstd"),
    // The guests run the containerd and runc tests with the host's binaries.
    ("containerd", "containerd"),
    ("runc", "runc"),
];

/// Container runtime programs copied into the guests, with the libraries they link.
const GUEST_RUNTIME_TOOLS: &[&str] = &[
    "/usr/bin/containerd",
    "/usr/bin/containerd-shim-runc-v2",
    "/usr/bin/ctr",
    "/usr/sbin/runc",
];

/// Modules the guest needs, with their dependencies (those built in are skipped).
const GUEST_MODULES: &[&str] = &[
    "virtio_pci",
    "virtio_blk",
    "9pnet_virtio",
    "9p",
    "crc32c_generic",
    "crc32c-intel",
    "ext4",
];

/// Emulated guests are slow: test timeouts are stretched by this much.
const TIME_SCALE: u32 = 8;
/// The longest one kernel's run may take.
const KERNEL_TIMEOUT: Duration = Duration::from_secs(25 * 60);

pub struct Options {
    pub kernels: Vec<String>,
    pub filter: Option<String>,
}

pub fn vmtest(opts: Options) -> Result<()> {
    ensure_debian_packages(HOST_PACKAGES)?;
    let work = root().join("target/vm");
    fs::create_dir_all(&work)?;
    let selected: Vec<(&str, &str)> = KERNELS
        .iter()
        .copied()
        .filter(|(name, _)| opts.kernels.is_empty() || opts.kernels.iter().any(|k| k == name))
        .collect();
    if selected.is_empty() {
        bail!(
            "no kernel of the matrix is named {:?}; the matrix is {KERNELS:?}",
            opts.kernels
        );
    }
    let bins = build_static(&work)?;
    let apt = Apt::new(&work.join("apt"))?;
    let started = Instant::now();
    let mut table: Vec<(String, String, Result<Outcome>)> = Vec::new();
    for (name, suite) in selected {
        let t = Instant::now();
        let outcome = (|| -> Result<Outcome> {
            let kernel = fetch_kernel(&apt, suite, &work.join("kernels").join(name))?;
            let o = run_kernel(name, &kernel, &bins, &work, opts.filter.as_deref())?;
            // A trap on an int3 that the kernel itself left while patching its text (as it
            // does when a tracepoint is switched on) is the emulator running stale translated
            // code on one vCPU while another patched it: seen under multi-threaded TCG (no
            // longer used, see run_kernel). Not the profiler's doing (BPF programs cannot plant
            // int3): boot once more.
            let serial = work.join("runs").join(name).join("serial.log");
            let log = fs::read_to_string(&serial).unwrap_or_default();
            if !o.passed() && log.contains("Oops: int3") {
                eprintln!(
                    "vmtest: {name}: the guest kernel trapped on an int3 of its own text patching \
                     (an emulation fault under TCG); running this kernel once more"
                );
                let kept = work.join("runs").join(format!("{name}-int3-oops.log"));
                let _ = fs::copy(&serial, &kept);
                return run_kernel(name, &kernel, &bins, &work, opts.filter.as_deref());
            }
            Ok(o)
        })();
        eprintln!(
            "vmtest: kernel {name} done in {:.0}s",
            t.elapsed().as_secs_f64()
        );
        let release = outcome
            .as_ref()
            .map(|o| o.release.clone())
            .unwrap_or_default();
        table.push((name.to_owned(), release, outcome));
    }
    print_table(&table, started.elapsed());
    let failed: Vec<&str> = table
        .iter()
        .filter(|(_, _, o)| !matches!(o, Ok(o) if o.passed()))
        .map(|(n, _, _)| n.as_str())
        .collect();
    if !failed.is_empty() {
        bail!("the VM tests failed on kernel(s) {}", failed.join(", "));
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------
// Kernels from the Debian archive

/// apt with its own sources and state below `dir`: the host's configuration stays untouched.
struct Apt {
    dir: PathBuf,
}

impl Apt {
    fn new(dir: &Path) -> Result<Self> {
        fs::create_dir_all(dir.join("lists/partial"))?;
        fs::create_dir_all(dir.join("cache/archives/partial"))?;
        let keyring = "/usr/share/keyrings/debian-archive-keyring.gpg";
        let mut sources = String::new();
        for suite in KERNELS.iter().map(|(_, s)| *s).collect::<HashSet<_>>() {
            sources.push_str(&format!(
                "deb [signed-by={keyring}] http://deb.debian.org/debian {suite} main\n"
            ));
        }
        fs::write(dir.join("sources.list"), sources)?;
        let apt = Self {
            dir: dir.to_path_buf(),
        };
        run(apt.cmd("apt-get").args(["-q", "update"]))?;
        Ok(apt)
    }

    fn cmd(&self, tool: &str) -> Command {
        let d = self.dir.display();
        let mut c = Command::new(tool);
        for o in [
            format!("Dir::Etc::SourceList={d}/sources.list"),
            "Dir::Etc::SourceParts=/dev/null".into(),
            format!("Dir::State::Lists={d}/lists"),
            format!("Dir::Cache={d}/cache"),
            // Downloads go to the current directory, which _apt may not be able to write.
            "APT::Sandbox::User=root".into(),
        ] {
            c.args(["-o", &o]);
        }
        c
    }

    /// Download a package (optionally from one suite) into `dir`; returns the .deb path.
    fn download(&self, pkg: &str, suite: Option<&str>, dir: &Path) -> Result<PathBuf> {
        fs::create_dir_all(dir)?;
        let mut c = self.cmd("apt-get");
        c.current_dir(dir).arg("-q");
        if let Some(s) = suite {
            c.args(["-t", s]);
        }
        run(c.args(["download", pkg]))?;
        debs(dir)?
            .into_iter()
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(&format!("{pkg}_"))
            })
            .with_context(|| format!("apt-get download {pkg} left no .deb"))
    }
}

fn debs(dir: &Path) -> Result<HashSet<PathBuf>> {
    Ok(fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .collect())
}

/// A kernel ready to boot: its image, release and module tree.
struct Kernel {
    vmlinuz: PathBuf,
    release: String,
    modules: PathBuf,
}

/// Fetch `linux-image-amd64` of `suite` and the packages holding its image and modules.
fn fetch_kernel(apt: &Apt, suite: &str, dir: &Path) -> Result<Kernel> {
    let debs_dir = dir.join("debs");
    let _ = fs::remove_dir_all(&debs_dir);
    let meta = apt.download("linux-image-amd64", Some(suite), &debs_dir)?;
    // Follow the dependencies that make up the kernel: image, binary and modules packages.
    let mut todo = vec![meta];
    let mut seen = HashSet::new();
    let mut all = Vec::new();
    while let Some(deb) = todo.pop() {
        let deps = output(
            Command::new("dpkg-deb")
                .args(["-f"])
                .arg(&deb)
                .arg("Depends"),
        )?;
        all.push(deb);
        for alt in deps.split(',') {
            for dep in alt.split('|') {
                let name = dep.split_whitespace().next().unwrap_or("");
                let kernel_part = [
                    "linux-image-",
                    "linux-binary-",
                    "linux-modules-",
                    "linux-base-",
                ]
                .iter()
                .any(|p| {
                    name.starts_with(p) && name[p.len()..].starts_with(|c: char| c.is_ascii_digit())
                });
                if kernel_part && seen.insert(name.to_owned()) {
                    todo.push(apt.download(name, None, &debs_dir)?);
                }
            }
        }
    }
    let root = dir.join("root");
    let _ = fs::remove_dir_all(&root);
    fs::create_dir_all(&root)?;
    for deb in &all {
        run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&root))?;
    }
    let mut modules = None;
    for base in ["lib/modules", "usr/lib/modules"] {
        if let Ok(rd) = fs::read_dir(root.join(base)) {
            for e in rd.flatten() {
                if e.path().join("kernel").is_dir() {
                    modules = Some(e.path());
                }
            }
        }
    }
    let modules =
        modules.with_context(|| format!("no module tree in the {suite} kernel packages"))?;
    let release = modules.file_name().unwrap().to_string_lossy().into_owned();
    let vmlinuz = [
        root.join(format!("boot/vmlinuz-{release}")),
        modules.join("vmlinuz"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .with_context(|| format!("no vmlinuz for {release}"))?;
    Ok(Kernel {
        vmlinuz,
        release,
        modules,
    })
}

// ------------------------------------------------------------------------------------------
// Static test binaries

/// The statically linked binaries the guests run, built from this tree.
struct Bins {
    profiler: PathBuf,
    busy: PathBuf,
    netpeer: PathBuf,
    tests: Vec<PathBuf>,
}

const TARGET: &str = "x86_64-unknown-linux-gnu";

/// Build the statically linked profiler and test workloads (busy, netpeer) into
/// target/vm/build; returns the directory holding them. The guests run them, and so do the
/// host's container tests (a container has no C library).
pub(crate) fn build_static_bins() -> Result<PathBuf> {
    let target_dir = root().join("target/vm/build");
    let mut build = crate::cargo();
    build
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        .args([
            "build",
            "--release",
            "--target",
            TARGET,
            "-p",
            "profiler",
            "-p",
            "profiler-tests",
            "--bins",
        ])
        .arg("--target-dir")
        .arg(&target_dir);
    run(&mut build)?;
    Ok(target_dir.join(TARGET).join("release"))
}

fn build_static(work: &Path) -> Result<Bins> {
    let target_dir = work.join("build");
    build_static_bins()?;
    let mut t = crate::cargo();
    t.env("RUSTFLAGS", "-C target-feature=+crt-static")
        .args([
            "test",
            "--release",
            "--target",
            TARGET,
            "--no-run",
            "--message-format=json",
            "-p",
            "profiler-tests",
        ])
        .arg("--target-dir")
        .arg(&target_dir)
        .stderr(Stdio::inherit());
    let out = output(&mut t)?;
    let mut tests = Vec::new();
    for line in out.lines() {
        // {"reason":"compiler-artifact",...,"profile":{"test":true},...,"executable":"/path"}
        if line.contains("\"reason\":\"compiler-artifact\"")
            && line.contains("\"test\":true")
            && let Some(exe) = json_str(line, "executable")
        {
            tests.push(PathBuf::from(exe));
        }
    }
    tests.retain(|p| {
        let n = p.file_name().unwrap().to_string_lossy();
        [
            "engine-",
            "vm-",
            "cgroup-",
            "network-",
            "runtimes-",
            "check-",
        ]
        .iter()
        .any(|p| n.starts_with(p))
    });
    if tests.len() < 6 {
        bail!(
            "did not find the engine, cgroup, network, runtimes, check and vm test binaries \
             ({tests:?})"
        );
    }
    let rel = target_dir.join(TARGET).join("release");
    Ok(Bins {
        profiler: rel.join("profiler"),
        busy: rel.join("busy"),
        netpeer: rel.join("netpeer"),
        tests,
    })
}

/// The string value of `"key":"..."` in one line of cargo's JSON (no escapes in paths).
fn json_str(line: &str, key: &str) -> Option<String> {
    let pat = format!("\"{key}\":\"");
    let start = line.find(&pat)? + pat.len();
    let end = line[start..].find('"')? + start;
    Some(line[start..end].to_owned())
}

// ------------------------------------------------------------------------------------------
// The guest

struct Outcome {
    release: String,
    /// Test name -> "ok" | "FAILED" | "ignored".
    tests: BTreeMap<String, String>,
    /// Exit codes of the test binaries, in order (-1: none written).
    codes: Vec<i32>,
    /// Where the guest's serial console and test output were kept (on failure).
    logs: PathBuf,
    first_error: Option<String>,
    /// What makes the run fail besides a test's result: the guest kernel's own report of
    /// trouble, an init script that did not end, tests expected that did not run.
    faults: Vec<String>,
}

impl Outcome {
    /// Every binary ran and exited 0, every expected test ran and passed, and the guest
    /// itself went right: its init script ended and its kernel reported no trouble.
    fn passed(&self) -> bool {
        self.faults.is_empty()
            && !self.codes.is_empty()
            && self.codes.iter().all(|&c| c == 0)
            && !self.tests.is_empty()
            && self.tests.values().all(|v| v == "ok")
    }
}

/// Tests of each binary that the guest must run: the binary's own list (libtest's --list,
/// run here), with the filter the guest gets.
fn expected_tests(bin: &Path, filter: &str) -> Result<BTreeSet<String>> {
    let mut cmd = Command::new(bin);
    cmd.args(["--list", "--format", "terse", "--include-ignored"]);
    cmd.args(filter.split_whitespace());
    let out = output(&mut cmd)?;
    Ok(out
        .lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .map(str::to_owned)
        .collect())
}

/// The filter each test binary gets in the guest: the user's, else the tests that can run
/// there (the guest has no ip(8) with namespace support: of the network tests, only those in
/// the host namespace run; of the runtime tests, those of containerd and runc, as there is no
/// dockerd or podman).
fn guest_filter(bin: &Path, filter: Option<&str>) -> String {
    let name = bin.file_name().unwrap_or_default().to_string_lossy();
    match filter {
        Some(f) => f.to_owned(),
        None if name.starts_with("network-") => "host_netns".into(),
        None if name.starts_with("runtimes-") => "containerd_and_runc".into(),
        None => String::new(),
    }
}

/// What a run lacks: each binary's exit code, and each test its list says must run.
fn missing_results(
    bins: &[PathBuf],
    expected: &[BTreeSet<String>],
    ran: &[BTreeSet<String>],
    codes: &[Option<i32>],
) -> Vec<String> {
    let mut faults = Vec::new();
    for (i, bin) in bins.iter().enumerate() {
        let name = bin.file_name().unwrap_or_default().to_string_lossy();
        if codes[i].is_none() {
            faults.push(format!("{name} left no exit code"));
        }
        if expected[i].is_empty() {
            faults.push(format!("{name}: its filter matches no test"));
        }
        let absent: Vec<&String> = expected[i].difference(&ran[i]).collect();
        if !absent.is_empty() {
            faults.push(format!("{name}: tests that did not run: {absent:?}"));
        }
    }
    faults
}

fn run_kernel(
    name: &str,
    k: &Kernel,
    bins: &Bins,
    work: &Path,
    filter: Option<&str>,
) -> Result<Outcome> {
    let dir = work.join("runs").join(name);
    let _ = fs::remove_dir_all(&dir);
    let results = dir.join("results");
    fs::create_dir_all(&results)?;
    let initrd = dir.join("initramfs.cpio.gz");
    build_initramfs(
        k,
        bins,
        work,
        &results,
        filter,
        &dir.join("initramfs"),
        &initrd,
    )?;
    let disk = dir.join("scratch.img");
    fs::File::create(&disk)?.set_len(2 << 30)?; // sparse

    run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-L", "scratch"])
        .arg(&disk))?;
    let serial = dir.join("serial.log");
    eprintln!(
        "vmtest: booting {name} ({}) under TCG; serial log {}",
        k.release,
        serial.display()
    );
    let mut qemu = Command::new("qemu-system-x86_64");
    // One TCG thread runs both vCPUs in turn. With a thread per vCPU (qemu 7.2's default),
    // a vCPU could run a stale translation of code that the other had just patched: the
    // kernel then died on an int3 of its own text patching (tracepoint and static-key
    // switches, which every attach and detach makes): both boots of a 6.12 run, twice.
    qemu.args([
        "-accel",
        "tcg,thread=single",
        "-cpu",
        "max",
        "-smp",
        "2",
        "-m",
        "2048",
    ])
    .args(["-display", "none", "-no-reboot", "-nodefaults"])
    .arg("-serial")
    .arg(format!("file:{}", serial.display()))
    .arg("-kernel")
    .arg(&k.vmlinuz)
    .arg("-initrd")
    .arg(&initrd)
    // loglevel 5: the registers and stack under a soft-lockup or stall report are printed
    // at the default level (4), which loglevel 4 hides.
    .args(["-append", "console=ttyS0 panic=-1 loglevel=5 rdinit=/init"])
    .arg("-drive")
    .arg(format!("file={},if=virtio,format=raw", disk.display()))
    .arg("-virtfs")
    .arg(format!(
        "local,path={},mount_tag=share,security_model=none,id=share",
        work.display()
    ))
    .stdin(Stdio::null())
    .stdout(Stdio::null());
    let mut child = qemu.spawn().context("cannot start qemu-system-x86_64")?;
    let deadline = Instant::now() + KERNEL_TIMEOUT;
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break Some(st);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let mut tests = BTreeMap::new();
    let mut codes = Vec::new();
    let mut ran = Vec::new();
    let mut expected = Vec::new();
    let mut text = String::new();
    for (i, bin) in bins.tests.iter().enumerate() {
        let out = fs::read_to_string(results.join(format!("{i}.txt"))).unwrap_or_default();
        let mut names = BTreeSet::new();
        for line in out.lines() {
            if let Some(rest) = line.strip_prefix("test ")
                && let Some((name, result)) = rest.split_once(" ... ")
            {
                let r = result.split([',', ' ']).next().unwrap_or("").to_owned();
                tests.insert(name.to_owned(), r);
                names.insert(name.to_owned());
            }
        }
        ran.push(names);
        expected.push(expected_tests(bin, &guest_filter(bin, filter))?);
        codes.push(
            fs::read_to_string(results.join(format!("{i}.rc")))
                .ok()
                .map(|rc| rc.trim().parse().unwrap_or(-1)),
        );
        text.push_str(&out);
    }
    let mut faults = missing_results(&bins.tests, &expected, &ran, &codes);
    let codes: Vec<i32> = codes.into_iter().map(|c| c.unwrap_or(-1)).collect();
    let serial_text = fs::read_to_string(&serial).unwrap_or_default();
    let trouble = kernel_trouble(&serial_text);
    // A test that started and never ended: the guest died or hung under it.
    let unfinished = tests
        .iter()
        .find(|(_, r)| r.is_empty())
        .map(|(n, _)| n.clone());
    let first_error = trouble
        .as_ref()
        .and_then(|t| t.lines().next())
        .map(str::to_owned)
        .or_else(|| {
            text.lines().chain(serial_text.lines()).find_map(|l| {
                (l.contains("profiler: error:")
                    || l.contains("panicked at")
                    || l.contains("init: FAILED"))
                .then(|| l.trim().chars().take(240).collect())
            })
        })
        .or_else(|| match status {
            None => Some(format!("timed out after {KERNEL_TIMEOUT:?}")),
            Some(_) if !serial_text.contains("init: done") => {
                Some("the guest stopped before its init script ended".to_owned())
            }
            Some(_) => None,
        })
        .map(|e| match &unfinished {
            Some(t) => format!("{e} (during {t})"),
            None => e,
        });
    if let Some(t) = &trouble {
        faults.push(format!(
            "the guest kernel reported trouble: {}",
            t.lines().next().unwrap_or_default()
        ));
    }
    if status.is_none() {
        faults.push(format!("timed out after {KERNEL_TIMEOUT:?}"));
    } else if !serial_text.contains("init: done") {
        faults.push("the guest stopped before its init script ended".to_owned());
    }
    let mut outcome = Outcome {
        release: k.release.clone(),
        tests,
        codes,
        logs: dir.clone(),
        first_error,
        faults,
    };
    // CI keeps only what is printed: show the kernel's own account of what went wrong.
    if let Some(t) = &trouble {
        eprintln!("vmtest: {name}: the guest kernel reported:\n{t}");
    }
    if status.is_none() {
        outcome.codes.push(-1);
    }
    // Keep the logs of failed runs; drop the rest (the disk image is large).
    let _ = fs::remove_file(&disk);
    if outcome.passed() {
        let _ = fs::remove_dir_all(dir.join("initramfs"));
    }
    Ok(outcome)
}

/// Kernel messages that mean the guest itself went wrong (not a test), as they appear on the
/// serial console.
const KERNEL_TROUBLE: &[&str] = &[
    "Kernel panic",
    "BUG:",
    "Oops",
    "general protection fault",
    "watchdog:",
    "rcu: INFO:",
    "self-detected stall",
    "WARNING:",
];

/// The first kernel report of trouble on the serial console and the lines after it (its
/// registers and stack), at most 60 lines.
fn kernel_trouble(serial: &str) -> Option<String> {
    let lines: Vec<&str> = serial.lines().collect();
    let first = lines
        .iter()
        .position(|l| KERNEL_TROUBLE.iter().any(|p| l.contains(p)))?;
    let end = (first + 60).min(lines.len());
    Some(lines[first..end].join("\n"))
}

/// Copy a host program into the guest's root at the same path, with the shared libraries
/// and the loader it links (as ldd lists them).
fn copy_with_libraries(bin: &Path, stage: &Path) -> Result<()> {
    let ldd = output(Command::new("ldd").arg(bin))
        .with_context(|| format!("{} is not installed", bin.display()))?;
    let mut files = vec![bin.to_path_buf()];
    for line in ldd.lines() {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux... (0x...)"
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            files.push(PathBuf::from(p));
        }
    }
    for f in files {
        let to = stage.join(f.strip_prefix("/").unwrap_or(&f));
        fs::create_dir_all(to.parent().unwrap())?;
        fs::copy(&f, &to).with_context(|| format!("cannot copy {}", f.display()))?;
    }
    Ok(())
}

/// The guest's /init: mount what the tests need, load the modules, run the tests, power off.
fn init_script(
    modules: &[String],
    bins: &Bins,
    work: &Path,
    results: &Path,
    filter: Option<&str>,
) -> String {
    let mut s =
        String::from("#!/bin/busybox sh\n/bin/busybox --install -s /bin\nexport PATH=/bin\n");
    s.push_str(
        "mount -t proc proc /proc\nmount -t sysfs sysfs /sys\nmount -t devtmpfs devtmpfs /dev\n\
         mount -t tmpfs tmpfs /tmp\n",
    );
    for m in modules {
        s.push_str(&format!(
            "insmod /modules/{m} || echo \"init: FAILED insmod {m}\"\n"
        ));
    }
    let w = work.display();
    s.push_str(&format!(
        "mount -t cgroup2 cgroup2 /sys/fs/cgroup || echo 'init: FAILED cgroup2'\n\
         echo '+cpu +io +memory +pids' > /sys/fs/cgroup/cgroup.subtree_control || echo 'init: FAILED controllers'\n\
         mount -t bpf bpf /sys/fs/bpf\n\
         mount -t tracefs tracefs /sys/kernel/tracing\n\
         mkdir -p {w} /scratch\n\
         mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 share {w} || echo 'init: FAILED 9p'\n\
         mount -t ext4 /dev/vda /scratch || echo 'init: FAILED scratch disk'\n\
         echo \"init: kernel $(uname -r), cgroup2 controllers: $(cat /sys/fs/cgroup/cgroup.subtree_control), clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)\"\n\
         mount -t tmpfs tmpfs /run\n\
         cd /tmp\n\
         ip link set lo up\n\
         export HOME=/tmp RUST_BACKTRACE=1 PROFILER_BIN={} BUSY_BIN={} NETPEER_BIN={} PROFILER_SCRATCH=/scratch PROFILER_TEST_TIME_SCALE={TIME_SCALE}\n\
         export PATH=/bin:/usr/bin:/usr/sbin PROFILER_STATIC_BINS={}\n\
         # A pure cgroup v2 guest: every test's execs must get these controllers.\n\
         export PROFILER_TEST_CONTROLLERS='cpu io memory pids'\n\
         # The guest's root is the initramfs, where pivot_root(2) cannot work.\n\
         export PROFILER_TEST_NO_PIVOT=1\n",
        bins.profiler.display(),
        bins.busy.display(),
        bins.netpeer.display(),
        bins.busy.parent().unwrap_or(Path::new("/")).display(),
    ));
    for (i, t) in bins.tests.iter().enumerate() {
        let r = results.display();
        let filter = guest_filter(t, filter);
        s.push_str(&format!(
            "{} --test-threads=1 --include-ignored --show-output {filter} > {r}/{i}.txt 2>&1\necho $? > {r}/{i}.rc\n",
            t.display()
        ));
    }
    // An emulated guest's TSC can be found unstable under load: the scheduler's clock (on-CPU
    // times) then steps by ticks, which a test comparing it with CLOCK_MONOTONIC must know.
    s.push_str(
        "dmesg | grep -i -E 'unstable|switched to clocksource' | sed 's/^/init: clock: /'\n\
         sync\necho 'init: done'\npoweroff -f\n",
    );
    s
}

fn build_initramfs(
    k: &Kernel,
    bins: &Bins,
    work: &Path,
    results: &Path,
    filter: Option<&str>,
    stage: &Path,
    out: &Path,
) -> Result<()> {
    let _ = fs::remove_dir_all(stage);
    for d in ["bin", "proc", "sys", "dev", "tmp", "run", "modules"] {
        fs::create_dir_all(stage.join(d))?;
    }
    fs::copy("/bin/busybox", stage.join("bin/busybox"))
        .context("busybox-static is not installed")?;
    let order = guest_modules(k, &stage.join("modules"))?;
    for tool in GUEST_RUNTIME_TOOLS {
        copy_with_libraries(Path::new(tool), stage)?;
    }
    let init = stage.join("init");
    fs::write(&init, init_script(&order, bins, work, results, filter))?;
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(&init, fs::Permissions::from_mode(0o755))?;
    // cpio -o -H newc, gzip.
    let list = output(Command::new("find").arg(".").current_dir(stage))?;
    let mut cpio = Command::new("cpio")
        .args(["-o", "-H", "newc", "--quiet", "-R", "0:0"])
        .current_dir(stage)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    cpio.stdin.take().unwrap().write_all(list.as_bytes())?;
    let archive = cpio.wait_with_output()?;
    if !archive.status.success() {
        bail!("cpio failed");
    }
    let mut gz = Command::new("gzip")
        .arg("-1")
        .stdin(Stdio::piped())
        .stdout(fs::File::create(out)?)
        .spawn()?;
    gz.stdin.take().unwrap().write_all(&archive.stdout)?;
    if !gz.wait()?.success() {
        bail!("gzip failed");
    }
    Ok(())
}

/// Copy the modules the guest needs (and what they depend on), decompressed, into `dest`;
/// returns them in load order. Modules built into the kernel are skipped.
fn guest_modules(k: &Kernel, dest: &Path) -> Result<Vec<String>> {
    let mut by_name: HashMap<String, PathBuf> = HashMap::new();
    let mut stack = vec![k.modules.join("kernel")];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d)?.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Some(n) = p.file_name().and_then(|n| n.to_str())
                && let Some(stem) = n.split(".ko").next().filter(|_| n.contains(".ko"))
            {
                by_name.insert(stem.replace('-', "_"), p.clone());
            }
        }
    }
    let builtin = fs::read_to_string(k.modules.join("modules.builtin"))
        .with_context(|| format!("kernel {} packages have no modules.builtin", k.release))?;
    let is_builtin = |m: &str| {
        builtin.lines().any(|l| {
            l.rsplit('/')
                .next()
                .and_then(|f| f.strip_suffix(".ko"))
                .map(|f| f.replace('-', "_"))
                == Some(m.to_owned())
        })
    };
    let mut order = Vec::new();
    let mut done = HashSet::new();
    fn visit(
        m: &str,
        by_name: &HashMap<String, PathBuf>,
        done: &mut HashSet<String>,
        order: &mut Vec<(String, Vec<u8>)>,
    ) -> Result<bool> {
        let key = m.replace('-', "_");
        if done.contains(&key) {
            return Ok(true);
        }
        let Some(path) = by_name.get(&key) else {
            return Ok(false);
        };
        done.insert(key.clone());
        let bytes = decompress(path)?;
        for dep in modinfo(&bytes, "depends")
            .split(',')
            .filter(|d| !d.is_empty())
        {
            visit(dep, by_name, done, order)?;
        }
        order.push((format!("{key}.ko"), bytes));
        Ok(true)
    }
    for m in GUEST_MODULES {
        let found = visit(m, &by_name, &mut done, &mut order)?;
        if !found && !is_builtin(&m.replace('-', "_")) && !m.starts_with("crc32c") {
            bail!(
                "kernel {} has no module {m} and does not build it in",
                k.release
            );
        }
    }
    let mut names = Vec::new();
    for (name, bytes) in order {
        fs::write(dest.join(&name), bytes)?;
        names.push(name);
    }
    Ok(names)
}

fn decompress(path: &Path) -> Result<Vec<u8>> {
    let name = path.to_string_lossy();
    if name.ends_with(".xz") {
        Ok(Command::new("xz").arg("-dc").arg(path).output()?.stdout)
    } else if name.ends_with(".zst") {
        Ok(Command::new("zstd")
            .args(["-dcq"])
            .arg(path)
            .output()?
            .stdout)
    } else if name.ends_with(".gz") {
        Ok(Command::new("gzip").arg("-dc").arg(path).output()?.stdout)
    } else {
        Ok(fs::read(path)?)
    }
}

/// A field of a module's .modinfo section ("key=value" strings, NUL-separated).
fn modinfo(ko: &[u8], key: &str) -> String {
    let pat = format!("{key}=");
    for s in ko.split(|&b| b == 0) {
        if let Some(v) = s.strip_prefix(pat.as_bytes()) {
            return String::from_utf8_lossy(v).into_owned();
        }
    }
    String::new()
}

fn print_table(table: &[(String, String, Result<Outcome>)], took: Duration) {
    let mut names: Vec<String> = Vec::new();
    for (_, _, o) in table {
        if let Ok(o) = o {
            for t in o.tests.keys() {
                if !names.contains(t) {
                    names.push(t.clone());
                }
            }
        }
    }
    names.sort();
    println!(
        "\nvmtest: results per kernel ({:.1} min in all)",
        took.as_secs_f64() / 60.0
    );
    print!("{:<55}", "test");
    for (n, rel, _) in table {
        print!(
            " {:>22}",
            format!("{n} ({rel})").chars().take(22).collect::<String>()
        );
    }
    println!();
    for t in &names {
        print!("{:<55}", t.chars().take(55).collect::<String>());
        for (_, _, o) in table {
            let r = match o {
                Ok(o) => o.tests.get(t).cloned().unwrap_or_else(|| "-".into()),
                Err(_) => "-".into(),
            };
            print!(" {r:>22}");
        }
        println!();
    }
    for (n, _, o) in table {
        match o {
            Ok(o) if o.passed() => println!("vmtest: {n}: all passed"),
            Ok(o) => println!(
                "vmtest: {n}: FAILED (exit codes {:?}){}{}; logs kept in {}",
                o.codes,
                o.faults
                    .iter()
                    .map(|f| format!("; {f}"))
                    .collect::<String>(),
                o.first_error
                    .as_ref()
                    .map(|e| format!("; first error: {e}"))
                    .unwrap_or_default(),
                o.logs.display()
            ),
            Err(e) => println!("vmtest: {n}: could not run: {e:#}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_without_every_code_and_expected_test_fails() {
        let set = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        let bins = [PathBuf::from("/t/engine-1"), PathBuf::from("/t/network-2")];
        let ok = missing_results(
            &bins,
            &[set(&["a", "b"]), set(&["host_netns_x"])],
            &[set(&["a", "b"]), set(&["host_netns_x"])],
            &[Some(0), Some(0)],
        );
        assert!(ok.is_empty(), "{ok:?}");
        let bad = missing_results(
            &bins,
            &[set(&["a", "b"]), set(&[])],
            &[set(&["a"]), set(&[])],
            &[Some(0), None],
        );
        assert_eq!(
            bad,
            [
                r#"engine-1: tests that did not run: ["b"]"#,
                "network-2 left no exit code",
                "network-2: its filter matches no test",
            ]
        );
        let o = |faults: Vec<String>| Outcome {
            release: "6.1".into(),
            tests: BTreeMap::from([("a".to_owned(), "ok".to_owned())]),
            codes: vec![0],
            logs: PathBuf::new(),
            first_error: None,
            faults,
        };
        assert!(o(vec![]).passed());
        assert!(
            !o(vec![
                "the guest stopped before its init script ended".into()
            ])
            .passed()
        );
    }

    #[test]
    fn kernel_trouble_is_found_with_its_stack() {
        let serial = "init: kernel 6.12.95+deb12-amd64\n\
            [    5.448829] amd_pstate: the _CPC object is not present in SBIOS or ACPI disabled\n\
            [   38.809909] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI\n\
            [   38.810721] RIP: 0010:ttwu_do_activate+0x8d/0x220\n\
            [   38.813207] Call Trace:\n";
        let t = kernel_trouble(serial).unwrap();
        assert!(t.starts_with("[   38.809909] Oops: int3"), "{t}");
        assert!(t.ends_with("Call Trace:"), "{t}");
        assert_eq!(kernel_trouble("init: kernel 6.1\ninit: done\n"), None);
    }
}
