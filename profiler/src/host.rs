//! Facts of the host the profiler runs on, and the knobs it sets: privileges, delay
//! accounting, the host's network namespace, the kernel's release, HZ and CPUs.

use std::fs;

use anyhow::{Context as _, Result, bail};

/// Capability numbers (linux/capability.h) that the profiler asks about.
pub const CAP_DAC_OVERRIDE: u32 = 1;
pub const CAP_DAC_READ_SEARCH: u32 = 2;
pub const CAP_NET_ADMIN: u32 = 12;
pub const CAP_SYS_PTRACE: u32 = 19;
pub const CAP_SYS_ADMIN: u32 = 21;
pub const CAP_PERFMON: u32 = 38;
pub const CAP_BPF: u32 = 39;

/// The effective capabilities (CapEff) of a /proc/PID/status text.
pub fn cap_eff(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

/// This process's effective capabilities.
pub fn effective_caps() -> Option<u64> {
    cap_eff(&fs::read_to_string("/proc/self/status").ok()?)
}

/// Refuse early, with the fix, when the process cannot load BPF programs: that takes CAP_BPF
/// and CAP_PERFMON (or CAP_SYS_ADMIN, which stands in for both), whatever the uid (root with a
/// reduced bounding set has not got them).
pub fn check_privileges() -> Result<()> {
    let caps = effective_caps().unwrap_or(0);
    let has = |c: u32| caps & (1 << c) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        return Ok(());
    }
    let missing: Vec<&str> = [(CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")]
        .into_iter()
        .filter(|&(c, _)| !has(c))
        .map(|(_, n)| n)
        .collect();
    bail!(
        "profiler needs root privileges to load its eBPF programs: {} missing (CAP_BPF: create \
         the maps and load the programs; CAP_PERFMON: the tracing programs); run it as root, \
         e.g. with sudo, or grant those capabilities",
        missing.join(" and ")
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
                log::info!(
                    "enabled kernel.task_delayacct for IO-wait figures \
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

/// The host's name, as every output names it (records, OTLP resource, Prometheus
/// `target_info`): `host.name` of OTEL_RESOURCE_ATTRIBUTES where set (two profilers on one
/// machine, or a container whose hostname is its id), else the hostname; empty when unknown.
pub fn host_name() -> &'static str {
    static NAME: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        std::env::var("OTEL_RESOURCE_ATTRIBUTES")
            .ok()
            .and_then(|a| resource_attribute(&a, "host.name"))
            .unwrap_or_else(|| {
                nix::unistd::gethostname()
                    .map(|h| h.to_string_lossy().into_owned())
                    .unwrap_or_default()
            })
    });
    &NAME
}

/// One attribute of an OTEL_RESOURCE_ATTRIBUTES value (`k=v,k2=v2`, values percent-encoded),
/// when set and not blank.
fn resource_attribute(list: &str, key: &str) -> Option<String> {
    let v = list.split(',').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k.trim() == key).then(|| v.trim())
    })?;
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |j: usize| b.get(j).and_then(|c| (*c as char).to_digit(16));
        match (b[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned()).filter(|s| !s.trim().is_empty())
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

#[cfg(test)]
mod tests {
    use super::resource_attribute;

    #[test]
    fn host_name_comes_from_the_resource_attributes() {
        let get = |s| resource_attribute(s, "host.name");
        assert_eq!(get("host.name=ci-7").as_deref(), Some("ci-7"));
        assert_eq!(
            get("service.name=x, host.name = a%20b%2Cc ,k=v").as_deref(),
            Some("a b,c")
        );
        assert_eq!(get("host.name=%zz").as_deref(), Some("%zz"));
        assert_eq!(get("host.name=  ,x=1"), None);
        assert_eq!(get("service.name=x"), None);
        assert_eq!(get(""), None);
    }
}
