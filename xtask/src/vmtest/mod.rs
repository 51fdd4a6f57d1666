//! `cargo xtask vmtest`: run the privileged test suite inside qemu on a matrix of Debian stock
//! kernels, each booted with pure cgroup v2 (+cpu +io +memory +pids), bpffs, tracefs, a virtio
//! scratch disk and the host's build shared over 9p.
//!
//! Everything comes from Debian packages: the kernels (fetched with a private apt
//! configuration, so the host's sources stay untouched), busybox-static for the initramfs,
//! qemu, e2fsprogs and cpio.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

mod initramfs;
mod kernels;

use self::{
    initramfs::build_initramfs,
    kernels::{Apt, Kernel, fetch_kernel},
};
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
    // The guests run the containerd, runc and crun tests with the host's binaries (crun
    // refuses a hybrid host: the guests are where its containers run).
    ("containerd", "containerd"),
    ("runc", "runc"),
    ("crun", "crun"),
];

/// Container runtime programs copied into the guests, with the libraries they link.
const GUEST_RUNTIME_TOOLS: &[&str] = &[
    "/usr/bin/containerd",
    "/usr/bin/containerd-shim-runc-v2",
    "/usr/bin/ctr",
    "/usr/sbin/runc",
    "/usr/bin/crun",
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
            "lifecycle-",
            "vm-",
            "cgroup-",
            "network-",
            "runtimes-",
            "check-",
        ]
        .iter()
        .any(|p| n.starts_with(p))
    });
    if tests.len() < 7 {
        bail!(
            "did not find the engine, lifecycle, cgroup, network, runtimes, check and vm test \
             binaries \
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
/// the host namespace run; of the runtime tests, those of containerd, runc and crun, as there
/// is no dockerd or podman).
fn guest_filter(bin: &Path, filter: Option<&str>) -> String {
    let name = bin.file_name().unwrap_or_default().to_string_lossy();
    match filter {
        Some(f) => f.to_owned(),
        None if name.starts_with("network-") => "host_netns".into(),
        None if name.starts_with("runtimes-") => "containerd_and_runc crun_containers".into(),
        None => String::new(),
    }
}

/// What a run lacks: each binary's exit code, and each test its list says must run.
/// `user_filter`: the user's own filter, which may match tests of some binaries only (one of
/// them must match); else each binary's guest filter must match some of its tests.
fn missing_results(
    bins: &[PathBuf],
    expected: &[BTreeSet<String>],
    ran: &[BTreeSet<String>],
    codes: &[Option<i32>],
    user_filter: bool,
) -> Vec<String> {
    let mut faults = Vec::new();
    if user_filter && expected.iter().all(|e| e.is_empty()) {
        faults.push("the filter matches no test".to_owned());
    }
    for (i, bin) in bins.iter().enumerate() {
        let name = bin.file_name().unwrap_or_default().to_string_lossy();
        if codes[i].is_none() {
            faults.push(format!("{name} left no exit code"));
        }
        if expected[i].is_empty() && !user_filter {
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
    let mut faults = missing_results(&bins.tests, &expected, &ran, &codes, filter.is_some());
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
            false,
        );
        assert!(ok.is_empty(), "{ok:?}");
        let bad = missing_results(
            &bins,
            &[set(&["a", "b"]), set(&[])],
            &[set(&["a"]), set(&[])],
            &[Some(0), None],
            false,
        );
        assert_eq!(
            bad,
            [
                r#"engine-1: tests that did not run: ["b"]"#,
                "network-2 left no exit code",
                "network-2: its filter matches no test",
            ]
        );
        // The user's filter may match one binary's tests alone, not none at all.
        let one = [set(&["a"]), set(&[])];
        assert!(missing_results(&bins, &one, &one, &[Some(0), Some(0)], true).is_empty());
        let none = [set(&[]), set(&[])];
        assert_eq!(
            missing_results(&bins, &none, &none, &[Some(0), Some(0)], true),
            ["the filter matches no test"]
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
