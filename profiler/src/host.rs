//! Facts of the host the profiler runs on, and the knobs it sets: privileges, delay
//! accounting, the host's network namespace, the kernel's release, HZ and CPUs.

use std::fs;

use anyhow::{Context as _, Result, bail};

/// Refuse early, with the fix, when the process cannot load BPF programs.
pub fn check_privileges() -> Result<()> {
    if nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let caps = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    const CAP_SYS_ADMIN: u64 = 21;
    const CAP_PERFMON: u64 = 38;
    const CAP_BPF: u64 = 39;
    let has = |c: u64| caps & (1 << c) != 0;
    if has(CAP_SYS_ADMIN) && has(CAP_BPF) && has(CAP_PERFMON) {
        return Ok(());
    }
    bail!(
        "profiler needs root privileges (CAP_SYS_ADMIN, CAP_BPF and CAP_PERFMON) to load its \
         eBPF programs; run it as root, e.g. with sudo"
    )
}

/// Delay accounting gives the IO-wait and memory-stall figures; it is off by default and only
/// tasks started while it is on have it. Turn it on (it stays on: other profilers may rely on it).
pub fn enable_delay_accounting() -> Option<String> {
    const KNOB: &str = "/proc/sys/kernel/task_delayacct";
    match fs::read_to_string(KNOB) {
        Ok(v) if v.trim() == "1" => None,
        Ok(_) => match fs::write(KNOB, "1") {
            Ok(()) => {
                eprintln!(
                    "profiler: enabled kernel.task_delayacct for IO-wait figures \
                     (tasks started earlier have none)"
                );
                None
            }
            Err(e) => Some(format!(
                "cannot enable kernel.task_delayacct ({e}): no IO-wait figures"
            )),
        },
        Err(_) => Some(
            "kernel has no delay accounting (CONFIG_TASK_DELAY_ACCT): no IO-wait figures".into(),
        ),
    }
}

/// Inode number of the profiler's own network namespace: the host's, as it runs there.
pub fn own_netns_inum() -> Result<u32> {
    use std::os::unix::fs::MetadataExt as _;
    let m = fs::metadata("/proc/self/ns/net").context("cannot read /proc/self/ns/net")?;
    Ok(m.ino() as u32)
}

/// The running kernel's release string.
pub fn kernel_release() -> String {
    nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".into())
}

/// The host's name (empty when unknown).
pub fn host_name() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The operating system as uname(2) describes it: "sysname release version".
pub fn os_description() -> String {
    nix::sys::utsname::uname()
        .map(|u| {
            format!(
                "{} {} {}",
                u.sysname().to_string_lossy(),
                u.release().to_string_lossy(),
                u.version().to_string_lossy()
            )
        })
        .unwrap_or_default()
}

/// CONFIG_HZ of the running kernel, from its configuration (when the host has it).
pub fn kernel_hz() -> Option<u32> {
    let release = kernel_release();
    let text = std::fs::read_to_string(format!("/boot/config-{release}"))
        .ok()
        .or_else(|| {
            let gz = std::fs::read("/proc/config.gz").ok()?;
            let mut s = String::new();
            std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&gz[..]), &mut s)
                .ok()?;
            Some(s)
        })?;
    text.lines()
        .find_map(|l| l.strip_prefix("CONFIG_HZ="))
        .and_then(|v| v.trim().parse().ok())
}

/// Number of possible CPUs (highest possible CPU + 1).
pub fn possible_cpus() -> u32 {
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| {
            s.trim()
                .split(',')
                .filter_map(|r| r.rsplit('-').next()?.parse::<u32>().ok())
                .max()
        })
        .map(|m| m + 1)
        .unwrap_or(1)
}
