//! The guest's initramfs: busybox, the runtime tools with their libraries, the modules the
//! guest needs, and the /init that mounts what the tests need, runs them and powers off.

use std::{
    collections::{HashMap, HashSet},
    fs,
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, Result, bail};

use super::{Bins, GUEST_MODULES, GUEST_RUNTIME_TOOLS, TIME_SCALE, guest_filter, kernels::Kernel};
use crate::output;

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

pub(super) fn build_initramfs(
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
